"""The answer a user sees, for the completion shapes real reasoning models produce."""

from __future__ import annotations

import pytest

from fabrika.textutil.reasoning import answer_text, split_reasoning


@pytest.mark.parametrize(
    ("text", "answer", "complete"),
    [
        ("<think>\n\n</think>\n\n{\"a\": 1}", '{"a": 1}', True),  # Qwen3 with thinking off
        ("<think>Считаю: {\"a\": 2}</think>\nОтвет: {\"a\": 1}", 'Ответ: {"a": 1}', True),
        ("<think>hmm, the user wants JSON {\"a\": 1}", "", False),  # cut off while thinking
        ("<think>hmm</think>", "", True),  # reasoning only: no answer
        ("prefilled thoughts</think>Готово.", "Готово.", True),  # template opened the block
        ("<think>a</think>x<think>b</think>Итог", "Итог", True),
        ("<think>a</think>Итог<think>ещё подумаю", "Итог", False),
        ("Ответ.<THINK>обрезано", "Ответ.", False),
        ("Просто ответ без рассуждений.", "Просто ответ без рассуждений.", True),
        ("<THINK>a</THINK> B", "B", True),
    ],
)
def test_think_blocks(text: str, answer: str, complete: bool) -> None:
    split = split_reasoning(text)
    assert split.answer == answer
    assert split.complete is complete


def test_harmony_channels() -> None:
    text = (
        "<|channel|>analysis<|message|>The user asks for a city; answer {\"city\": \"X\"}<|end|>"
        "<|start|>assistant<|channel|>final<|message|>{\"city\": \"Казань\"}<|return|>"
    )
    split = split_reasoning(text)
    assert split.answer == '{"city": "Казань"}'
    assert "The user asks" in split.reasoning


def test_harmony_without_final_is_no_answer() -> None:
    split = split_reasoning("<|channel|>analysis<|message|>Let me think about it")
    assert split.answer == ""
    assert not split.complete


def test_harmony_with_special_tokens_skipped() -> None:
    split = split_reasoning("analysisNeed to greet.assistantfinalЗдравствуйте!")
    assert split.answer == "Здравствуйте!"
    assert split.reasoning == "Need to greet."


def test_text_that_merely_starts_with_analysis_is_an_answer() -> None:
    text = "analysis of the data shows growth"
    assert split_reasoning(text).answer == text


def test_reasoning_content_field() -> None:
    message = {"role": "assistant", "content": "Ответ: 42", "reasoning_content": "думаю"}
    assert answer_text(message) == "Ответ: 42"
    split = split_reasoning("Ответ: 42", "думаю")
    assert split.reasoning == "думаю"


def test_answer_text_shapes() -> None:
    assert answer_text(None) == ""
    assert answer_text("<think>x</think> да") == "да"
    conversation = [
        {"role": "assistant", "content": "<think>plan</think>первый"},
        {"role": "tool", "content": "{}"},
        {"role": "assistant", "content": "<think>more</think>второй"},
    ]
    assert answer_text(conversation) == "второй"
    assert answer_text([{"role": "assistant", "content": [{"type": "text", "text": "<think>a</think>часть"}]}]) == "часть"
    assert answer_text([{"role": "user", "content": "вопрос"}]) == ""
