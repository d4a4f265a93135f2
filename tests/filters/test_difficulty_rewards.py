"""Every default difficulty reward resolves and scores a tiny example of its expert."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fabrika.filters.difficulty import DEFAULT_REWARDS, DifficultyConfig, pass_rate, resolve_reward
from fabrika.llm.types import ChatResponse, Choice

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
NO_COMMAS = {"id": "ru.punct.no_commas", "params": {}}
SHORT = {"id": "ru.length.words_max", "params": {"n": 3}}

#: expert → (row, a passing answer, a failing answer) — one tiny example per expert with a default reward.
EXAMPLES: dict[str, tuple[dict[str, Any], ChatResponse, ChatResponse]] = {
    "fc": (
        {"id": "f1", "expert": "fc", "lang": "ru", "target_type": "tool_call",
         "prompt": json.dumps([{"role": "user", "content": "Погода в Казани?"}], ensure_ascii=False),
         "tools": json.dumps([WEATHER]),
         "ground_truth": json.dumps({"calls": [{"name": "get_weather", "arguments": {"city": "Казань"}}]},
                                    ensure_ascii=False)},
        ChatResponse(choices=(Choice(content="", tool_calls=(
            {"id": "c", "name": "get_weather", "arguments": '{"city": "Казань"}'},)),)),
        ChatResponse(choices=(Choice(content="", tool_calls=(
            {"id": "c", "name": "get_weather", "arguments": '{"city": "Москва"}'},)),)),
    ),
    "if": (
        {"id": "i1", "expert": "if", "lang": "ru", "target_type": "text",
         "prompt": json.dumps([{"role": "user", "content": "Опиши кота коротко и без запятых."}], ensure_ascii=False),
         "ground_truth": json.dumps({"constraints": [NO_COMMAS, SHORT]}, ensure_ascii=False)},
        ChatResponse(choices=(Choice(content="Кот спит."),)),
        # satisfies one constraint of two: the verifier score V is all-or-nothing, so this fails
        ChatResponse(choices=(Choice(content="Кот спит на тёплом диване весь день."),)),
    ),
}


def test_every_expert_with_a_default_reward_has_an_example() -> None:
    # general has no default: its reward needs an RM and L0, not a pass/fail check of the answer
    assert set(DEFAULT_REWARDS) == set(EXAMPLES) and "general" not in DEFAULT_REWARDS
    assert DifficultyConfig().rewards == DEFAULT_REWARDS


@pytest.mark.parametrize("expert", sorted(DEFAULT_REWARDS))
def test_default_reward_resolves_and_scores_one_example(expert: str) -> None:
    reward = resolve_reward(DEFAULT_REWARDS[expert])
    assert callable(reward)
    row, good, bad = EXAMPLES[expert]
    # a threshold below 1 tells an all-or-nothing verifier score from a partial one
    got = pass_rate(row, [good, bad, good, bad], reward, pass_threshold=0.5)
    assert got["difficulty_pass_rate"] == 2 / 4 and got["difficulty_k"] == 4 and got["difficulty_errors"] == 0
    # a response without choices is a failed request: the row is unmeasured, not "half solved"
    got = pass_rate(row, [good, bad, good, ChatResponse(error=None)], reward, pass_threshold=0.5)
    assert got["difficulty_pass_rate"] is None and got["difficulty_errors"] == 1


def test_if_default_reward_is_the_verifier_score() -> None:
    reward = resolve_reward(DEFAULT_REWARDS["if"])
    _, good, bad = EXAMPLES["if"]
    completions = [[{"role": "assistant", "content": r.choices[0].content}] for r in (good, bad)]
    scores = reward(prompts=[[{"role": "user", "content": "x"}]] * 2, completions=completions,
                    constraints=[[NO_COMMAS, SHORT]] * 2)
    assert scores == [1.0, 0.0]
