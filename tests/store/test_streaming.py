"""Streaming reads and materialisation (DESIGN contract 6): bounded groups, same rows as the lazy join."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from fabrika import gates
from fabrika.pipeline import registry
from fabrika.store import RunStore, versions
from fabrika.store import run as run_module
from fabrika.store.versions import materialise

ANNOTATORS = ["filter.length", "filter.dedup"]
THRESHOLDS = {"length": {"max_tokens": 450}}


def _run(tmp_path: Path, n: int = 40, per_shard: int = 7, duplicate: bool = False) -> Path:
    """``data`` in shards of ``per_shard`` rows whose schemas differ (``extra`` only in some, an int
    column that is null in one shard), annotated by two scorers in another order, one id missing
    (and, with ``duplicate``, one duplicated) in the length scorer."""
    run = tmp_path / "run"
    store = RunStore(run)
    ids = [f"id{i:03d}" for i in range(n)]
    rows = [{"id": i, "input_id": i, "status": "rejected" if k % 9 == 4 else "ok", "reason": None,
             "text": f"текст {i} " * (k % 5 + 1), "n": None if k < per_shard else k} for k, i in enumerate(ids)]
    for s in range(0, n, per_shard):
        chunk = [dict(r, extra=f"x{r['id']}") if (s // per_shard) % 2 else r for r in rows[s:s + per_shard]]
        store.write("data", chunk)
    scrambled = ids[1::2] + ids[0::2]
    length = [{"id": i, "input_id": i, "status": "ok", "reason": None, "len_total_tokens": 25 * k}
              for k, i in enumerate(scrambled) if i != "id004"]  # a rejected row: never kept
    if duplicate:
        length.append(dict(length[0], len_total_tokens=1))  # duplicated annotation: the join repeats that row
    for s in range(0, len(length), 11):
        store.write("filter.length", length[s:s + 11])
    store.write("filter.dedup", [{"id": i, "input_id": i, "status": "ok", "reason": None,
                                  "dup_is_representative": k % 6 != 1} for k, i in enumerate(reversed(ids))])
    layout = {"data": {"inputs": [], "annotates": False},
              **{a: {"inputs": ["data"], "annotates": True} for a in ANNOTATORS}}
    store.write_manifest({"config": {"dataset": {"stages": ["data"]}, "filters": THRESHOLDS},
                          "order": list(layout), "layout": layout})
    registry.load_run_modules(store.read_manifest())
    return run


@pytest.mark.parametrize("max_rows", [1, 7, 20, 10_000])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("held", [True, False])
def test_iter_frames_equals_the_lazy_join(tmp_path: Path, max_rows: int, gated: bool, held: bool,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    if not held:  # annotation tables over the budget: scanned per group instead of held in memory
        monkeypatch.setattr(run_module, "ANNOTATION_BYTES", 0)
    store = RunStore(_run(tmp_path))
    where = (lambda lf: gates.gate_lazy(lf, THRESHOLDS)) if gated else None
    whole = store.scan("data", ANNOTATORS)
    if where is not None:
        whole = where(whole)
    want = whole.collect()
    frames = list(store.iter_frames("data", ANNOTATORS, where=where, max_rows=max_rows))
    got = pl.concat(frames)
    # same rows, same columns and types, in shard order (the lazy scan's order here: one schema per shard pair)
    assert got.columns == want.columns and got.schema == want.schema
    assert got.sort("id", "len_total_tokens").equals(want.sort("id", "len_total_tokens"))
    assert got["id"].to_list() == sorted(got["id"].to_list(), key=lambda i: (int(i[2:]) // 7, i))
    if max_rows < 7:
        assert all(f.height <= 8 for f in frames)  # one shard (+ its one duplicated annotation) at a time
    assert store.count_rows("data", ANNOTATORS, where) == want.height
    if gated:  # the gates did drop rows (rejected ones, long ones, non-representatives)
        assert {"id004", "id013"}.isdisjoint(got["id"].to_list()) and want.height < store.count_rows("data")
    else:  # every shard's rows carry every column, null where that shard lacks it
        assert {"extra", "n", "len_total_tokens", "status__filter.dedup"} <= set(frames[0].columns)


def test_iter_frames_columns_and_missing_stage(tmp_path: Path) -> None:
    store = RunStore(_run(tmp_path))
    frames = list(store.iter_frames("data", ANNOTATORS, columns=["id", "dup_is_representative"], max_rows=7))
    assert all(f.columns == ["id", "dup_is_representative"] for f in frames)
    assert list(store.iter_frames("nothing")) == [] and store.count_rows("nothing") == 0


def test_external_sort_writes_the_same_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path, n=200, per_shard=13)
    loose = {"length": {"max_tokens": 100_000}}
    small = materialise(run, loose, name="mem")
    monkeypatch.setattr(versions, "MATERIALISE_BYTES", 1500)  # a few rows per range: the spill path
    spilled = materialise(run, loose, name="spill")
    a = pl.read_parquet(small.path / "data" / "data.parquet")
    b = pl.read_parquet(spilled.path / "data" / "data.parquet")
    assert a.height > 50 and a.equals(b)  # same rows, same order (sorted by id), same types
    assert b["id"].to_list() == sorted(b["id"].to_list())
    assert pq.ParquetFile(spilled.path / "data" / "data.parquet").num_row_groups > 3  # it really spilled
    assert not list(spilled.path.glob(".spill-*")) and small.funnel == spilled.funnel


def test_groups_are_sized_by_memory_not_footer_bytes(tmp_path: Path) -> None:
    from fabrika.store import shards
    store = RunStore(tmp_path / "run")
    for s in range(4):  # repetitive text: parquet's (dictionary-encoded) size is far below memory
        store.write("t", [{"id": f"{s}-{i}", "text": "одно и то же " * 200} for i in range(50)])
    files = store.shards("t")
    ratio = shards.memory_ratio(files[0])
    in_memory = pl.read_parquet(files[0]).estimated_size()
    assert ratio > 2 and abs(shards.shard_size(files[0])[1] * ratio - in_memory) <= 1
    assert [len(g) for g in shards.group_files(files, 10**9, int(in_memory * 2.5), ratio)] == [2, 2]
    assert [len(g) for g in shards.group_files(files, 10**9, 1, ratio)] == [1, 1, 1, 1]  # a big shard: alone
    assert [len(g) for g in shards.group_files(files, 120, 10**12)] == [2, 2]  # the row bound
