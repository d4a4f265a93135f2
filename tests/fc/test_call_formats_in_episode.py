"""The episode loop reads a model's calls in every common format, as the reward does: a Llama 3, Mistral or
harmony answer is a call (checked against the reference), never a text target with markup in it."""

from __future__ import annotations

import pytest

from fabrika.generators.fc.step_check import parse_assistant_choice
from fabrika.llm.types import Choice
from tests.textutil.call_examples import EXAMPLES


@pytest.mark.parametrize("fmt", sorted(f for f in EXAMPLES if f not in ("openai", "llama_pythonic")))
def test_calls_written_into_the_content_are_calls(fmt):
    completion, want = EXAMPLES[fmt]
    text, calls, problems = parse_assistant_choice(Choice(content=completion))
    assert problems == [] and text is None
    assert [(c.name, c.arguments) for c in calls] == [(w["name"], w["arguments"]) for w in want]


def test_reasoning_and_malformed_calls_never_become_a_text_target():
    text, calls, problems = parse_assistant_choice(Choice(
        content='<|channel|>analysis<|message|>Вызову get_weather.<|end|><|start|>assistant<|channel|>final'
                '<|message|>Сейчас в Париже 15 °C.<|return|>'))
    assert calls == [] and problems == [] and text == "Сейчас в Париже 15 °C."
    text, calls, problems = parse_assistant_choice(Choice(content='[TOOL_CALLS]get_weather[ARGS]{"location": '))
    assert calls == [] and problems and problems[0].startswith("malformed_call:")
    _, calls, problems = parse_assistant_choice(Choice(content="<think>get_weather(Paris)"))
    assert calls == [] and any(p.startswith("unclosed_reasoning") for p in problems)
