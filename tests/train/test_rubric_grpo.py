"""One GRPO CPU step with the rubric reward on a tiny model, the judge served over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasets import Dataset

from fabrika.errors import ConfigError
from fabrika.testing import FakeOpenAIServer
from fabrika.train.grpo import build_grpo_trainer, load_grpo_config

CPU = {"bf16": False, "use_cpu": True, "use_vllm": False, "num_generations": 4, "per_device_train_batch_size": 4,
       "gradient_accumulation_steps": 1, "max_completion_length": 12, "max_steps": 1, "learning_rate": 1e-3,
       "report_to": "none", "save_strategy": "no", "logging_steps": 1, "seed": 0, "log_completions": False}
RUBRICS = ["Ассистент не выходит из роли библиотекаря.", "Ответ написан только строчными буквами."]


def judge(req: dict) -> str:
    """Deterministic verdicts that differ between completions (so advantages are non-zero)."""
    reply = req["messages"][-1]["content"].split("Последний ответ ассистента:")[1]
    passed = len(reply) % 2 == 0
    return json.dumps({"verdicts": [{"index": 1, "reason": "роль", "pass": True},
                                    {"index": 2, "reason": "регистр", "pass": passed}]}, ensure_ascii=False)


@pytest.fixture
def dialogue_export(tmp_path: Path) -> Path:
    gt = {"constraints": [], "rubrics": RUBRICS}
    rows = [{"prompt": [{"role": "system", "content": "Ты библиотекарь."},
                        {"role": "user", "content": q}], "target_type": "text", "lang": "ru",
             "ground_truth": json.dumps(gt, ensure_ascii=False), "constraints": "[]"}
            for q in ("Пиши строчными. Посоветуй книгу.", "А теперь ЗАГЛАВНЫМИ, пожалуйста!")]
    path = tmp_path / "if_dialogue"
    Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.slow
@pytest.mark.train
def test_one_grpo_step_with_the_rubric_reward(tmp_path: Path, tiny_model: Path, dialogue_export: Path) -> None:
    with FakeOpenAIServer(model="judge") as srv:
        srv.script(tag="if.rubric.judge", responder=judge)
        cfg = load_grpo_config("if", overrides={
            "model_name_or_path": str(tiny_model), "dataset_path": str(dialogue_export),
            "output_dir": str(tmp_path / "out"), **CPU,
            "if_reward_kwargs": {"rm_correction": False},  # no RM here: the dialogue rows carry no α
            "allow_no_rm_correction": True,
            "rubric_reward": {"llm": {"backend": "openai", "model": "judge", "max_retries": 0,
                                      "endpoints": [{"base_url": srv.base_url}]}}})
        trainer = build_grpo_trainer(cfg)
        assert trainer.reward_funcs[0].__name__ == "rubric_reward"
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        try:
            trainer.train()
        finally:
            trainer.reward_funcs[0].close()
        assert trainer.state.global_step == 1
        assert len(srv.requests_for("if.rubric.judge")) == 4  # one judge call per completion, batched per step
    logged = [h for h in trainer.state.log_history if "rewards/rubric_reward/mean" in h]
    assert logged and 0.0 <= logged[0]["rewards/rubric_reward/mean"] <= 1.0
    changed = [n for n, p in trainer.model.named_parameters() if not (p.detach() == before[n]).all()]
    assert changed, "no parameter changed after one GRPO step"


def test_rubric_reward_needs_a_judge(tmp_path: Path) -> None:
    from fabrika.train.grpo import expert_reward

    cfg = load_grpo_config("if", overrides={"model_name_or_path": "m", "dataset_path": "d",
                                            "output_dir": str(tmp_path), **CPU, "rubric_reward": {}})
    with pytest.raises(ConfigError, match="rubric_reward needs `llm`"):
        expert_reward(cfg)
