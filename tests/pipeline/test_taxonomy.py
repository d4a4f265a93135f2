"""The one failure taxonomy of an item (fabrika.pipeline.taxonomy), end to end through ``fabrika run``.

A bug or a configuration problem in stage code stops the stage with one line and a non-zero exit,
writes nothing for the item and is never resumed as done; the same command after the fix gives the
dataset an uninterrupted run gives. An infrastructure fault is retried within the run (bounded),
then left pending. Rows an older fabrika wrote as ``internal_error`` are redone on resume.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.errors import ConfigError, InputError, LLMError, StageConfigError, StageFailure, TransientError
from fabrika.pipeline import execute
from fabrika.pipeline.taxonomy import InputRow, MissingColumn, classify
from fabrika.schemas.ids import stable_id
from fabrika.store import RunStore
from fabrika.store.versions import scan_version
from tests.pipeline import pipeline_stages as ps

runner = CliRunner()


def write_config(tmp_path: Path, run: str = "run", **count: Any) -> Path:
    doc = {
        "name": "taxonomy",
        "run_dir": str(tmp_path / run),
        "plugins": ["tests.pipeline.pipeline_stages"],
        "llm": {"backend": "sim"},
        "stages": [
            {"kind": "test.count", "n": 20, "chunk_size": 3, **count},
            {"kind": "test.ask", "input": "test.count", "chunk_size": 5},
        ],
        "dataset": {"stages": ["test.ask"]},
    }
    path = tmp_path / f"{run}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def dataset(run_dir: Path) -> pl.DataFrame:
    return scan_version(run_dir, "v1").sort("id").collect()


def raw(run_dir: Path, stage: str) -> pl.DataFrame:
    lf = RunStore(run_dir).scan_raw(stage)
    return pl.DataFrame() if lf is None else lf.collect()


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def count_id(i: int) -> str:
    return stable_id("count", i)


@pytest.fixture(autouse=True)
def _fresh_transient_counts() -> None:
    ps.TRANSIENT_SEEN.clear()


def test_a_stage_bug_stops_the_run_with_one_line_and_is_never_resumed_as_done(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, raise_on=[7])
    first = runner.invoke(app, ["run", str(cfg), "--no-progress"])
    assert first.exit_code == 4, first.output
    [line] = error_lines(first.output)
    assert "stage test.count" in line and f"item {count_id(7)}" in line
    assert "RuntimeError: boom on 7" in line and "fix:" in line
    rows = raw(tmp_path / "run", "test.count")
    assert rows.is_empty() or count_id(7) not in set(rows["input_id"])  # nothing written for the item
    assert rows.is_empty() or not rows["reason"].cast(pl.Utf8).str.starts_with("internal_error").any()
    assert RunStore(tmp_path / "run").read_manifest()["status"] == "failed"
    again = runner.invoke(app, ["run", str(cfg), "--no-progress"])  # not resumed as done: it fails again
    assert again.exit_code == 4 and f"item {count_id(7)}" in again.output
    fixed = write_config(tmp_path)  # the fix (same run dir, same command)
    done = runner.invoke(app, ["run", str(fixed), "--no-progress"])
    assert done.exit_code == 0, done.output
    clean = runner.invoke(app, ["run", str(write_config(tmp_path, run="clean")), "--no-progress"])
    assert clean.exit_code == 0, clean.output
    assert dataset(tmp_path / "run").equals(dataset(tmp_path / "clean"))
    assert len(dataset(tmp_path / "run")) == 16  # 20 minus 3 too_odd minus the unlucky 13


def test_answers_cached_before_a_bug_serve_the_rerun_and_the_item_is_not_done(tmp_path: Path) -> None:
    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline

    def config(run: str, fail_on: list[int]) -> Any:
        cfg, issues = validate_data({
            "name": "cached", "run_dir": str(tmp_path / run), "llm": {"backend": "sim"}, "max_in_flight": 1,
            "stages": [{"kind": "test.count", "n": 12, "chunk_size": 2},
                       {"kind": "test.ask_then_fail", "name": "ask", "input": "test.count", "fail_on": fail_on}],
            "dataset": {"stages": ["ask"]},
        }, "t.yaml", tmp_path)
        assert cfg is not None, issues
        return cfg

    with pytest.raises(StageFailure, match="bug after the answer to 6") as info:
        run_pipeline(config("run", [6]), progress=False)
    assert info.value.kind == "bug" and info.value.item_id == count_id(6)
    assert count_id(6) not in set(raw(tmp_path / "run", "ask")["input_id"])  # its result was not stored
    asked = RunStore(tmp_path / "run").read_manifest()["accounting"]["totals"]["requests"]
    assert asked >= 1  # one item at a time: the failing item's request was the last one sent
    fixed = run_pipeline(config("run", []), progress=False)  # the fix redoes the stage from cached answers
    llm = fixed.stats["ask"].llm
    assert fixed.complete and llm.requests == 10 and llm.cached == asked  # item 6's answer included
    assert run_pipeline(config("clean", []), progress=False).complete
    assert dataset(tmp_path / "run").equals(dataset(tmp_path / "clean"))
    assert count_id(6) in set(raw(tmp_path / "run", "ask")["input_id"])


def test_infrastructure_faults_are_retried_within_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def clock(seconds: float) -> None:  # the injected clock: no real wait
        waits.append(seconds)

    monkeypatch.setattr(execute, "transient_wait", clock)
    cfg = write_config(tmp_path, transient_on={4: 1, 9: 2})  # item 9 succeeds at its third attempt
    result = runner.invoke(app, ["run", str(cfg), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert waits == list(execute.TRANSIENT_BACKOFF_S[:2])
    assert ps.TRANSIENT_SEEN == {4: 1, 9: 2}
    clean = runner.invoke(app, ["run", str(write_config(tmp_path, run="clean")), "--no-progress"])
    assert clean.exit_code == 0
    assert dataset(tmp_path / "run").equals(dataset(tmp_path / "clean"))


def test_an_infrastructure_fault_past_its_rounds_is_pending_never_a_row(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    async def clock(seconds: float) -> None:
        pass

    monkeypatch.setattr(execute, "transient_wait", clock)
    cfg = write_config(tmp_path, transient_on={4: 5})  # 3 attempts per run: pending after the first
    first = runner.invoke(app, ["run", str(cfg), "--no-progress"])
    assert first.exit_code == 3, first.output
    assert "1 item(s) pending" in first.output and "worker died under item 4" in first.output
    assert count_id(4) not in set(raw(tmp_path / "run", "test.count")["input_id"])
    assert ps.TRANSIENT_SEEN == {4: 3}
    second = runner.invoke(app, ["run", str(cfg), "--no-progress"])  # attempts 4, 5 fail, the 6th succeeds
    assert second.exit_code == 0, second.output
    clean = runner.invoke(app, ["run", str(write_config(tmp_path, run="clean")), "--no-progress"])
    assert clean.exit_code == 0
    assert dataset(tmp_path / "run").equals(dataset(tmp_path / "clean"))


def test_legacy_internal_error_rows_are_not_done(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    assert runner.invoke(app, ["run", str(cfg), "--no-progress"]).exit_code == 0
    expected = dataset(tmp_path / "run")
    store = RunStore(tmp_path / "run")
    rows = raw(tmp_path / "run", "test.count").to_dicts()
    store.drop_stage("test.count")
    store.drop_stage("test.ask")
    for r in rows:  # as an older fabrika wrote them: item 5 "failed" with internal_error
        if r["input_id"] == count_id(5):
            r.update(status="rejected", reason="internal_error: RuntimeError: boom on 5", text=None, tags=None)
    store.write("test.count", rows)
    again = runner.invoke(app, ["run", str(cfg), "--no-progress"])
    assert again.exit_code == 0, again.output
    assert "internal_error" in again.output  # said loudly: the stage is redone
    redone = raw(tmp_path / "run", "test.count")
    assert not redone["reason"].cast(pl.Utf8).str.starts_with("internal_error").any()
    assert redone.filter(pl.col("input_id") == count_id(5))["status"].to_list() == ["ok"]
    assert dataset(tmp_path / "run").equals(expected)


@pytest.mark.parametrize(("exc", "kind"), [
    (TransientError("worker died"), "transient"),
    (TimeoutError("host too slow"), "transient"),
    (LLMError("server", "HTTP 503"), "transient"),
    (OSError(28, "No space left on device", "/data/x"), "transient"),
    (ConfigError("bad value"), "config"),
    (InputError("seeds.jsonl: not found"), "config"),
    (FileNotFoundError(2, "No such file or directory", "/data/personas.jsonl"), "config"),
    (LLMError("bad_request", "HTTP 400"), "bug"),
    (KeyError("messages"), "bug"),  # a KeyError from any dict but the input row: a bug
    (MissingColumn("messages"), "config"),  # row["messages"] on the input row: a schema mismatch
    (ZeroDivisionError("division by zero"), "bug"),
])
def test_classify(exc: BaseException, kind: str) -> None:
    assert classify(exc, None, {"internal": 1}).kind == kind


def test_a_stage_can_say_its_configuration_is_wrong_with_a_fix() -> None:
    exc = StageConfigError("if.responses.judge needs a judge model", fix="set llm.model or judge: false")
    f = classify(exc)
    assert f.kind == "config" and f.fix == "set llm.model or judge: false"
    assert StageFailure("s", "i", f.kind, f.error, f.fix).exit_code == 2


def test_a_missing_column_names_the_input_and_a_missing_file_names_the_path() -> None:
    class Cfg:
        stage_name, input = "if_responses", "if_expand"

    class St:
        kind, config = "if.responses", Cfg()

    row = InputRow({"id": "x", "text": "t"})
    with pytest.raises(MissingColumn) as info:
        row["messages"]
    f = classify(info.value, St(), row)
    assert f.kind == "config" and "'messages'" in f.error and "if_responses.input is 'if_expand'" in f.fix
    missing = classify(FileNotFoundError(2, "No such file or directory", "/data/personas.jsonl"))
    assert "/data/personas.jsonl" in missing.fix
    line = str(StageFailure("s", "item-1", "config", missing.error, missing.fix))
    assert "\n" not in line and line.startswith("stage s, item item-1: configuration problem")
    assert StageFailure("s", None, "bug", "E", "f").exit_code == 4
