"""`fabrika train …` commands and the shipped configs/train/*.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from fabrika.cli.train_cmd import parse_overrides, register
from fabrika.errors import ConfigError
from fabrika.train.grpo import load_grpo_config
from fabrika.train.merge import load_merge_config
from fabrika.train.sft import load_sft_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "train"
CPU = ["--set", "bf16=false", "--set", "use_cpu=true", "--set", "report_to=none", "--set", "save_strategy=no"]


@pytest.fixture()
def app() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """test root"""

    register(root)
    return root


def test_shipped_configs_are_valid(tmp_path: Path) -> None:
    cpu = {"bf16": False, "use_cpu": True, "output_dir": str(tmp_path)}
    sft = load_sft_config(CONFIGS / "sft.yaml", cpu)
    assert sft.max_length == 32768 and sft.learning_rate == 1e-5
    for expert in ("if", "fc", "general"):
        cfg = load_grpo_config(expert, CONFIGS / f"grpo_{expert}.yaml", cpu)
        assert cfg.expert == expert and cfg.num_generations == 8
    assert load_grpo_config("general", CONFIGS / "grpo_general.yaml", cpu).rm_path == "sim"  # the demo RM
    merge = load_merge_config(CONFIGS / "merge.yaml")
    assert merge.order == ["if", "fc", "general"] and merge.t2 == 0.8
    with pytest.raises(ConfigError, match="says expert='fc' but --expert is 'if'"):
        load_grpo_config("if", CONFIGS / "grpo_fc.yaml", cpu)


def test_parse_overrides() -> None:
    assert parse_overrides(["a=1", "b=x", "c=[0, 0.5]", "d=false", "e=no"]) == {
        "a": 1, "b": "x", "c": [0, 0.5], "d": False, "e": "no"}
    with pytest.raises(ConfigError, match="FIELD=VALUE"):
        parse_overrides(["learning_rate"])


@pytest.mark.slow
@pytest.mark.train
def test_cli_sft_then_merge(app: typer.Typer, tmp_path: Path, tiny_model: Path, sft_export: Path) -> None:
    runner = CliRunner()
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(yaml.safe_dump({"model_name_or_path": str(tiny_model), "dataset_path": str(sft_export),
                                   "output_dir": str(tmp_path / "sft"), "max_steps": 1, "max_length": 256}))
    res = runner.invoke(app, ["train", "sft", str(cfg), *CPU])
    assert res.exit_code == 0, res.output
    assert "sft: 1 steps" in res.output and (tmp_path / "sft" / "model.safetensors").is_file()

    merge_cfg = tmp_path / "merge.yaml"
    merge_cfg.write_text(yaml.safe_dump({"experts": {"if": str(tiny_model), "fc": str(tmp_path / "sft"),
                                                     "general": str(tiny_model)},
                                         "output_dir": str(tmp_path / "merge")}))
    res = runner.invoke(app, ["train", "merge", str(merge_cfg), "--set", "attn_t=0.3"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "merge" / "merged" / "model.safetensors").is_file()
    written = yaml.safe_load((tmp_path / "merge" / "merged" / "mergekit_config.yml").read_text())
    assert written["merge_method"] == "slerp" and written["parameters"]["t"][-1] == {"value": 0.8}


def test_cli_errors_exit_2(app: typer.Typer, tmp_path: Path) -> None:
    runner = CliRunner()
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("model_name_or_path: m\ndataset_path: d\nlearning_rat: 1\n")
    res = runner.invoke(app, ["train", "sft", str(cfg), *CPU])
    assert res.exit_code == 2 and "learning_rat" in res.output
    res = runner.invoke(app, ["train", "grpo", str(cfg), "--expert", "math"])
    assert res.exit_code == 2 and "--expert must be one of" in res.output
    res = runner.invoke(app, ["train", "merge", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2 and "does not exist" in res.output


@pytest.mark.slow
@pytest.mark.train
def test_cli_grpo_saves_the_expert(app: typer.Typer, tmp_path: Path, tiny_model: Path,
                                   grpo_exports: dict[str, Path]) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(yaml.safe_dump({"expert": "general", "model_name_or_path": str(tiny_model),
                                   "dataset_path": str(grpo_exports["general"]), "output_dir": str(tmp_path / "g"),
                                   "num_generations": 2, "per_device_train_batch_size": 2,
                                   "gradient_accumulation_steps": 1, "max_completion_length": 6, "max_steps": 1,
                                   "use_vllm": False}))
    res = CliRunner().invoke(app, ["train", "grpo", str(cfg), "--expert", "general", *CPU])
    assert res.exit_code == 0, res.output
    assert "grpo general: 1 steps" in res.output and (tmp_path / "g" / "model.safetensors").is_file()
