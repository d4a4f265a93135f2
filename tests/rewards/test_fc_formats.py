"""The FC reward scores a right call 1.0 in every common call format (Llama 3, Mistral, harmony and bare JSON
scored 0 or were read as text before the shared reader); a malformed call in any of them scores 0."""

from __future__ import annotations

import json

import pytest

from fabrika.rewards.fc import completion_text, fc_reward, parse_completion_calls
from tests.textutil.call_examples import EXAMPLES, TOOLS


@pytest.mark.parametrize("fmt", sorted(EXAMPLES))
def test_reward_is_one_in_every_format(fmt):
    completion, want = EXAMPLES[fmt]
    rewards = fc_reward(prompts=[None, None], completions=[completion, completion],
                        ground_truth=[{"calls": want}, json.dumps({"calls": want[:1]})],
                        target_type=["tool_call", "tool_call"], tools=[TOOLS, json.dumps(TOOLS)])
    assert rewards == [1.0, 1.0 if len(want) == 1 else 0.0]
    assert parse_completion_calls(completion, tools=TOOLS) == want


@pytest.mark.parametrize("bad", [
    '<|python_tag|>{"name": "get_weather", "parameters": {"location": ',
    '[TOOL_CALLS]get_weather[ARGS]{"location": }',
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"loc',
    '<tool_call>{"name": "get_weather", "parameters": [1]}</tool_call>',
])
def test_malformed_call_in_any_format_scores_zero_and_is_no_text(bad):
    with pytest.raises(ValueError, match="malformed_call"):
        parse_completion_calls(bad)
    assert fc_reward(prompts=[None], completions=[bad], ground_truth=[None], target_type=["text"],
                     tools=[TOOLS]) == [0.0]


def test_call_markup_never_counts_as_a_text_answer():
    """A Mistral or Llama call where a text answer is expected is a call, not text: reward 0."""
    for fmt in ("mistral_v11", "llama_python_tag", "harmony", "llama_json"):
        completion, _ = EXAMPLES[fmt]
        assert completion_text(completion) == ""
        assert fc_reward(prompts=[None], completions=[completion], ground_truth=[None], target_type=["text"],
                         tools=[TOOLS]) == [0.0]


def test_a_bare_json_call_to_a_tool_nobody_offered_is_no_text_answer():
    hallucinated = '{"name": "delete_all", "parameters": {}}'
    assert fc_reward(prompts=[None], completions=[hallucinated], ground_truth=[None], target_type=["irrelevance"],
                     tools=[TOOLS]) == [0.0]
