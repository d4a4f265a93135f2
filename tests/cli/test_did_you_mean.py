"""A mistyped stage kind, config key, `--set` address or gate threshold names the closest real one."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.errors import ConfigError
from fabrika.gates import parse_set
from fabrika.pipeline import registry
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.overrides import apply_overrides
from fabrika.textutil.suggest import close_matches, did_you_mean

runner = CliRunner()


def _messages(doc: dict, tmp_path: Path) -> list[str]:
    cfg, issues = validate_data(doc, str(tmp_path / "t.yaml"), tmp_path)
    assert cfg is None
    return [str(i) for i in issues if i.level == "error"]


def test_helper():
    found = close_matches("fc.plan", ["fc.plans", "fc.tools", "zz.other"])
    assert found == ["fc.plans"]
    assert did_you_mean("SEED", ["seed", "name"]) == "; did you mean 'seed'?"
    assert did_you_mean("zzzz", ["seed", "name"]) == "" and did_you_mean(None, ["seed"]) == ""


def test_validate_suggests_stage_kinds_and_keys(tmp_path: Path):
    doc = {"name": "x", "seeed": 1, "llm": {"backend": "sim", "backnd": "sim"},
           "stages": [{"kind": "fc.tool"}, {"kind": "fc.plans", "input": "fc.tool", "plans_per_topc": 2}]}
    text = "\n".join(_messages(doc, tmp_path))
    lines = {m.split(": error: ")[1].split(":")[0]: m for m in _messages(doc, tmp_path)}
    assert lines["stages[0].kind"].endswith("; did you mean 'fc.tools' or 'fc.tools_dedup' or 'fc.tools_import'?")
    assert "unknown stage kind 'fc.tool'; known: " in text
    assert lines["stages[1].plans_per_topc"].endswith("; did you mean 'plans_per_topic'?")
    assert lines["llm.backnd"].endswith("; did you mean 'backend'?")
    assert lines["seeed"].endswith("; did you mean 'seed'?") and "unknown key; allowed: name, seed" in lines["seeed"]


def test_set_addresses_suggest_the_stage_and_the_field(tmp_path: Path):
    doc = {"name": "x", "llm": {"backend": "sim"},
           "stages": [{"kind": "fc.tools", "name": "tools"}, {"kind": "fc.plans", "input": "tools"}]}
    with pytest.raises(ConfigError, match=r"no stage named 'fc'…; stages: tools, fc.plans; did you mean 'fc.plans'\?"):
        apply_overrides(doc, ["stages.fc.plan.plans_per_topic=3"])
    text = "\n".join(_messages(apply_overrides(doc, ["stages.fc.plans.plans_per_topc=3"]), tmp_path))
    assert "plans_per_topc: unknown key; allowed: " in text and text.endswith("; did you mean 'plans_per_topic'?")


def test_gate_thresholds_suggest_group_and_parameter():
    registry.load_modules()
    with pytest.raises(ConfigError, match=r"unknown gate group 'lenght'; known: .*; did you mean 'length'\?"):
        parse_set(["filters.lenght.max_tokens=5"])
    with pytest.raises(ConfigError, match=r"unknown parameter 'max_token' of gate 'length'; allowed: .*; did you mean 'max_tokens'"):
        parse_set(["filters.length.max_token=5"])


def test_stages_command_suggests_a_kind():
    result = runner.invoke(app, ["stages", "fc.plan"])
    assert result.exit_code == 2
    assert "did you mean 'fc.plans'" in result.output.replace("\n", "")
