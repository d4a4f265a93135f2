"""The isolation mode is visible where a person looks: progress header, status, report, card."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from fabrika.export.card import render_card
from fabrika.export.report import build_report
from fabrika.export.source import ExportSource
from fabrika.pipeline.progress import RunProgress
from fabrika.sandbox.policy import SandboxSettings, header_line
from fabrika.store import RunStore
from tests.export.export_fixtures import make_rows, make_run


def test_progress_header_names_the_mode(monkeypatch, capsys):
    weak = header_line(SandboxSettings(isolation="rlimits"), "openai")
    assert "rlimits" in weak and "WEAKER ISOLATION" in weak
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "rlimits" in header_line(SandboxSettings(), "sim")  # the sim demo's fallback is shown, not hidden
    with RunProgress(enabled=True) as progress:
        progress.note(weak)
    assert "WEAKER ISOLATION" in capsys.readouterr().err


def _run(tmp_path: Path, mode: str) -> Path:
    run = make_run(tmp_path, make_rows(10))
    store = RunStore(run)
    manifest = store.read_manifest()
    manifest["sandbox_isolation"] = mode
    store.write_manifest(manifest)
    return run


def test_report_names_the_mode(tmp_path):
    text = build_report(_run(tmp_path, "rlimits")).read_text("utf-8")
    assert "Sandbox isolation of LLM-written verifiers: rlimits (weaker: no namespaces)" in text


def test_card_names_the_mode():
    source = ExportSource(frame=pl.LazyFrame(), manifest={"sandbox_isolation": "rlimits"})
    card = render_card(source, "sft", "parquet", 0, {}, "apache-2.0")
    assert "sandbox isolation of LLM-written verifiers: `rlimits` — **weaker isolation" in card
    strong = render_card(ExportSource(frame=pl.LazyFrame(), manifest={"sandbox_isolation": "bwrap"}),
                         "sft", "parquet", 0, {}, "apache-2.0")
    assert "`bwrap`" in strong and "weaker" not in strong
