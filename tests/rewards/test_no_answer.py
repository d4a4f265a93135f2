"""No visible answer, no reward: rubric, IF and FC rewards give 0 to an empty, whitespace-only or reasoning-only
completion even when the judge passes everything; one missing-α policy (raise) for the rubric and IF rewards; and
``eval fc`` gives a no-call answer the FC reward's own verdict («Готово!» is not a clarification in either)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from fabrika.errors import ConfigError
from fabrika.rewards.fc import fc_reward
from fabrika.rewards.instruct import IFRewardConfig, make_if_reward
from fabrika.rewards.rubric import RubricRewardConfig, make_rubric_reward
from fabrika.testing import ScriptedLLM

PROMPT = [{"role": "system", "content": "Ты играешь пирата и не выходишь из роли."},
          {"role": "user", "content": "Расскажи о себе без запятых."}]
RUBRICS = ["Ассистент не выходит из роли пирата.", "Ответ не содержит оскорблений."]
CONSTRAINTS = [{"id": "ru.punct.no_commas", "params": {}}]  # holds vacuously for an empty string
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Погода в городе",
                                           "parameters": {"type": "object", "required": ["city"],
                                                          "properties": {"city": {"type": "string",
                                                                                  "description": "Город"}}}}}]
NO_ANSWER = {
    "empty": "",
    "whitespace": " \n\t  ",
    "reasoning_only": "<think>Я пират, отвечу как пират, без запятых.</think>",
    "reasoning_then_whitespace": "<think>план ответа</think>\n\n   ",
    "cut_off_while_reasoning": "<think>думаю, думаю",
}
GOOD = "Я старый пират и люблю море."


def _pass_all(request: Any) -> str:
    n = len(RUBRICS)
    return json.dumps({"verdicts": [{"index": i, "reason": "ок", "pass": True} for i in range(1, n + 1)]})


def _rubric(with_constraints: bool) -> Any:
    """Rubrics only (the judge alone decides: the case that paid 1.0 for nothing), or rubrics and constraints."""
    def score(texts: list[str]) -> list[float | None]:
        judge = ScriptedLLM(_pass_all)
        reward = make_rubric_reward(RubricRewardConfig(), llm=judge)
        cons = CONSTRAINTS if with_constraints else []
        gt = json.dumps({"constraints": cons, "rubrics": RUBRICS}, ensure_ascii=False)
        n = len(texts)
        try:
            return reward(prompts=[PROMPT] * n, completions=[[{"role": "assistant", "content": t}] for t in texts],
                          ground_truth=[gt] * n, constraints=[json.dumps(cons) if cons else None] * n,
                          lang=["ru"] * n, rm_score=[5.0] * n, teacher_rm_mean=[0.0] * n)
        finally:
            reward.close()
    return score


def _if(texts: list[str]) -> list[float | None]:
    reward = make_if_reward(IFRewardConfig())
    n = len(texts)
    try:
        return list(reward(prompts=[PROMPT] * n, completions=[[{"role": "assistant", "content": t}] for t in texts],
                           constraints=[json.dumps(CONSTRAINTS)] * n, rm_score=[5.0] * n, teacher_rm_mean=[0.0] * n))
    finally:
        reward.close()


def _fc(target: str) -> Any:
    def score(texts: list[str]) -> list[float | None]:
        n = len(texts)
        gt = json.dumps({"calls": [{"name": "get_weather", "arguments": {"city": "Казань"}}]
                         if target == "tool_call" else [], "withheld": ["city"] if target == "clarification" else []})
        return list(fc_reward([PROMPT] * n, [[{"role": "assistant", "content": t}] for t in texts], [gt] * n,
                              [target] * n, tools=[TOOLS] * n))
    return score


GOOD_FOR = {"rubric": GOOD, "rubric_and_constraints": GOOD, "if": GOOD, "fc_text": GOOD,
            "fc_clarification": "Уточните, пожалуйста, какой город?",
            "fc_irrelevance": "К сожалению, не могу: у меня нет инструмента для этого.",
            "fc_tool_call": '<tool_call>{"name": "get_weather", "arguments": {"city": "Казань"}}</tool_call>'}
REWARDS = {"rubric": _rubric(False), "rubric_and_constraints": _rubric(True), "if": _if, "fc_text": _fc("text"),
           "fc_clarification": _fc("clarification"),
           "fc_irrelevance": _fc("irrelevance"), "fc_tool_call": _fc("tool_call")}


@pytest.mark.parametrize("reward", sorted(REWARDS))
@pytest.mark.parametrize("case", sorted(NO_ANSWER))
def test_no_visible_answer_scores_zero_whatever_the_judge_says(reward: str, case: str) -> None:
    got = REWARDS[reward]([NO_ANSWER[case], GOOD_FOR[reward]])
    assert got[0] == 0.0
    assert got[1] is not None and got[1] > 0  # the same reward does pay a real answer (the test can fail)


def test_the_judge_is_not_asked_about_an_empty_answer() -> None:
    judge = ScriptedLLM(_pass_all)
    reward = make_rubric_reward(RubricRewardConfig(if_reward={"rm_correction": False}), llm=judge)
    gt = json.dumps({"constraints": [], "rubrics": RUBRICS}, ensure_ascii=False)
    try:
        out = reward(prompts=[PROMPT] * 2, completions=["", "<think>x</think>"], ground_truth=[gt] * 2, lang=["ru"] * 2)
    finally:
        reward.close()
    assert out == [0.0, 0.0] and judge.calls == 0


@pytest.mark.parametrize("alpha", [None, math.nan])
@pytest.mark.parametrize("reward", ["rubric", "if"])
def test_a_missing_alpha_raises_in_the_rubric_reward_as_in_the_if_reward(reward: str, alpha: float | None) -> None:
    judge = ScriptedLLM(_pass_all)
    gt = json.dumps({"constraints": CONSTRAINTS, "rubrics": RUBRICS}, ensure_ascii=False)
    fn = make_rubric_reward(RubricRewardConfig(), llm=judge) if reward == "rubric" else make_if_reward(IFRewardConfig())
    try:
        with pytest.raises(ConfigError, match="α"):
            fn(prompts=[PROMPT] * 2, completions=[GOOD, GOOD], ground_truth=[gt] * 2, lang=["ru"] * 2,
               constraints=[json.dumps(CONSTRAINTS)] * 2, rm_score=[5.0, 5.0], teacher_rm_mean=[0.0, alpha])
    finally:
        fn.close()
    assert judge.calls == 0  # refused before any judge call


@pytest.mark.parametrize("target, answer, want", [
    ("clarification", "Готово!", 0.0),
    ("clarification", "Уточните, пожалуйста, для какого города?", 1.0),
    ("irrelevance", "Нет.", 0.0),
    ("irrelevance", "К сожалению, не могу: у меня нет инструмента для заказа такси.", 1.0),
    ("text", "   ", 0.0),
    ("text", "Пожалуйста!", 1.0),
])
def test_eval_fc_and_the_fc_reward_give_the_same_verdict(tmp_path: Any, target: str, answer: str,
                                                         want: float) -> None:
    from fabrika.eval.fc_cases import read_samples
    from fabrika.eval.fc_eval import score_case
    from fabrika.llm import ChatResponse
    from fabrika.llm.types import Choice

    gt = {"calls": [], "withheld": ["city"] if target == "clarification" else []}
    row = {"id": "s1", "prompt": [{"role": "user", "content": "Какая погода?"}], "tools": TOOLS,
           "target_type": target, "ground_truth": gt, "completion": []}
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    (case,) = read_samples(path)
    resp = ChatResponse(choices=(Choice(content=answer),))
    rec = score_case(case.as_item(), resp)
    reward = fc_reward([row["prompt"]], [[{"role": "assistant", "content": answer}]], [json.dumps(gt)], [target],
                       tools=[TOOLS])
    assert reward == [want]
    assert rec["correct"] is bool(want)
