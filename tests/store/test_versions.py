"""Materialisation: the narrow gate decision equals the joined one; dropped rows; counts reused across refilters."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from fabrika import gates
from fabrika.pipeline import registry
from fabrika.store import RunStore, versions
from fabrika.store.versions import materialise

ANNOTATORS = ["filter.length", "filter.dedup"]


def _run(tmp_path: Path, *, missing: str | None = None, reverse: bool = False) -> Path:
    """A run: ``data`` (6 rows over 2 shards) annotated by a length and a dedup scorer (in another order)."""
    run = tmp_path / "run"
    store = RunStore(run)
    ids = [f"id{i}" for i in range(6)]
    rows = [{"id": i, "input_id": i, "status": "rejected" if i == "id5" else "ok", "reason": None,
             "lang": "ru", "text": f"текст {i}"} for i in ids]
    store.write("data", rows[:3])
    store.write("data", rows[3:])
    order = list(reversed(ids)) if reverse else ids
    store.write("filter.length", [{"id": i, "input_id": i, "status": "ok", "reason": None, "lang": "en",
                                   "len_total_tokens": 100 * (k + 1)} for k, i in enumerate(order) if i != missing])
    store.write("filter.dedup", [{"id": i, "input_id": i, "status": "ok", "reason": None,
                                  "dup_is_representative": i != "id1"} for i in order])
    layout = {"data": {"inputs": [], "annotates": False},
              **{a: {"inputs": ["data"], "annotates": True} for a in ANNOTATORS}}
    store.write_manifest({"config": {"dataset": {"stages": ["data"]}, "filters": {}}, "status": "done",
                          "order": list(layout), "layout": layout,
                          "stages": {name: {"complete": True} for name in layout}})
    return run


THRESHOLDS = {"length": {"max_tokens": 450}}


@pytest.mark.parametrize("reverse", [False, True])
def test_aligned_gate_table_equals_the_left_join(tmp_path: Path, reverse: bool) -> None:
    run = _run(tmp_path, reverse=reverse)
    store = RunStore(run)
    registry.load_run_modules(store.read_manifest())
    params = gates.validate_thresholds(THRESHOLDS)
    joined = store.scan("data", ANNOTATORS)
    names = joined.collect_schema().names()
    table = versions._aligned_gate_table(store, "data", ANNOTATORS, names, params)
    assert table is not None
    want = joined.select(table.columns).sort("id").collect()
    assert table.equals(want) and "status__filter.length" in table.columns


def test_unaligned_annotations_fall_back_to_the_join(tmp_path: Path) -> None:
    run = _run(tmp_path, missing="id5")  # the rejected row: unscored, but dropped anyway
    store = RunStore(run)
    registry.load_run_modules(store.read_manifest())
    params = gates.validate_thresholds(THRESHOLDS)
    names = store.scan("data", ANNOTATORS).collect_schema().names()
    assert versions._aligned_gate_table(store, "data", ANNOTATORS, names, params) is None
    info = materialise(run, THRESHOLDS, name="v1")
    marked, _ = gates.mark_dropped(store.scan("data", ANNOTATORS), THRESHOLDS)
    want = marked.select("id", gates.DROPPED_BY).sort("id").collect()
    kept = pl.read_parquet(info.path / "data" / "data.parquet")
    dropped = pl.read_parquet(info.path / "dropped" / "data.parquet")
    assert kept["id"].to_list() == want.filter(pl.col(gates.DROPPED_BY).is_null())["id"].to_list()
    assert dropped.equals(want.filter(pl.col(gates.DROPPED_BY).is_not_null()))
    assert {"id1", "id5"} <= set(dropped["id"]) and kept["lang__filter.length"].to_list()[0] == "en"


def test_a_kept_row_a_scorer_never_saw_fails_loudly(tmp_path: Path) -> None:
    from fabrika.errors import StoreError

    run = _run(tmp_path, missing="id2")  # length never scored id2 (an earlier gate dropped it at run time)
    with pytest.raises(StoreError, match=r"keep rows of 'data' that a scorer never saw \(1 by filter.length\).*"
                                         r"fabrika run CONFIG --cache-only --set filters.length.max_tokens=450"):
        materialise(run, THRESHOLDS, name="v1")
    assert not (run / "versions" / "v1").exists()


@pytest.mark.parametrize("reverse", [False, True])
def test_version_files_decisions_and_funnel(tmp_path: Path, reverse: bool) -> None:
    info = materialise(_run(tmp_path, reverse=reverse), THRESHOLDS, name="v1")
    dropped = pl.read_parquet(info.path / "dropped" / "data.parquet")
    assert dropped.columns == ["id", gates.DROPPED_BY]  # no payload copy of dropped rows
    got = dict(dropped.iter_rows())
    if reverse:  # lengths 600, 500, 400, 300, 200, 100 for id0..id5
        want = {"id0": "length.max_tokens", "id1": "dedup.keep_representatives_only", "id5": "rejected"}
        kept_ids = ["id2", "id3", "id4"]
    else:  # lengths 100..600
        want = {"id1": "dedup.keep_representatives_only", "id4": "length.max_tokens", "id5": "rejected"}
        kept_ids = ["id0", "id2", "id3"]
    assert got == want and dropped["id"].to_list() == sorted(want)
    kept = pl.read_parquet(info.path / "data" / "data.parquet")
    assert kept["id"].to_list() == kept_ids and gates.DROPPED_BY not in kept.columns
    assert kept["text"].to_list() == [f"текст {i}" for i in kept_ids]
    gate_funnel = info.funnel["gates"]["data"]
    assert gate_funnel["in"] == 6 and gate_funnel["out"] == 3 and gate_funnel["dropped_rejected"] == 1
    assert set(info.funnel) == {"stages", "gates", "upstream_gates"}
    assert info.funnel["stages"]["data"]["rows"] == 6 and (info.path / "thresholds.json").is_file()


def test_stage_counts_are_reused_until_a_stage_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    first = materialise(run, THRESHOLDS, name="v1")
    counted: list[str] = []
    real = RunStore.counts

    def counting(self: RunStore, stage: str) -> dict:
        counted.append(stage)
        return real(self, stage)

    monkeypatch.setattr(RunStore, "counts", counting)
    second = materialise(run, {"length": {"max_tokens": 10_000}}, name="v2")
    assert counted == [] and second.funnel["stages"] == first.funnel["stages"]
    # a new row no scorer saw yet: rejected here (a kept unscored row would fail the materialisation)
    RunStore(run).write("data", [{"id": "id9", "input_id": "id9", "status": "rejected", "reason": "x", "lang": "ru",
                                  "text": "новый"}])
    third = materialise(run, THRESHOLDS, name="v3")
    assert counted == ["data"] and third.funnel["stages"]["data"]["rows"] == 7


def test_materialise_refuses_when_a_gate_group_of_the_run_is_not_registered(tmp_path: Path) -> None:
    """A gate group the run had but this process never imported would silently apply no gates."""
    from fabrika.errors import StoreError

    run = _run(tmp_path)
    store = RunStore(run)
    manifest = store.read_manifest()
    registry.load_run_modules(manifest)
    store.write_manifest({**manifest, "gate_groups": sorted(gates.GATE_GROUPS)})
    assert materialise(run, THRESHOLDS, name="v1").rows > 0  # every group loaded: fine
    store.write_manifest({**manifest, "gate_groups": ["length", "toxicity"]})  # a plugin's group, not imported
    with pytest.raises(StoreError, match=r"gate group\(s\) toxicity of this run are not registered"):
        materialise(run, THRESHOLDS, name="v2")
    assert not (run / "versions" / "v2").exists()


def test_public_refilter_loads_the_run_s_gate_groups_in_a_fresh_process(tmp_path: Path) -> None:
    """``fabrika.refilter`` from a new interpreter: nothing imported the stage modules beforehand."""
    import subprocess
    import sys

    run = _run(tmp_path)
    store = RunStore(run)
    manifest = store.read_manifest()
    store.write_manifest({**manifest, "gate_groups": ["dedup", "length"]})  # registered by the registry's modules
    code = ("import sys, fabrika; info, _ = fabrika.refilter(sys.argv[1], ['filters.length.max_tokens=350']); "
            "print(info.rows)")
    out = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2"]  # id0, id2 (id1 is a dedup duplicate, id3+ too long, id5 rejected)
