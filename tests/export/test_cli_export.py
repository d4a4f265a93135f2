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


def test_export_section_of_the_run_gives_defaults(run_dir: Path, tmp_path: Path):
    from fabrika.export.settings import validate_export_section
    from fabrika.store import RunStore

    store = RunStore(run_dir)
    manifest = store.read_manifest()
    manifest["config"]["export"] = {"kind": "grpo", "format": "jsonl", "license": "apache-2.0",
                                    "mix": {"size": 6, "seed": 1, "dimensions": [{"column": "lang",
                                                                                  "shares": {"en": 0.5, "ru": 0.5}}]}}
    store.write_manifest(manifest)
    res = CliRunner().invoke(app, ["export", str(run_dir), "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "exported 6 rows (grpo, jsonl)" in res.output and "lang: en 50.0%, ru 50.0%" in res.output
    assert "license: apache-2.0" in (tmp_path / "a" / "README.md").read_text("utf-8")
    res = CliRunner().invoke(app, ["export", str(run_dir), "--out", str(tmp_path / "b"), "--kind", "sft", "--size", "4"])
    assert res.exit_code == 0 and "exported 4 rows (sft, jsonl)" in res.output  # options win, the rest stays
    assert validate_export_section({"kind": "dpo", "mix": {"size": 0}}) and not validate_export_section({})
    assert [f for f, _ in validate_export_section({"kind": "dpo"})] == ["export.kind"]
