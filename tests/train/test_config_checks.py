"""Config checks before anything heavy loads: the IF expert refuses a config that turns the RM correction off
(unless --allow-no-rm-correction), the shipped IF/general configs name the demo's RM, and sft.yaml's template
path exists (a missing one is one line, never a traceback)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from fabrika.cli.train_cmd import register
from fabrika.errors import ConfigError
from fabrika.train.grpo import load_grpo_config
from fabrika.train.sft import load_sft_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "train"
BASE = {"model_name_or_path": "m", "dataset_path": "d", "output_dir": "o", "bf16": False, "use_cpu": True}


@pytest.mark.parametrize("if_reward", [{"if_reward_kwargs": {"rm_correction": False}},
                                       {"rubric_reward": {"if_reward": {"rm_correction": False}, "llm": {}}}])
def test_the_if_expert_refuses_rm_correction_off_without_the_flag(if_reward: dict) -> None:
    with pytest.raises(ConfigError, match="--allow-no-rm-correction"):
        load_grpo_config("if", overrides={**BASE, **if_reward})
    cfg = load_grpo_config("if", overrides={**BASE, **if_reward, "allow_no_rm_correction": True})
    assert cfg.allow_no_rm_correction is True
    load_grpo_config("if", overrides=BASE)  # correction on: no flag needed
    load_grpo_config("fc", overrides={**BASE, **if_reward})  # other experts have no correction to turn off


def test_the_cli_refusal_is_one_line_and_exit_2_and_the_flag_lets_it_through(tmp_path: Path) -> None:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """test root"""

    register(root)
    cfg = tmp_path / "grpo_if.yaml"
    cfg.write_text(yaml.safe_dump({**BASE, "dataset_path": str(tmp_path / "missing"), "expert": "if",
                                   "if_reward_kwargs": {"rm_correction": False}}), encoding="utf-8")
    runner = CliRunner()
    refused = runner.invoke(root, ["train", "grpo", str(cfg), "--expert", "if"])
    assert refused.exit_code == 2
    lines = [ln for ln in refused.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--allow-no-rm-correction" in lines[0] and "Traceback" not in refused.output
    allowed = runner.invoke(root, ["train", "grpo", str(cfg), "--expert", "if", "--allow-no-rm-correction"])
    assert allowed.exit_code == 2 and "--allow-no-rm-correction" not in allowed.output  # on to the next check


@pytest.mark.parametrize("expert", ["if", "general"])
def test_shipped_grpo_configs_train_with_the_rm_that_scored_the_demo(expert: str) -> None:
    cfg = load_grpo_config(expert, CONFIGS / f"grpo_{expert}.yaml", {"bf16": False, "use_cpu": True})
    assert cfg.rm_path == "sim" and cfg.allow_no_rm_correction is False


def test_the_template_path_in_sft_yaml_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (CONFIGS / "sft.yaml").read_text(encoding="utf-8")
    (line,) = [ln for ln in text.splitlines() if "chat_template_path:" in ln]
    enabled = tmp_path / "sft.yaml"
    enabled.write_text(text.replace(line, re.sub(r"^#\s*", "", line)), encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # the packaged path resolves from any directory
    cfg = load_sft_config(enabled, {"bf16": False, "use_cpu": True})
    assert cfg.chat_template_path is not None and Path(cfg.chat_template_path).is_file()
    assert "<|im_start|>" in Path(cfg.chat_template_path).read_text(encoding="utf-8")


def test_a_missing_template_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError, match=r"chat_template_path 'nope/qwen3\.jinja' is not a file"):
        load_sft_config(None, {**BASE, "chat_template_path": "nope/qwen3.jinja"})
