"""The shipped configs give every IF GRPO row its α: configs/if_demo.yaml (shrunk; the session's run of
tests/conftest.py) → if_grpo, if_multi_grpo and if_dialogue_grpo rows all carry a finite ``teacher_rm_mean`` from
the packaged stand-in RM (``rm_id`` sim@v1), the GRPO export keeps it on 100 % of the IF rows, and the dataset card
says the RM is a stand-in. demo.yaml and if_demo.yaml score the same three tables."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fabrika.export.source import open_version
from fabrika.export.writer import ExportConfig, export
from fabrika.pipeline.config import load_config
from fabrika.rewards.rm_service import SIM_RM_ID

ROOT = Path(__file__).resolve().parents[2]
IF_GRPO = ("if_grpo", "if_multi_grpo", "if_dialogue_grpo")


def _teacher_inputs(path: Path) -> set[str]:
    config = load_config(path)
    return {str(s.input) for s in config.stages if s.kind == "rm.teacher_scores" and getattr(s, "sim", False)}


@pytest.mark.parametrize("name", ["demo.yaml", "if_demo.yaml"])
def test_shipped_configs_score_every_if_grpo_table(name: str) -> None:
    assert _teacher_inputs(ROOT / "configs" / name) == {"if_queries", "if_multi_prompts", "if_dialogue_grpo"}


@pytest.fixture(scope="module")
def exported(if_demo_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The GRPO export of the session's shrunk IF demo run (tests/conftest.py; the export only reads it)."""
    out = tmp_path_factory.mktemp("alpha_demo") / "grpo"
    export(open_version(if_demo_run, None, list(IF_GRPO)), ExportConfig(kind="grpo", out=out, validate_rows=0))
    return out


def test_every_if_grpo_row_has_alpha_from_the_stand_in_rm(exported: Path) -> None:
    import datasets

    ds = datasets.load_from_disk(str(exported))
    rows = [r for r in ds if r["expert"] == "if"]
    kinds = {r["id"].split("-", 1)[0] for r in rows}
    assert {"ifg", "ifmg", "ifdg"} <= kinds and len(rows) >= 20  # single-constraint and dialogue prompts at least
    assert all(r["teacher_rm_mean"] is not None and math.isfinite(r["teacher_rm_mean"]) for r in rows)
    assert {r["rm_id"] for r in rows} == {SIM_RM_ID} and all(r["teacher_rm_k"] == 4 for r in rows)
    card = (exported / "README.md").read_text(encoding="utf-8")
    assert "stand-in" in card and SIM_RM_ID in card
