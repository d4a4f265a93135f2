"""The mixed SFT export on the demo's own data: `fabrika export --kind sft --mix-kinds general=0.5,if=0.25,fc=0.25`
draws exact shares (FC shares inside the FC part), the card lists them, and an infeasible request exits 2 naming the
missing rows per kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.pipeline.runner import RunResult

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_run(demo_run_result: RunResult) -> Path:
    """configs/demo.yaml as shipped, run once for the session (tests/conftest.py); exports only read it."""
    return demo_run_result.run_dir


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted((out / "data").glob("*.jsonl")) for line in p.open(encoding="utf-8")]


def test_exact_kind_shares_on_the_demo_data(demo_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "mixed"
    res = CliRunner().invoke(app, ["export", str(demo_run), "--kind", "sft", "--format", "jsonl", "--out", str(out),
                                   "--mix-kinds", "general=0.5,if=0.25,fc=0.25", "--size", "80", "--seed", "3"])
    assert res.exit_code == 0, res.output
    rows = _rows(out)
    kinds = [r.get("expert") or "general" for r in rows]
    assert (kinds.count("general"), kinds.count("if"), kinds.count("fc")) == (40, 20, 20)
    fc = [r for r in rows if r.get("expert") == "fc"]
    assert sum(r["lang"] == "en" for r in fc) == 14  # 70 % of the 20 FC rows: the FC shares still apply
    assert sum(r["target_type"] == "tool_call" for r in fc) == 16
    assert all(r["completion"] for r in rows)  # prompt-only GRPO rows never enter an SFT mix
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "| general | 0.500 | 0.500 | 40 |" in card and "| fc | 0.250 | 0.250 | 20 |" in card
    again = tmp_path / "again"
    CliRunner().invoke(app, ["export", str(demo_run), "--kind", "sft", "--format", "jsonl", "--out", str(again),
                             "--mix-kinds", "general=0.5,if=0.25,fc=0.25", "--size", "80", "--seed", "3"])
    assert sorted(r["id"] for r in _rows(again)) == sorted(r["id"] for r in rows)  # seeded


def test_infeasible_kind_shares_exit_2_with_counts(demo_run: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["export", str(demo_run), "--kind", "sft", "--out", str(tmp_path / "x"),
                                   "--mix-kinds", "general=0.8,if=0.1,fc=0.1", "--size", "1000", "--mix", "none"])
    assert res.exit_code == 2
    assert "{'kind': 'general'}: need 800, have" in res.output and "missing" in res.output
    assert not (tmp_path / "x").exists()
    bad = CliRunner().invoke(app, ["export", str(demo_run), "--kind", "sft", "--out", str(tmp_path / "y"),
                                   "--mix-kinds", "general=half", "--size", "10"])
    assert bad.exit_code == 2 and "KIND=SHARE" in bad.output
