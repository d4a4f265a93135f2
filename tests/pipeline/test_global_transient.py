"""A transient fault escaping a global stage's ``run_all`` leaves the stage pending (exit 3, redone by
the next run), like an item's; it is not an unhandled exception (exit 1)."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator, Iterator

from fabrika.errors import SandboxInfrastructureError
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.pipeline.stage import Row, Stage, ok, register_stage
from fabrika.schemas.ids import stable_id
from tests.pipeline import pipeline_stages  # noqa: F401 - registers test.count

#: run_all calls of test.flaky_collect so far; the first FAILS raise an infrastructure fault
CALLS = [0]
FAILS = 1


@register_stage
class FlakyCollectStage(Stage):
    """Global stage whose first ``run_all`` meets a sandbox worker death after yielding one chunk."""

    kind = "test.flaky_collect"
    global_stage = True
    calls_llm = False

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        ids = sorted(r["id"] for r in rows)
        CALLS[0] += 1
        yield [ok(stable_id("first", ids), n=len(ids))]
        if CALLS[0] <= FAILS:
            raise SandboxInfrastructureError("sandbox worker died (framing)")
        yield [ok(stable_id("second", ids), n=len(ids))]


def test_a_transient_fault_in_run_all_leaves_the_stage_pending_and_the_next_run_finishes(tmp_path: Path) -> None:
    doc = {"name": "g", "run_dir": str(tmp_path / "run"), "llm": {"backend": "sim"},
           "stages": [{"kind": "test.count", "n": 5}, {"kind": "test.flaky_collect", "input": "test.count"},
                      {"kind": "test.count", "name": "after", "n": 3, "input": "test.flaky_collect"}],
           "dataset": {"stages": ["test.flaky_collect"]}}
    cfg, issues = validate_data(doc, "g.yaml", tmp_path)
    assert cfg is not None, issues
    CALLS[0] = 0
    result = run_pipeline(cfg, progress=False)
    st = result.stats["test.flaky_collect"]
    assert not result.complete and result.version is None  # the CLI exits 3 on problems
    assert st.pending >= 1 and st.transient == 1
    assert any("test.flaky_collect" in p and "pending" in p and "sandbox worker died" in p for p in result.problems)
    assert "after" not in result.stats  # a stage downstream of a partial table does not start
    assert result.manifest["stages"]["test.flaky_collect"]["complete"] is False
    again = run_pipeline(cfg, progress=False)
    assert again.complete, again.problems
    assert CALLS[0] == 2 and again.stats["test.flaky_collect"].rows_written == 2
