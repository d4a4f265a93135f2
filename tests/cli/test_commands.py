"""The fabrika CLI: exit codes, one-line errors, nothing written on a bad config, refilter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import fabrika
from fabrika.cli.app import app
from fabrika.store.versions import scan_version

runner = CliRunner()


def write_config(tmp_path: Path, **over: object) -> Path:
    doc = {
        "name": "clitest",
        "run_dir": str(tmp_path / "run"),
        "plugins": ["tests.pipeline.pipeline_stages"],
        "llm": {"backend": "sim"},
        "stages": [
            {"kind": "test.count", "n": 20},
            {"kind": "test.ask", "input": "test.count", "chunk_size": 5},
            {"kind": "test.score", "name": "judge", "input": "test.ask"},
        ],
        "dataset": {"stages": ["test.ask"]},
        "filters": {"testscore": {"min_score": 0.05}},
    }
    doc.update(over)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def manifest(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"fabrika {fabrika.__version__}"


def test_run_then_unchanged_rerun_makes_zero_llm_calls(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    first = runner.invoke(app, ["run", str(cfg), "--no-progress"])
    assert first.exit_code == 0, first.output
    m1 = manifest(tmp_path)
    assert m1["accounting"]["totals"]["requests"] == 16  # 20 items minus 3 too_odd minus the raising 13
    rows1 = scan_version(tmp_path / "run", "v1").sort("id").collect()
    assert rows1.height > 0 and set(rows1["llm_backend"]) == {"sim"}
    second = runner.invoke(app, ["run", str(cfg), "--no-progress"])
    assert second.exit_code == 0, second.output
    m2 = manifest(tmp_path)
    assert m2["accounting"]["totals"]["requests"] == 0
    assert m2["stages"]["test.ask"]["llm"]["requests"] == 0
    assert [i["llm_totals"]["requests"] for i in m2["invocations"]] == [16, 0]
    assert [i["status"] for i in m2["invocations"]] == ["done", "done"]
    assert scan_version(tmp_path / "run", "v1").sort("id").collect().equals(rows1)
    status = runner.invoke(app, ["status", str(tmp_path / "run")])
    assert status.exit_code == 0
    for needle in ("test.count", "too_odd", "internal_error", "dropped_low_score", "LLM accounting"):
        assert needle in status.stdout, needle


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"colour": "blue"}, "colour: unknown key; allowed:"),
        ({"stages": [{"kind": "generic.prompts", "path": "nope.jsonl"}], "dataset": {"stages": ["generic.prompts"]}},
         "stages[0].path: input file not found"),
        ({"stages": [{"kind": "fc.nonexistent"}], "dataset": {}}, "stages[0].kind: unknown stage kind 'fc.nonexistent'"),
        ({"seed": "abc"}, "seed: Input should be a valid integer"),
    ],
)
def test_bad_config_exits_2_with_one_line_and_writes_nothing(tmp_path: Path, over: dict, needle: str) -> None:
    cfg = write_config(tmp_path, **over)
    result = runner.invoke(app, ["run", str(cfg), "--no-progress"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert not (tmp_path / "run").exists()
    assert runner.invoke(app, ["validate", str(cfg)]).exit_code == 2


def test_validate_ok_prints_summary(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(write_config(tmp_path))])
    assert result.exit_code == 0 and "ok" in result.stdout and "3 stages" in result.stdout


def test_refilter_changes_output_with_zero_llm_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write_config(tmp_path)
    assert runner.invoke(app, ["run", str(cfg), "--no-progress"]).exit_code == 0
    run_dir = tmp_path / "run"
    v1 = scan_version(run_dir, "v1").collect()

    def no_engine(*a: object, **k: object) -> None:
        raise AssertionError("refilter must not build an LLM engine")

    monkeypatch.setattr("fabrika.llm.factory.build_engine", no_engine)
    monkeypatch.setattr("fabrika.pipeline.runner.build_engine_for", no_engine)
    result = runner.invoke(app, ["refilter", str(run_dir), "--set", "filters.testscore.min_score=0.12", "--name", "strict"])
    assert result.exit_code == 0, result.output
    strict = scan_version(run_dir, "strict").collect()
    assert 0 < strict.height < v1.height
    assert min(strict["score"]) >= 0.12
    assert scan_version(run_dir, "v1").collect().height == v1.height  # the old version stays
    th = json.loads((run_dir / "versions/strict/thresholds.json").read_text(encoding="utf-8"))
    assert th["testscore"]["min_score"] == 0.12
    assert "dropped_low_score" in result.stdout and "v1" in result.stdout  # funnel difference vs v1
    funnel = json.loads((run_dir / "versions/strict/funnel.json").read_text(encoding="utf-8"))
    assert funnel["gates"]["test.ask"]["out"] == strict.height
    assert manifest(tmp_path)["latest_version"] == "strict"
    status = runner.invoke(app, ["status", str(run_dir)])
    assert "strict (latest)" in status.stdout and "version strict" in status.stdout
    doc = json.loads(runner.invoke(app, ["status", str(run_dir), "--json"]).stdout)
    assert doc["status"] == "done" and doc["latest_version"] == "strict"
    assert doc["latest_funnel"]["gates"]["test.ask"]["out"] == strict.height
    # stacking on a version is explicit: min_score stays 0.12 from "strict", max_i added
    again = runner.invoke(app, ["refilter", str(run_dir), "--from-base", "strict", "--set", "filters.testscore.max_i=15"])
    assert again.exit_code == 0, again.output
    v2 = scan_version(run_dir, "v2").collect()
    assert min(v2["score"]) >= 0.12 and max(v2["i"]) <= 15


@pytest.mark.parametrize(
    ("assignment", "needle"),
    [
        ("filters.nogate.x=1", "unknown gate group 'nogate'"),
        ("filters.testscore.min_score=abc", "filters.testscore.min_score"),
        ("filters.testscore.oops=1", "allowed: min_score, max_i"),
        # one address for run and refilter: the short form and a stage setting are refused with the fix
        ("testscore.min_score=0.1", "write filters.testscore.min_score=0.1"),
        ("stages.test.count.n=5", "rerun `fabrika run CONFIG --set stages.test.count.n=5`"),
    ],
)
def test_refilter_bad_set_exits_2_one_line(tmp_path: Path, assignment: str, needle: str) -> None:
    cfg = write_config(tmp_path, stages=[{"kind": "test.count", "n": 3}], dataset={"stages": ["test.count"]}, filters={})
    assert runner.invoke(app, ["run", str(cfg), "--no-progress"]).exit_code == 0
    result = runner.invoke(app, ["refilter", str(tmp_path / "run"), "--set", assignment])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert sorted(p.name for p in (tmp_path / "run/versions").iterdir()) == ["v1"]


def test_status_and_refilter_on_missing_run_exit_2(tmp_path: Path) -> None:
    assert runner.invoke(app, ["status", str(tmp_path / "nope")]).exit_code == 2
    assert runner.invoke(app, ["refilter", str(tmp_path / "nope")]).exit_code == 2


def test_cache_only_leaves_uncached_items_pending_and_exits_3(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    result = runner.invoke(app, ["run", str(cfg), "--no-progress", "--cache-only"])
    assert result.exit_code == 3, result.output
    assert "rerun without --cache-only" in result.stderr
    assert not (tmp_path / "run/stages/test.ask").exists()
    assert manifest(tmp_path)["stages"]["test.ask"]["cache_miss"] == 16
    assert runner.invoke(app, ["run", str(cfg), "--no-progress"]).exit_code == 0
    cached = runner.invoke(app, ["run", str(cfg), "--no-progress", "--cache-only", "--no-resume"])
    assert cached.exit_code == 0, cached.output  # everything is cached now: a full rebuild with no model
    assert manifest(tmp_path)["stages"]["test.ask"]["rows"] == 16


def test_smoke_config_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smoke = Path(__file__).parents[2] / "configs" / "smoke.yaml"
    monkeypatch.chdir(tmp_path)  # run_dir defaults to runs/<name> under the working directory
    result = runner.invoke(app, ["run", str(smoke), "--no-progress"])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / "smoke"
    v1 = scan_version(run_dir, "v1").collect()
    assert v1.height == 12 and set(v1["llm_backend"]) == {"sim"} and set(v1["lang_detected"]) == {"ru"}
    strict = runner.invoke(app, ["refilter", str(run_dir), "--set", "filters.length.min_completion_tokens=1000"])
    assert strict.exit_code == 0, strict.output
    assert scan_version(run_dir, "v2").collect().height == 0
    assert "dropped_length.min_completion_tokens" in strict.stdout


def test_malformed_input_found_mid_run_exits_2_one_line(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, stages=[{"kind": "test.badsource"}], dataset={"stages": ["test.badsource"]}, filters={})
    result = runner.invoke(app, ["run", str(cfg), "--no-progress"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["error: seeds.jsonl:2: invalid JSON (Expecting value); one JSON object per line"]
    assert manifest(tmp_path)["status"] == "failed"


def test_run_with_set_overrides(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    result = runner.invoke(app, ["run", str(cfg), "--no-progress", "--set", "stages.test.count.n=5",
                                 "--set", "filters.testscore.min_score=0"])
    assert result.exit_code == 0, result.output
    assert manifest(tmp_path)["stages"]["test.count"]["rows"] == 5
    assert manifest(tmp_path)["config"]["stages"][0]["n"] == 5  # the manifest records the effective config
    bad = runner.invoke(app, ["validate", str(cfg), "--set", "stages.test.count.n=lots"])
    assert bad.exit_code == 2 and "stages[0].n: Input should be a valid integer" in bad.stderr


@pytest.mark.parametrize(
    ("assignment", "needle"),
    [
        ("stages.nosuch.n=5", "no stage named 'nosuch'"),
        ("filters.nogate.x=1", "filters.nogate: unknown gate group"),
        ("filters.testscore.oops=1", "filters.testscore.oops: unknown parameter"),
        ("testscore.min_score=0", "testscore: unknown key"),
    ],
)
def test_run_unknown_set_address_exits_2_before_writing(tmp_path: Path, assignment: str, needle: str) -> None:
    cfg = write_config(tmp_path)
    result = runner.invoke(app, ["run", str(cfg), "--no-progress", "--set", assignment])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


def test_run_and_refilter_document_one_set_address() -> None:
    for command in ("run", "refilter"):
        shown = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout
        help_text = " ".join(shown.replace("│", " ").split())
        assert "filters.length.max_tokens=1024" in help_text, (command, help_text)


def test_until_in_the_cli(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    bad = runner.invoke(app, ["run", str(cfg), "--no-progress", "--until", "nope"])
    assert bad.exit_code == 2 and "--until 'nope': no such stage" in bad.stderr
    assert not (tmp_path / "run").exists()
    ok = runner.invoke(app, ["run", str(cfg), "--no-progress", "--until", "test.count"])
    assert ok.exit_code == 0 and "no version materialised" in ok.stdout
    assert sorted(manifest(tmp_path)["stages"]) == ["test.count"]
