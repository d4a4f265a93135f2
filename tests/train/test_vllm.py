"""GRPO with vLLM generation (colocate) on the tiny model; runs only where vLLM and a GPU exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabrika.train.config import vllm_available

pytestmark = [pytest.mark.slow, pytest.mark.train, pytest.mark.vllm,
              pytest.mark.skipif(not vllm_available(), reason="needs vllm and a CUDA device")]


def test_grpo_fc_with_vllm_colocate(tmp_path: Path, tiny_model: Path, grpo_exports: dict[str, Path]) -> None:
    from fabrika.train.grpo import build_grpo_trainer, expert_reward, load_grpo_config

    cfg = load_grpo_config("fc", overrides={
        "model_name_or_path": str(tiny_model), "dataset_path": str(grpo_exports["fc"]),
        "output_dir": str(tmp_path / "fc"), "num_generations": 4, "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1, "max_completion_length": 16, "max_steps": 1, "report_to": "none",
        "save_strategy": "no", "logging_steps": 1, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.2,
        "vllm_max_model_length": 1024})
    assert cfg.use_vllm is True  # the preset turns vLLM on where it is available
    trainer = build_grpo_trainer(cfg)
    trainer.train()
    completions = list(trainer._logs["completion"])
    logged = list(trainer._logs["rewards"]["fc_reward"])
    prompts = list(trainer._logs["prompt"])
    assert len(completions) == 4
    rows = trainer.train_dataset
    gt = {str(r["prompt"]): (r["ground_truth"], r["target_type"]) for r in rows}
    direct = expert_reward(cfg)(prompts=prompts, completions=completions,
                                ground_truth=[gt[str(p)][0] for p in prompts],
                                target_type=[gt[str(p)][1] for p in prompts])
    assert direct == logged
