"""Choosing dataset stages per export kind; prompt-only rows never become SFT targets."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.errors import StoreError
from fabrika.export import ExportConfig, export, open_version
from fabrika.store import RunStore, materialise
from tests.export.export_fixtures import make_rows


def _two_stage_run(root):
    """fc.samples (with completions) and if_grpo (prompt-only rows), one version."""
    run = root / "run"
    store = RunStore(run)
    samples = make_rows(6)
    prompts = []
    for i, row in enumerate(make_rows(4)):
        row = dict(row, id=f"g{i}", completion="[]", expert="if")
        prompts.append(row)
    store.write("fc.samples", samples)
    store.write("if_grpo", prompts)
    stages = ["fc.samples", "if_grpo"]
    store.write_manifest({
        "config": {"dataset": {"stages": stages}, "filters": {}, "llm": {"model": "m"},
                   "export": {"stages": {"grpo": ["if_grpo"]}}},
        "order": stages, "layout": {s: {"inputs": [], "annotates": False} for s in stages},
    })
    materialise(run, name="v1")
    return run


def test_sft_export_skips_prompt_only_rows_and_says_so(tmp_path):
    run = _two_stage_run(tmp_path)
    result = export(open_version(run), ExportConfig(kind="sft", format="jsonl", out=tmp_path / "sft"))
    assert result.rows == 6 and result.skipped_prompt_only == 4
    assert result.validation is not None and result.validation.ok


def test_open_version_reads_only_the_named_stages(tmp_path):
    run = _two_stage_run(tmp_path)
    ids = open_version(run, stages=["if_grpo"]).frame.select("id").collect()["id"].to_list()
    assert sorted(ids) == ["g0", "g1", "g2", "g3"]
    with pytest.raises(StoreError, match="no dataset stage 'nope'; available: fc.samples, if_grpo"):
        open_version(run, stages=["nope"])


def test_cli_takes_stages_from_the_run_config_or_the_option(tmp_path):
    run = _two_stage_run(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["export", str(run), "--kind", "grpo", "--format", "jsonl", "--out", str(tmp_path / "g")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for f in (tmp_path / "g").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert len(rows) == 4  # export.stages.grpo = [if_grpo]
    res = runner.invoke(app, ["export", str(run), "--kind", "grpo", "--format", "jsonl", "--stages", "fc.samples",
                              "--out", str(tmp_path / "g2")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for f in (tmp_path / "g2").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert len(rows) == 6
