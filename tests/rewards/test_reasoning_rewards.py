"""Rewards grade the answer a user sees: Qwen3 completions with closed, empty and unclosed <think> blocks."""

from __future__ import annotations

import json

import pytest

from fabrika.rewards.fc import fc_reward
from fabrika.rewards.general import make_general_reward
from fabrika.rewards.instruct import IFRewardConfig, score_if

EMPTY_THINK = "<think>\n\n</think>\n\n"  # what the SFT export teaches with thinking off


def _as_message(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize(
    ("spec", "answer"),
    [
        ({"id": "ru.format.json", "params": {}}, '{"город": "Казань", "население": 1300000}'),
        ({"id": "ru.startend.start_phrase", "params": {"phrase": "Конечно"}}, "Конечно, вот ответ: кот спит."),
        ({"id": "ru.punct.no_commas", "params": {}}, "Кот спит на диване."),
    ],
)
def test_if_reward_grades_the_answer_not_the_reasoning(spec: dict, answer: str) -> None:
    cfg = IFRewardConfig(rm_correction=False)
    completions = [
        answer,  # plain
        EMPTY_THINK + answer,  # empty reasoning block (Qwen3 thinking off)
        "<think>Нужно ответить кратко, без запятых, в JSON, начать с «Конечно», а, б, в.</think>\n" + answer,
        "</think>\n\n" + answer,  # template pre-filled <think>
        _as_message(EMPTY_THINK + answer),
        {"role": "assistant", "content": answer, "reasoning_content": "а, б, в, г"},
        "<think>Конечно, " + answer,  # cut off while thinking: no answer
        "<think>" + answer + "</think>",  # the answer only inside the reasoning
    ]
    scores = score_if(["p"] * len(completions), completions, cfg, constraints=[[spec]] * len(completions))
    assert [s.reward for s in scores] == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]


TOOLS = [{"type": "function", "function": {
    "name": "find_order", "description": "Найти заказ",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "город"},
        "order_id": {"type": "string", "description": "номер заказа"}}, "required": ["city", "order_id"]}}}]
CALL = '<tool_call>{"name": "find_order", "arguments": {"city": "Тула", "order_id": "B7"}}</tool_call>'
GT = {"calls": [{"name": "find_order", "arguments": {"city": "Тула", "order_id": "B7"}}]}


def _fc(completions: list, target: str, gt: object = None) -> list[float]:
    n = len(completions)
    return fc_reward([None] * n, completions, [gt if gt is not None else {"calls": []}] * n, [target] * n,
                     tools=[json.dumps(TOOLS, ensure_ascii=False)] * n)


def test_fc_tool_call_after_reasoning_and_never_inside_it() -> None:
    assert _fc([CALL, EMPTY_THINK + CALL, "<think>вызову find_order</think>\n" + CALL, _as_message(EMPTY_THINK + CALL)],
               "tool_call", GT) == [1.0, 1.0, 1.0, 1.0]
    # a call written only inside the reasoning, or reasoning that never closed, is no call
    assert _fc(["<think>" + CALL + "</think>", "<think>думаю " + CALL, "<think>hmm</think>"], "tool_call", GT) == [0.0] * 3


@pytest.mark.parametrize("target", ["text", "clarification", "irrelevance"])
def test_fc_text_targets_need_a_visible_answer(target: str) -> None:
    assert _fc(["", EMPTY_THINK, "<think>hmm</think>", "<think>Уточните, пожалуйста, город?",
                _as_message("<think>Нет такого инструмента, к сожалению.</think>")], target) == [0.0] * 5


def test_fc_clarification_must_ask_for_the_missing_information() -> None:
    good = ["Уточните, пожалуйста, город?", EMPTY_THINK + "В каком городе искать заказ?",
            "<think>нет номера</think>Подскажите номер заказа.", "Could you tell me the order id?"]
    bad = ["Готово!", EMPTY_THINK + "Готово!", "Хорошо.", "Как ваши дела?",  # no question / asks about something else
           CALL.replace("<tool_call>", "Уточните город? <tool_call>")]  # asks but also calls
    assert _fc(good, "clarification") == [1.0] * len(good)
    assert _fc(bad, "clarification") == [0.0] * len(bad)


def test_fc_clarification_uses_the_withheld_argument_when_recorded() -> None:
    gt = {"calls": [], "withheld": ["order_id"]}
    assert _fc(["Уточните номер заказа?", "Уточните город?"], "clarification", gt) == [1.0, 0.0]


def test_fc_irrelevance_refusal_must_say_why() -> None:
    good = ["К сожалению, ни один из доступных мне инструментов не умеет этого.",
            EMPTY_THINK + "Не могу помочь: у меня нет подходящей функции.",
            "Sorry, none of the tools I have can do that."]
    bad = ["Нет.", "Готово!", EMPTY_THINK + "Хорошо, сейчас.", CALL]
    assert _fc(good, "irrelevance") == [1.0] * len(good)
    assert _fc(bad, "irrelevance") == [0.0] * len(bad)


def test_general_reward_scores_the_answer_and_ranks_no_answer_last() -> None:
    seen: list[str] = []

    def rm(prompts: list, completions: list) -> list[float]:
        from fabrika.textutil.reasoning import answer_text

        seen.extend(answer_text(c) for c in completions)
        return [-2.0 if "<think>" in str(c) and not answer_text(c) else 1.0 for c in completions]

    reward = make_general_reward(rm, length_unit="chars")
    completions = [_as_message("Да, конечно."), _as_message(EMPTY_THINK + "Да, конечно."),
                   _as_message("<think>очень длинное рассуждение " * 20 + "</think>Да, конечно."),
                   _as_message("<think>hmm</think>"), _as_message("<think>не успел"), _as_message("")]
    out = reward(prompts=[[{"role": "user", "content": "?"}]] * 6, completions=completions, ref_length=[100] * 6)
    # the length term counts the visible answer: the three answered completions score the same
    assert out[0] == out[1] == out[2] == pytest.approx(1.0 * (1 - 0.12))
    assert out[3:] == pytest.approx([out[0] - 1.0] * 3)
    assert "рассуждение" not in " ".join(seen)
