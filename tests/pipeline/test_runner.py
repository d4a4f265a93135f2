"""Runner: counts, rejections as data, resume, determinism, bounded concurrency, streaming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from fabrika.llm.config import LLMConfig
from fabrika.pipeline.config import PipelineConfig, validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.store import RunStore
from fabrika.testing import ScriptedLLM
from tests.pipeline import pipeline_stages as ps


def make_config(tmp_path: Path, n: int = 30, name: str = "run", **over: object) -> PipelineConfig:
    doc = {
        "name": "t",
        "run_dir": str(tmp_path / name),
        "llm": {"backend": "sim"},
        "stages": [
            {"kind": "test.count", "n": n, "chunk_size": 4},
            {"kind": "test.ask", "input": "test.count", "chunk_size": 4},
            {"kind": "test.score", "name": "judge", "input": "test.ask"},
        ],
        "dataset": {"stages": ["test.ask"]},
        "filters": {"testscore": {"min_score": 0.1}},
    }
    doc.update(over)
    cfg, issues = validate_data(doc, "t.yaml", tmp_path)
    assert cfg is not None, issues
    return cfg


def test_run_counts_rejections_and_materialises(tmp_path: Path, engine: ScriptedLLM) -> None:
    result = run_pipeline(make_config(tmp_path), progress=False, engine=engine)
    stages = result.manifest["stages"]
    # 30 items: i % 7 == 3 rejected (3, 10, 17, 24), i == 13 rejected as unlucky: recorded, not dropped
    assert stages["test.count"]["rows"] == 30
    assert stages["test.count"]["rejected"] == {"too_odd": 4, "unlucky": 1}
    assert engine.calls == 25 and stages["test.ask"]["llm"]["requests"] == 25
    assert ps.stages_seen(engine) == {"test.ask"}  # request.meta["stage"] set by the runner
    row = RunStore(result.run_dir).scan_raw("test.count").filter(pl.col("reason").str.starts_with("unlucky")).collect()
    assert row["reason"][0] == "unlucky: 13" and row["input_id"][0] == row["id"][0]
    # gates: judge fails on i == 5 (rejected), score i/100 < 0.1 drops i < 10
    funnel = result.version.funnel["gates"]["test.ask"]
    assert funnel == {"in": 25, "out": 16, "dropped_rejected": 1, "dropped_low_score": 8}
    assert result.version.funnel["upstream_gates"] == {"test.count": {"in": 30, "out": 25, "dropped_rejected": 5}}
    data = ps.dataset_rows(result.run_dir)
    assert len(data) == 16 and all(r["score"] >= 0.1 and r["llm_backend"] == "scripted" for r in data)
    assert {r["i"] for r in data} == {i for i in range(10, 30) if i % 7 != 3 and i != 13}
    assert all(r["input_id"] for r in data)
    assert (result.run_dir / "versions/v1/dropped/test.ask.parquet").is_file()
    assert sorted(pl.read_parquet(result.run_dir / "versions/v1/dropped/test.ask.parquet")["dropped_by"].unique()) == [
        "low_score", "rejected"]


def test_unchanged_rerun_makes_no_llm_calls_and_same_data(tmp_path: Path, engine: ScriptedLLM) -> None:
    cfg = make_config(tmp_path)
    first = run_pipeline(cfg, progress=False, engine=engine)
    calls = engine.calls
    again = ps.echo_llm()
    second = run_pipeline(cfg, progress=False, engine=again)
    assert again.calls == 0
    assert second.stats["test.ask"].skipped == 25 and second.stats["test.ask"].processed == 0
    assert ps.dataset_rows(first.run_dir) == ps.dataset_rows(second.run_dir)
    assert calls == 25


def test_resume_after_partial_run_completes_without_duplicates(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    partial = cfg.model_copy(deep=True)
    partial.stages[0].max_items = 11
    e1 = ps.echo_llm()
    run_pipeline(partial, progress=False, engine=e1)
    e2 = ps.echo_llm()
    result = run_pipeline(cfg, progress=False, engine=e2)
    assert e1.calls + e2.calls == 25
    ids = RunStore(result.run_dir).scan_raw("test.ask").select("id").collect()["id"]
    assert ids.len() == ids.n_unique() == 25
    clean = run_pipeline(make_config(tmp_path, name="clean"), progress=False, engine=ps.echo_llm())
    assert ps.dataset_rows(result.run_dir) == ps.dataset_rows(clean.run_dir)


def test_no_resume_starts_over(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    run_pipeline(cfg, progress=False, engine=ps.echo_llm())
    e = ps.echo_llm()
    result = run_pipeline(cfg, resume=False, progress=False, engine=e)
    assert e.calls == 25 and result.manifest["stages"]["test.ask"]["rows"] == 25


def test_output_does_not_depend_on_completion_order(tmp_path: Path) -> None:
    a = run_pipeline(make_config(tmp_path, name="a"), progress=False, engine=ps.echo_llm())
    b_cfg = make_config(tmp_path, name="b", max_in_flight=3)
    b_cfg.stages[0].delay = 0.003  # items finish in a scrambled order
    b = run_pipeline(b_cfg, progress=False, engine=ps.echo_llm(delay=0.001))
    assert ps.dataset_rows(a.run_dir) == ps.dataset_rows(b.run_dir)
    va, vb = (r.run_dir / "versions/v1/data/test.ask.parquet" for r in (a, b))
    assert pl.read_parquet(va).equals(pl.read_parquet(vb))  # same rows in the same order, not just the same set
    for stage in ("test.count", "test.ask", "judge"):
        sa = RunStore(a.run_dir).scan_raw(stage).sort("id").collect()
        sb = RunStore(b.run_dir).scan_raw(stage).sort("id").collect()
        assert sa.equals(sb), stage


def test_concurrency_is_bounded_but_parallel(tmp_path: Path) -> None:
    engine = ps.echo_llm(delay=0.01)
    cfg = make_config(tmp_path, n=60)
    cfg.stages[1].max_in_flight = 8
    run_pipeline(cfg, progress=False, engine=engine)
    assert 4 <= engine.peak_in_flight <= 8


def test_input_is_streamed_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source generator is pulled only as fast as items are written: memory stays flat."""
    seen_gap: list[int] = []
    real_write = RunStore.write

    def spying_write(self: RunStore, stage: str, rows: list[dict], **kw: Any) -> Path:
        if stage == "test.count":
            written = sum(len(pl.read_parquet(p, columns=["id"])) for p in self.shards(stage)) + len(rows)
            seen_gap.append(len(ps.PULLED) - written)
        return real_write(self, stage, rows, **kw)

    cfg = make_config(tmp_path, n=2000, stages=[{"kind": "test.count", "n": 2000, "chunk_size": 50, "max_in_flight": 20}],
                      dataset={"stages": ["test.count"]})
    monkeypatch.setattr(RunStore, "write", spying_write)
    run_pipeline(cfg, progress=False, engine=ps.echo_llm())
    assert len(seen_gap) == 40
    # at any shard write, pulled-but-unwritten items <= in-flight bound + one unflushed chunk
    assert max(seen_gap) <= 20 + 50


def test_global_stage_and_reports(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, stages=[
        {"kind": "test.count", "n": 9},
        {"kind": "test.collect", "input": "test.count"},
    ], dataset={"stages": ["test.collect"]})
    result = run_pipeline(cfg, progress=False, engine=ps.echo_llm())
    rows = ps.dataset_rows(result.run_dir)
    assert [r["n"] for r in rows] == [8]  # items 0..8 minus the rejected i == 3 (gated out of its input)
    assert result.manifest["sandbox_isolation"] == "rlimits"  # reported by the stage via ctx.report
    again = run_pipeline(cfg, progress=False, engine=ps.echo_llm())
    assert again.stats["test.collect"].processed == 0  # complete global stage is not redone
    grown = cfg.model_copy(deep=True)
    grown.stages[0].n = 12
    result = run_pipeline(grown, progress=False, engine=ps.echo_llm())
    assert result.stats["test.collect"].processed == 10  # its input grew: redone over all of it
    assert [r["n"] for r in ps.dataset_rows(result.run_dir)] == [10]


def test_rng_is_per_stage_and_item(tmp_path: Path) -> None:
    from fabrika.pipeline.context import item_rng

    assert item_rng(0, "a", "x").random() == item_rng(0, "a", "x").random()
    assert item_rng(0, "a", "x").random() != item_rng(0, "b", "x").random()


def test_downstream_stage_reads_gated_rows_with_scores_joined(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, stages=[
        {"kind": "test.count", "n": 30},
        {"kind": "test.ask", "input": "test.count"},
        {"kind": "test.ask", "name": "ask2", "input": "test.ask"},
        {"kind": "test.score", "name": "judge", "input": "test.ask"},  # listed last, still runs before ask2
    ], dataset={"stages": ["ask2"]})
    engine = ps.echo_llm()
    result = run_pipeline(cfg, progress=True, engine=engine)
    assert result.manifest["order"] == ["test.count", "test.ask", "judge", "ask2"]
    # ask2 only sees test.ask rows passing the judge's gate (16 of 25)
    assert result.manifest["stages"]["ask2"]["seen"] == 16
    assert engine.calls == 25 + 16
    assert all(r["answer"].startswith("echo: echo: ") for r in ps.dataset_rows(result.run_dir))


def test_cache_miss_items_are_left_pending_not_rejected(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    miss = ps.echo_llm(config=LLMConfig(cache_only=True), cache=tmp_path / "empty-cache.sqlite")
    result = run_pipeline(cfg, progress=False, engine=miss)
    assert miss.calls == 0 and miss.cache_misses == 25  # --cache-only: the backend is never asked
    assert result.stats["test.ask"].cache_miss == 25
    assert result.version is None and not RunStore(result.run_dir).has_rows("test.ask")
    assert result.manifest["stages"]["test.ask"]["complete"] is False
    later = run_pipeline(cfg, progress=False, engine=ps.echo_llm())
    assert later.stats["test.ask"].processed == 25


def branches(tmp_path: Path, name: str, parallel: int) -> PipelineConfig:
    return make_config(tmp_path, name=name, max_parallel_stages=parallel, stages=[
        {"kind": "test.count", "n": 40},
        {"kind": "test.ask", "name": "left", "input": "test.count", "max_in_flight": 4},
        {"kind": "test.ask", "name": "right", "input": "test.count", "max_in_flight": 4},
        {"kind": "test.ask", "name": "join", "input": ["left", "right"]},
    ], dataset={"stages": ["join"]})


def test_independent_branches_overlap_without_changing_output(tmp_path: Path) -> None:
    serial_overlap, parallel_overlap = ps.StageOverlap(delay=0.005), ps.StageOverlap(delay=0.005)
    serial = run_pipeline(branches(tmp_path, "serial", 1), progress=False, engine=ScriptedLLM(serial_overlap))
    parallel = run_pipeline(branches(tmp_path, "parallel", 4), progress=False, engine=ScriptedLLM(parallel_overlap))
    assert serial_overlap.peak == 1
    assert parallel_overlap.peak == 2  # left and right at once; join waits for both
    assert parallel.manifest["order"] == ["test.count", "left", "right", "join"]
    assert ps.dataset_rows(serial.run_dir) == ps.dataset_rows(parallel.run_dir)
    # left and right emit the same ids (same salt), so join processes each id once: 40 - 6 rejected - item 13
    assert len(ps.dataset_rows(parallel.run_dir)) == 33


def test_a_failing_stage_raises_its_own_error_and_stops_the_others(tmp_path: Path) -> None:
    from fabrika.errors import InputError

    cfg = make_config(tmp_path, stages=[
        {"kind": "test.count", "n": 400, "delay": 0.01},
        {"kind": "test.badsource"},
    ], dataset={"stages": ["test.count"]})
    with pytest.raises(InputError, match="seeds.jsonl:2"):
        run_pipeline(cfg, progress=False, engine=ps.echo_llm())
    manifest = RunStore(cfg.resolved_run_dir).read_manifest()
    assert manifest["status"] == "failed"


def test_shared_resources_are_created_once_and_closed_after_the_run(tmp_path: Path) -> None:
    import asyncio

    from fabrika.pipeline.runner import close_resources

    class Pool:
        made = 0

        def __init__(self) -> None:
            Pool.made += 1
            self.closed = False

        def close(self) -> None:
            self.closed = True

    class APool:
        closed = False

        async def aclose(self) -> None:
            APool.closed = True

    resources = {"a": Pool(), "b": APool(), "c": object()}
    asyncio.run(close_resources(resources))
    assert resources == {} and APool.closed

    ps.Pool.instances.clear()
    cfg = make_config(tmp_path, stages=[
        {"kind": "test.count", "n": 6},
        {"kind": "test.pooled", "name": "p1", "input": "test.count"},
        {"kind": "test.pooled", "name": "p2", "input": "test.count"},
    ], dataset={"stages": ["p1", "p2"]})
    run_pipeline(cfg, progress=False, engine=ps.echo_llm())
    assert len(ps.Pool.instances) == 1  # shared by both stages
    assert ps.Pool.instances[0].used == 10 and ps.Pool.instances[0].closed


def test_failed_materialisation_keeps_the_old_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fabrika.store.versions import materialise

    result = run_pipeline(make_config(tmp_path), progress=False, engine=ps.echo_llm())
    before = ps.dataset_rows(result.run_dir)
    stale = result.run_dir / "versions" / ".tmp-v9-999999999"  # left by a process that no longer exists
    stale.mkdir()

    def disk_full(self: pl.LazyFrame, *a: object, **k: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(pl.LazyFrame, "sink_parquet", disk_full)
    with pytest.raises(OSError):
        materialise(result.run_dir, thresholds={"testscore": {"min_score": 0.5}}, name="v1")
    monkeypatch.undo()
    assert ps.dataset_rows(result.run_dir) == before
    assert sorted(p.name for p in (result.run_dir / "versions").iterdir()) == ["v1"]  # no temp dirs left


def test_until_runs_a_stage_and_its_dependencies_only(tmp_path: Path) -> None:
    from fabrika.errors import ConfigError

    cfg = make_config(tmp_path)
    engine = ps.echo_llm()
    partial = run_pipeline(cfg, progress=False, engine=engine, until=["test.ask"])
    assert set(partial.stats) == {"test.count", "test.ask"} and partial.version is None
    assert not RunStore(partial.run_dir).has_rows("judge")
    rest = run_pipeline(cfg, progress=False, engine=engine)
    assert rest.stats["test.ask"].processed == 0 and rest.stats["judge"].processed == 25
    assert rest.version is not None and rest.version.rows == 16
    with pytest.raises(ConfigError, match="--until 'nope': no such stage"):
        run_pipeline(cfg, progress=False, engine=engine, until=["nope"])
