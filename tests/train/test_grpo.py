"""GRPO for each expert on CPU: 2 steps with the real reward; logged rewards equal the reward called directly."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset

from fabrika.errors import ConfigError, InputError
from fabrika.train.grpo import (
    build_grpo_trainer,
    dynamic_sampling,
    expert_reward,
    load_grpo_config,
    prefilter_by_difficulty,
)

CPU = {"bf16": False, "use_cpu": True, "use_vllm": False, "num_generations": 4, "per_device_train_batch_size": 4,
       "gradient_accumulation_steps": 1, "max_completion_length": 12, "max_steps": 2, "learning_rate": 1e-3,
       "report_to": "none", "save_strategy": "no", "logging_steps": 1, "seed": 0, "log_completions": False}


class Recorder:
    """Wraps the trainer's reward to keep what TRL passed in and what came back."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.calls = fn, []
        self.__name__ = fn.__name__

    def __call__(self, prompts: list[Any], completions: list[Any], completion_ids: list[Any], **kwargs: Any) -> Any:
        out = self.fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        self.calls.append((prompts, completions, completion_ids, kwargs, list(out)))
        return out


def _config(expert: str, tmp_path: Path, model: Path, data: Path, **extra: Any) -> Any:
    return load_grpo_config(expert, overrides={"model_name_or_path": str(model), "dataset_path": str(data),
                                               "output_dir": str(tmp_path / expert), **CPU, **extra})


def test_presets_follow_the_recipe(tmp_path: Path) -> None:
    base = {"model_name_or_path": "m", "dataset_path": "d", "output_dir": str(tmp_path), "use_cpu": True,
            "bf16": False}
    cfgs = {e: load_grpo_config(e, overrides=base) for e in ("if", "fc", "general")}
    for cfg in cfgs.values():
        assert (cfg.num_generations, cfg.learning_rate, cfg.temperature) == (8, 1e-6, 1.0)
        assert (cfg.epsilon, cfg.epsilon_high) == (0.2, 0.28)
        assert cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps == 512
    assert (cfgs["if"].beta, cfgs["fc"].beta, cfgs["general"].beta) == (0.001, 0.001, 0.01)
    assert cfgs["general"].use_vllm is False  # no vLLM / GPU here
    with pytest.raises(ConfigError, match="--expert must be one of"):
        load_grpo_config("math", overrides=base)


@pytest.mark.slow
@pytest.mark.train
@pytest.mark.parametrize("expert", ["if", "fc", "general"])
def test_two_steps_logged_rewards_match_direct(expert: str, tmp_path: Path, tiny_model: Path,
                                               grpo_exports: dict[str, Path]) -> None:
    cfg = _config(expert, tmp_path, tiny_model, grpo_exports[expert])
    trainer = build_grpo_trainer(cfg)
    rec = Recorder(trainer.reward_funcs[0])
    trainer.reward_funcs[0] = rec
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 2 and len(rec.calls) == 2
    direct_fn = expert_reward(cfg)  # a fresh instance of the real reward
    logged = [h for h in trainer.state.log_history if f"rewards/{rec.__name__}/mean" in h]
    assert len(logged) == 2
    for (prompts, completions, ids, kwargs, out), log in zip(rec.calls, logged):
        assert len(out) == 4 and all(isinstance(c, list) and c[0]["role"] == "assistant" for c in completions)
        direct = direct_fn(prompts=prompts, completions=completions, completion_ids=ids, **kwargs)
        assert direct == out
        assert log[f"rewards/{rec.__name__}/mean"] == pytest.approx(sum(out) / len(out), abs=1e-6)
    assert list(trainer._logs["completion"]) == rec.calls[-1][1]
    if expert == "fc":  # the prompt the policy saw carries the tools in its system turn
        assert "get_weather" in rec.calls[0][0][0][0]["content"]
    elif expert == "if":  # V ∈ {0, .5, 1}, shifted by the RM correction (+1 if S > α, −0.5 otherwise)
        for _, _, _, kwargs, out in rec.calls:
            allowed = {0.0, 1.5, 2.0} if kwargs["rm_score"][0] > 0.5 else {0.0, 0.5}
            assert set(out) <= allowed
    else:  # the general reward really used rm_score and ref_length
        kwargs, out = rec.calls[0][3], rec.calls[0][4]
        assert all(math.copysign(1, o) == math.copysign(1, r) for o, r in zip(out, kwargs["rm_score"]) if o)
    changed = any(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters())
    # GRPO moves the policy only when some group has reward variance (else every advantage is 0).
    signal = any(len(set(out[g:g + 4])) > 1 for *_, out in rec.calls for g in range(0, len(out), 4))
    assert changed == signal
    if expert == "general":
        assert signal  # lengths differ within each group, so the length penalty always gives variance


@pytest.mark.slow
@pytest.mark.train
def test_dynamic_sampling_in_training_zeroes_out_of_band_groups(tmp_path: Path, tiny_model: Path,
                                                                 grpo_exports: dict[str, Path]) -> None:
    cfg = _config("general", tmp_path, tiny_model, grpo_exports["general"], dynamic_sampling=True)
    trainer = build_grpo_trainer(cfg)
    rec = Recorder(trainer.reward_funcs[0])
    trainer.reward_funcs[0] = rec
    advantages = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)
        advantages.append(out["advantages"].tolist())
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    assert trainer.state.global_step == 2
    by_score = {}
    for (_, _, _, kwargs, out), adv in zip(rec.calls, advantages):
        by_score[kwargs["rm_score"][0]] = (out, adv)
    masked, adv_masked = by_score[-0.25]  # negative RM score: group mean < 0, outside (0, 0.8]
    kept, adv_kept = by_score[0.5]         # mean reward ≈ 0.35–0.45: inside the band
    assert masked == [None] * 4 and adv_masked == [0.0] * 4
    assert all(isinstance(r, float) and 0 < r <= 0.45 for r in kept) and any(a != 0 for a in adv_kept)


def test_missing_reward_column_fails_before_training(tmp_path: Path, tiny_model: Path) -> None:
    bad = tmp_path / "bad"
    Dataset.from_list([{"prompt": [{"role": "user", "content": "q"}], "rm_score": 1.0}]).save_to_disk(str(bad))
    with pytest.raises(InputError, match=r"lacks column\(s\) \['ref_length'\]"):
        build_grpo_trainer(_config("general", tmp_path, tiny_model, bad))
    with pytest.raises(InputError, match=r"lacks column\(s\) \['ground_truth', 'target_type'\]"):
        build_grpo_trainer(_config("fc", tmp_path, tiny_model, bad))
    with pytest.raises(InputError, match=r"lacks column\(s\) \['constraints'\]"):
        build_grpo_trainer(_config("if", tmp_path, tiny_model, bad))
    no_alpha = tmp_path / "noalpha"
    Dataset.from_list([{"prompt": [{"role": "user", "content": "q"}], "rm_score": 1.0,
                        "constraints": '[{"id": "ru.punct.no_commas", "params": {}}]'}]).save_to_disk(str(no_alpha))
    with pytest.raises(InputError, match="has no 'teacher_rm_mean' column"):
        build_grpo_trainer(_config("if", tmp_path, tiny_model, no_alpha))
    with pytest.raises(ConfigError, match="if_reward_kwargs"):
        build_grpo_trainer(_config("if", tmp_path, tiny_model, bad, if_reward_kwargs={"agregation": "all"}))
    ends_with_answer = tmp_path / "ans"
    Dataset.from_list([{"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                        "rm_score": 1.0, "ref_length": 3}]).save_to_disk(str(ends_with_answer))
    with pytest.raises(InputError, match="ends with an assistant turn"):
        build_grpo_trainer(_config("general", tmp_path, tiny_model, ends_with_answer))


def test_dynamic_sampling_masks_out_of_band_groups() -> None:
    def reward(prompts, completions, **kwargs):
        return [float(c) for c in completions]

    wrapped = dynamic_sampling(reward, 0.0, 0.8)
    prompts = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    completions = [0, 0, 0, 0] + [1, 0, 1, 0] + [1, 1, 1, 1]  # means 0 (drop), 0.5 (keep), 1 (drop)
    out = wrapped(prompts=prompts, completions=completions)
    assert out == [None] * 4 + [1.0, 0.0, 1.0, 0.0] + [None] * 4
    assert wrapped.__name__ == "reward"
    edge = wrapped(prompts=["d"] * 5, completions=[1, 1, 1, 1, 0])  # mean 0.8 is inside (0, 0.8]
    assert edge == [1.0, 1.0, 1.0, 1.0, 0.0]


def test_wrapped_rewards_keep_their_name_and_close() -> None:
    """run_grpo closes each reward it trains with: a wrapper must not lose the IF reward's sandbox pool."""
    from fabrika.rewards.reward_fn import RewardFunction
    from fabrika.train.grpo import _trl_reward

    closed: list[str] = []
    inner = RewardFunction("if_reward", lambda prompts, completions, **kw: [1.0] * len(completions),
                           close=lambda: closed.append("pool"))
    for fn in (_trl_reward(inner), dynamic_sampling(_trl_reward(inner), 0.0, 0.8)):
        assert fn.__name__ == "if_reward"
        assert isinstance(fn(prompts=["p"], completions=["c"]), list)
        fn.close()
    assert closed == ["pool", "pool"]


def test_prefilter_by_stored_difficulty() -> None:
    ds = Dataset.from_dict({"prompt": ["a", "b", "c", "d"], "pass_rate": [0.0, 0.5, 0.8, 1.0]})
    assert prefilter_by_difficulty(ds, "pass_rate", 0.0, 0.8)["prompt"] == ["b", "c"]
    with pytest.raises(ConfigError, match="kept 0 of 4"):
        prefilter_by_difficulty(ds, "pass_rate", 0.9, 0.95)
