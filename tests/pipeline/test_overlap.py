"""Overlapping stages (``overlap: true``): the same dataset as a sequential run, scorers stay barriers,
a column that shows up late cannot slip rows past a gate, and a run killed mid-overlap resumes to
the sequential dataset."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from fabrika.llm.types import ChatRequest
from fabrika.pipeline.config import PipelineConfig, execution_order, validate_data
from fabrika.pipeline.overlap import RECORD, streaming_inputs
from fabrika.pipeline.runner import arun_pipeline, run_pipeline
from fabrika.testing import ScriptedLLM
from tests.pipeline import overlap_stages as ov
from tests.pipeline import pipeline_stages as ps


class Timed(ps.StageOverlap):
    """The echoing handler, also noting when each stage made its first and last call."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(delay)
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    async def __call__(self, request: ChatRequest) -> str:
        stage = request.meta.get("stage", "?")
        self.first.setdefault(stage, time.monotonic())
        try:
            return await super().__call__(request)
        finally:
            self.last[stage] = time.monotonic()


def config(tmp_path: Path, name: str, overlap: bool, stages: list[dict[str, Any]], filters: dict[str, Any],
           dataset: list[str]) -> PipelineConfig:
    doc = {"name": "ov", "run_dir": str(tmp_path / name), "llm": {"backend": "sim"}, "overlap": overlap,
           "plugins": ["tests.pipeline.overlap_stages"], "stages": stages, "filters": filters, "dataset": {"stages": dataset}}
    cfg, issues = validate_data(doc, "ov.yaml", tmp_path)
    assert cfg is not None, issues
    return cfg


def chain(tmp_path: Path, name: str, overlap: bool) -> PipelineConfig:
    """count -> ask (scored by judge) -> relay: ask and judge may stream, relay waits for judge."""
    stages = [
        {"kind": "test.count", "n": 48, "delay": 0.05, "chunk_size": 4, "max_in_flight": 4},
        {"kind": "test.ask", "input": "test.count", "chunk_size": 4},
        {"kind": "test.llmscore", "name": "judge", "input": "test.ask", "chunk_size": 4},
        {"kind": "test.relay", "name": "relay", "input": "test.ask", "chunk_size": 4},
    ]
    return config(tmp_path, name, overlap, stages, {"testscore": {"min_score": 0.1}}, ["test.ask", "relay"])


def test_only_safe_stages_stream(tmp_path: Path) -> None:
    cfg = chain(tmp_path, "x", True)
    # relay reads a scored table: it must wait for the scorer; count is a source
    assert streaming_inputs(cfg, execution_order(cfg)) == {"test.ask": "test.count", "judge": "test.ask"}
    assert streaming_inputs(chain(tmp_path, "y", False), execution_order(cfg)) == {}
    capped = chain(tmp_path, "z", True)
    capped.stages[1].max_items = 10  # which items come first would depend on timing
    assert "test.ask" not in streaming_inputs(capped, execution_order(capped))


def test_overlap_gives_the_sequential_dataset_and_scorers_stay_barriers(tmp_path: Path) -> None:
    seq = run_pipeline(chain(tmp_path, "seq", False), progress=False, engine=ScriptedLLM(Timed(0.01)))
    timed = Timed(0.01)
    over = run_pipeline(chain(tmp_path, "over", True), progress=False, engine=ScriptedLLM(timed))
    assert seq.complete and over.complete
    assert ps.dataset_rows(over.run_dir) == ps.dataset_rows(seq.run_dir)
    assert len(ps.dataset_rows(over.run_dir)) > 0
    # it really overlapped: ask read rows of count before count had finished, and judge those of ask
    assert over.stats["test.ask"].report["overlap"]["rows_read_early"] > 0
    assert over.stats["judge"].report["overlap"]["rows_read_early"] > 0
    assert "overlap" not in over.stats["relay"].report
    # the scorer is a barrier: relay's first call comes after judge's last one
    assert timed.first["relay"] >= timed.last["judge"]
    assert not any((over.run_dir / "stages" / s / RECORD).exists() for s in ("test.ask", "judge", "relay"))


def late(tmp_path: Path, name: str, overlap: bool, wait: bool = True, gate: bool = True) -> PipelineConfig:
    stages = [
        {"kind": "test.late", "n": 30, "chunk_size": 2, "max_in_flight": 2, "wait_for": "relay" if wait else None},
        {"kind": "test.relay", "name": "relay", "input": "test.late", "chunk_size": 2},
    ]
    return config(tmp_path, name, overlap, stages, {"testflag": {"on": gate}}, ["relay"])


def test_a_gate_column_that_appears_late_does_not_let_rows_through(tmp_path: Path) -> None:
    """Early shards have no `flag` column, so a read of them alone does not apply the flag gate; the rows
    relay made from them must not survive (sequentially they are dropped: their flag is null)."""
    ov.CONSUMED.clear()
    seq = run_pipeline(late(tmp_path, "seq", False, wait=False), progress=False, engine=ps.echo_llm())
    expected = ps.dataset_rows(seq.run_dir)
    assert {r["i"] for r in expected} == {i for i in range(20, 30) if i % 2 == 0}
    ov.CONSUMED.clear()
    over = run_pipeline(late(tmp_path, "over", True), progress=False, engine=ps.echo_llm())
    assert ov.CONSUMED["relay"] > 5  # relay consumed early rows (the late ones waited for that)
    assert "+flag" in over.stats["relay"].report["overlap_redone"]
    assert ps.dataset_rows(over.run_dir) == expected
    assert not (over.run_dir / "stages/relay" / RECORD).exists()


def test_a_column_that_appears_late_without_a_gate_on_it_is_no_reason_to_redo(tmp_path: Path) -> None:
    """A later shard adds a column no gate reads (as `raw_excerpt` arrives with the first rejection): the
    rows read early pass the same gates under the final schema, so nothing is redone."""
    seq = run_pipeline(late(tmp_path, "seq", False, wait=False, gate=False), progress=False, engine=ps.echo_llm())
    ov.CONSUMED.clear()
    engine = ps.echo_llm()
    over = run_pipeline(late(tmp_path, "over", True, gate=False), progress=False, engine=engine)
    report = over.stats["relay"].report
    assert report["overlap"]["rows_read_early"] > 0
    assert "overlap_redone" not in report and report["overlap_columns_added_later"] == ["+flag"]
    assert len(engine.requests) == 30  # every item asked once
    assert ps.dataset_rows(over.run_dir) == ps.dataset_rows(seq.run_dir)


@pytest.mark.parametrize(("resume_overlap", "gate"), [(True, True), (False, True), (True, False)])
def test_a_run_killed_during_overlap_resumes_to_the_sequential_dataset(tmp_path: Path, resume_overlap: bool,
                                                                       gate: bool) -> None:
    """Stopped after relay consumed (and saved) rows read before `flag` existed; the next run, with or
    without overlap, must check those reads against the final table instead of trusting them (with the
    flag gate they are redone; without it they stand, though the resumed run reads those shards again)."""
    expected = ps.dataset_rows(run_pipeline(late(tmp_path, "seq", False, wait=False, gate=gate), progress=False,
                                            engine=ps.echo_llm()).run_dir)
    ov.CONSUMED.clear()
    cfg = late(tmp_path, "over", True, gate=gate)
    relay_dir = cfg.resolved_run_dir / "stages" / "relay"

    async def interrupted() -> None:
        task = asyncio.ensure_future(arun_pipeline(cfg, progress=False, engine=ps.echo_llm(0.05)))
        deadline = time.monotonic() + 20
        while ov.CONSUMED.get("relay", 0) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupted())
    assert (relay_dir / RECORD).is_file()  # what it read early is not trusted yet
    saved = list(relay_dir.glob("part-*.parquet")) + list(relay_dir.glob("journal.jsonl"))
    assert saved, "the interrupted run saved nothing of relay; the test did not exercise the resume"
    again = late(tmp_path, "over", resume_overlap, gate=gate)
    result = run_pipeline(again, progress=False, engine=ps.echo_llm())
    assert result.complete
    assert ps.dataset_rows(result.run_dir) == expected
    assert ("overlap_redone" in result.stats["relay"].report) == gate
    assert not (relay_dir / RECORD).exists()


def test_resume_after_a_verified_overlap_redoes_nothing(tmp_path: Path) -> None:
    cfg = chain(tmp_path, "over", True)
    first = run_pipeline(cfg, progress=False, engine=ps.echo_llm())
    again = ps.echo_llm()
    second = run_pipeline(cfg, progress=False, engine=again)
    assert len(again.requests) == 0
    assert ps.dataset_rows(first.run_dir) == ps.dataset_rows(second.run_dir)


FC_DEMO = Path(__file__).parents[2] / "configs" / "fc_demo.yaml"


def fc_demo(tmp_path: Path, name: str, overlap: bool) -> PipelineConfig:
    import yaml

    data = yaml.safe_load(FC_DEMO.read_text(encoding="utf-8"))
    data.update(run_dir=str(tmp_path / name), overlap=overlap)
    for stage in data["stages"]:
        stage["chunk_size"] = 2  # many shards, so consumers really start on a partial table
    cfg, issues = validate_data(data, str(FC_DEMO), FC_DEMO.parent)
    assert cfg is not None, [str(i) for i in issues]
    return cfg


def test_fc_demo_on_sim_gives_the_same_dataset_with_overlap(tmp_path: Path) -> None:
    """The real FC stages (dialogues, samples, irrelevance, scorers, dedup) on the sim backend."""
    over_cfg = fc_demo(tmp_path, "over", True)
    streams = streaming_inputs(over_cfg, execution_order(over_cfg))
    assert streams.get("fc.dialogues") == "fc.plans" and streams.get("fc.samples") == "fc.dialogues"
    assert "fc.plans" not in streams  # it indexes its whole input (own input_rows)
    assert "fc_language" not in streams  # a second scorer of fc.samples waits for the first
    seq = run_pipeline(fc_demo(tmp_path, "seq", False), resume=False, progress=False)
    over = run_pipeline(over_cfg, resume=False, progress=False)
    assert seq.complete and over.complete and seq.version is not None and over.version is not None
    rows = ps.dataset_rows(over.run_dir, over.version.name)
    assert rows and rows == ps.dataset_rows(seq.run_dir, seq.version.name)
    assert over.version.funnel == seq.version.funnel
