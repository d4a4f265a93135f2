"""The IF reward runs LLM-written verifiers under the pipeline's sandbox settings, and fails closed."""

from __future__ import annotations

import pytest

from fabrika.errors import SandboxError
from fabrika.rewards.instruct import IFRewardConfig, make_if_reward

CODE = "def evaluate(response):\n    return 'кот' in response.lower()\n"


def _score(reward):
    try:
        return reward(prompts=["p"] * 2, completions=["Кот спит.", "Пёс спит."],
                      constraints=[[{"verifier_code": CODE}], [{"verifier_code": CODE}]])
    finally:
        reward.close()


def test_without_bwrap_the_reward_refuses_a_real_models_verifiers(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SandboxError, match="bubblewrap"):
        _score(make_if_reward(IFRewardConfig(rm_correction=False)))


def test_rlimits_opt_in_and_the_sim_fallback_run(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    opted = make_if_reward(IFRewardConfig(rm_correction=False, sandbox={"isolation": "rlimits", "timeout_s": 2.0}))
    assert _score(opted) == [1.0, 0.0]
    sim = make_if_reward(IFRewardConfig(rm_correction=False), sandbox_backend="sim")
    assert _score(sim) == [1.0, 0.0]
