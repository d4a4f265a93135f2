"""`fabrika export` through the CLI: success output, mixing options and one-line user errors."""

from __future__ import annotations

from pathlib import Path

import datasets
from typer.testing import CliRunner

from fabrika.cli.app import app


def test_export_cli_hf_with_default_mix(run_dir: Path, tmp_path: Path):
    out = tmp_path / "ds"
    res = CliRunner().invoke(app, ["export", str(run_dir), "--kind", "sft", "--format", "hf", "--out", str(out),
                                   "--mix", str(tmp_path / "mix.yaml"), "--size", "10"])
    assert res.exit_code == 2 and "not a file" in res.output
    (tmp_path / "mix.yaml").write_text("dimensions:\n  - column: lang\n    shares: {en: 0.6, ru: 0.4}\n", "utf-8")
    res = CliRunner().invoke(app, ["export", str(run_dir), "--out", str(out), "--mix", str(tmp_path / "mix.yaml"),
                                   "--size", "10", "--seed", "5"])
    assert res.exit_code == 0, res.output
    assert "exported 10 rows" in res.output and "lang: en 60.0%, ru 40.0%" in res.output and "0 failed" in res.output
    assert len(datasets.load_from_disk(str(out))) == 10


def test_export_cli_user_errors_exit_2(run_dir: Path, tmp_path: Path):
    runner = CliRunner()
    assert runner.invoke(app, ["export", str(run_dir), "--kind", "dpo", "--out", str(tmp_path / "a")]).exit_code == 2
    res = runner.invoke(app, ["export", str(run_dir), "--out", str(tmp_path / "b"), "--push-to-hub", "me/x"],
                        env={"HF_TOKEN": ""})
    assert res.exit_code == 2 and "nothing was pushed" in res.output
    res = runner.invoke(app, ["export", str(run_dir), "--out", str(tmp_path / "c"), "--mix", "default", "--size", "999"])
    assert res.exit_code == 2 and "infeasible" in res.output
    res = runner.invoke(app, ["export", str(run_dir), "--version", "v7", "--out", str(tmp_path / "d")])
    assert res.exit_code == 2 and "no such version" in res.output
