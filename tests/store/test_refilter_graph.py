"""Refilter across the graph: loosened upstream gates, unfinished runs, explicit bases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.pipeline.config import load_config
from fabrika.pipeline.runner import run_pipeline
from fabrika.pipeline.versions import UpstreamNotProcessed, refilter
from fabrika.store import RunStore
from fabrika.store.versions import RunNotFinished, read_version
from tests.pipeline import pipeline_stages as ps

runner = CliRunner()


def write_config(tmp_path: Path, name: str = "run", min_score: float = 0.1, total: bool = False) -> Path:
    """count -> score (gate on count) -> ask: the gate decides which counted items ask ever sees
    (``total``: and a stage that sums the gated count rows itself, in the dataset too)."""
    doc: dict[str, Any] = {
        "name": "graph",
        "run_dir": str(tmp_path / name),
        "plugins": ["tests.pipeline.pipeline_stages", "tests.store.graph_stages"],
        "llm": {"backend": "sim"},
        "stages": [
            {"kind": "test.count", "n": 30, "chunk_size": 4},
            {"kind": "test.score", "name": "judge", "input": "test.count"},
            {"kind": "test.ask", "input": "test.count", "chunk_size": 4},
        ],
        "dataset": {"stages": ["test.ask"]},
        "filters": {"testscore": {"min_score": min_score}},
    }
    if total:
        doc["stages"].append({"kind": "graph.total", "name": "total", "input": "test.count"})
        doc["dataset"]["stages"].append("total")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_loosened_upstream_gate_names_the_count_and_the_command(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    run_pipeline(load_config(cfg), progress=False)
    run_dir = tmp_path / "run"
    with pytest.raises(UpstreamNotProcessed) as caught:
        refilter(run_dir, ["filters.testscore.min_score=0"])
    # i < 10 scored below 0.1 (i = 3 too odd, i = 5 unscored -> dropped either way): 8 newly admitted rows
    assert [(u.stage, u.upstream, u.count) for u in caught.value.items] == [("test.ask", "test.count", 8)]
    assert caught.value.command == f"fabrika run {cfg} --set filters.testscore.min_score=0.0"
    assert sorted(p.name for p in (run_dir / "versions").iterdir()) == ["v1"]  # nothing written

    result = runner.invoke(app, ["refilter", str(run_dir), "--set", "filters.testscore.min_score=0"])
    assert result.exit_code == 3
    assert "8 row(s) of 'test.count' now pass its gates that 'test.ask' never processed" in result.stderr
    assert "filters.testscore.min_score=0" in result.stderr and "--run-downstream" in result.stderr
    # tightening admits nothing new: no run needed, the version is written
    info, _ = refilter(run_dir, ["filters.testscore.min_score=0.2"])
    assert info.name == "v2" and info.changed == {"testscore.min_score": 0.2}


def _content(run_dir: Path, version: str) -> list[dict[str, Any]]:
    drop = {"llm_backend"}
    return [{k: v for k, v in r.items() if k not in drop} for r in ps.dataset_rows(run_dir, version)]


def test_run_downstream_gives_the_version_a_fresh_run_gives(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    run_pipeline(load_config(cfg), progress=False)
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["refilter", str(run_dir), "--set", "filters.testscore.min_score=0",
                                 "--run-downstream", "--name", "loose"])
    assert result.exit_code == 0, result.output
    fresh = run_pipeline(load_config(write_config(tmp_path, "fresh", min_score=0)), progress=False)
    assert fresh.version is not None
    assert _content(run_dir, "loose") == _content(fresh.run_dir, "v1")
    assert len(_content(run_dir, "loose")) > len(_content(run_dir, "v1"))
    meta = read_version(run_dir, "loose")["version"]
    assert meta["base"] == "config" and meta["changed"] == {"testscore.min_score": 0.0}
    # the run asked only for the newly admitted items
    stages = RunStore(run_dir).read_manifest()["stages"]
    assert stages["test.ask"]["llm"]["requests"] == 8


def test_run_downstream_redoes_a_stage_that_draws_from_a_grown_input(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, total=True)
    run_pipeline(load_config(cfg), progress=False)
    run_dir = tmp_path / "run"
    with pytest.raises(UpstreamNotProcessed, match=r"'total' draws from 'test.count' itself \(8 more row\(s\) pass"):
        refilter(run_dir, ["filters.testscore.min_score=0"])
    info, _ = refilter(run_dir, ["filters.testscore.min_score=0"], name="loose", run_downstream=True)
    fresh = run_pipeline(load_config(write_config(tmp_path, "fresh", min_score=0, total=True)), progress=False)
    assert _content(run_dir, "loose") == _content(fresh.run_dir, "v1")
    totals = [r for r in _content(run_dir, "loose") if r["id"] == "total"]
    assert totals and totals[0]["n"] == 24  # 30 less 4 too odd, 1 error, 1 unscored


def test_tightened_upstream_gate_leaves_out_what_a_fresh_run_never_makes(tmp_path: Path) -> None:
    """The ask rows carry no score: only their lineage (input_id -> a count row the gate now drops) shows it."""
    cfg = write_config(tmp_path)
    run_pipeline(load_config(cfg), progress=False)
    run_dir = tmp_path / "run"
    info, _ = refilter(run_dir, ["filters.testscore.min_score=0.2"], name="tight")
    fresh = run_pipeline(load_config(write_config(tmp_path, "fresh", min_score=0.2)), progress=False)
    assert _content(run_dir, "tight") == _content(fresh.run_dir, "v1")
    assert info.funnel["gates"]["test.ask"]["dropped_upstream_gate"] == 7  # i in 10..19 but 10, 17 (too odd), 13 (error)
    assert len(_content(run_dir, "tight")) < len(_content(run_dir, "v1"))


def test_refilter_refuses_an_interrupted_run(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    run_pipeline(load_config(cfg), progress=False)
    run_dir = tmp_path / "run"
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    manifest["status"] = "interrupted"
    manifest["stages"]["test.ask"]["complete"] = False
    store.write_manifest(manifest)
    with pytest.raises(RunNotFinished, match=r"interrupted: stage 'test.ask' did not finish; finish it with "
                                             rf"`fabrika run {cfg}`"):
        refilter(run_dir, [])
    result = runner.invoke(app, ["refilter", str(run_dir)])
    assert result.exit_code == 2 and "test.ask" in result.stderr and f"fabrika run {cfg}" in result.stderr
    assert sorted(p.name for p in (run_dir / "versions").iterdir()) == ["v1"]


def test_versions_record_base_and_thresholds_and_do_not_stack_silently(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    run_pipeline(load_config(cfg), progress=False)
    run_dir = tmp_path / "run"
    a = runner.invoke(app, ["refilter", str(run_dir), "--set", "filters.testscore.min_score=0.2", "--name", "a"])
    assert a.exit_code == 0, a.output
    assert "base config; changed testscore.min_score=0.2" in a.stdout
    b = runner.invoke(app, ["refilter", str(run_dir), "--set", "filters.testscore.max_i=20", "--name", "b"])
    assert b.exit_code == 0, b.output
    vb = read_version(run_dir, "b")
    assert vb["thresholds"]["testscore"] == {"min_score": 0.1, "max_i": 20}  # from the config, not from "a"
    assert vb["version"]["base"] == "config" and vb["version"]["changed"] == {"testscore.max_i": 20}
    c = runner.invoke(app, ["refilter", str(run_dir), "--from-base", "a", "--set", "filters.testscore.max_i=20",
                            "--name", "c"])
    assert c.exit_code == 0, c.output
    vc = read_version(run_dir, "c")
    assert vc["thresholds"]["testscore"] == {"min_score": 0.2, "max_i": 20}
    assert vc["version"]["base"] == "a" and vc["version"]["changed"] == {"testscore.max_i": 20}
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["versions"]["c"]["base"] == "a"
    assert manifest["versions"]["v1"]["base"] == "config" and manifest["versions"]["v1"]["changed"] == {}
    bad = runner.invoke(app, ["refilter", str(run_dir), "--from-base", "nope"])
    assert bad.exit_code == 2 and "--from-base 'nope'" in bad.stderr


def test_status_shows_stale_stages_and_why(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    run_pipeline(load_config(cfg), progress=False)
    ok = runner.invoke(app, ["status", str(tmp_path / "run")])
    assert ok.exit_code == 0 and "stale: none" in ok.stdout
    doc = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    doc["stages"][0]["n"] = 31
    cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = runner.invoke(app, ["status", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "stale: 3 stage(s)" in result.stdout
    assert "test.count: config changed (n)" in result.stdout
    # test.ask declares no columns, so the judge annotating its input counts as read (fingerprint module doc)
    assert "test.ask: upstream changed (test.count, judge)" in result.stdout
    stale = json.loads(runner.invoke(app, ["status", str(tmp_path / "run"), "--json"]).stdout)["stale"]
    assert stale["judge"] == {"upstream changed": ["test.count"]}
