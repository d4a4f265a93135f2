"""Checked text targets: clarifications ask for the withheld argument, closing answers agree with the results."""

from __future__ import annotations

import asyncio
import json

from fabrika.generators.fc.answer_judge import AnswerJudgeConfig, AnswerJudgeStage, FcTargetsGate, _fc_targets
from fabrika.generators.fc.dialogues import unsupported_numbers
from fabrika.generators.fc.plans import parse_verdict
from fabrika.generators.fc.step_check import asks_for
from fabrika.schemas.messages import Message
from fabrika.schemas.records import Sample
from fabrika.schemas.rows import to_row
from fabrika.testing import ScriptedLLM, sequence, stage_context
from tests.agents.test_visibility import PLAN


def test_a_clarification_must_ask_about_the_withheld_argument():
    # PLAN's station_code is described as «Код станции отправления»
    assert asks_for("Подскажите, с какой станции вы отправляетесь?", ["station_code"], PLAN, "ru")
    assert asks_for("Какой код станции?", ["station_code"], PLAN, "ru")
    assert not asks_for("Какой класс вагона вам нужен?", ["station_code"], PLAN, "ru")
    assert not asks_for("Код станции нужен.", ["station_code"], PLAN, "ru")  # not a question


def test_numbers_of_a_closing_answer_must_come_from_results_or_the_user():
    context = ['{"trains": [{"number": "ПОЕЗД-777", "price": 4321}]}', "Найдите купе на 2 человек"]
    assert unsupported_numbers("Есть поезд за 4321 ₽ на 2 человек.", context) == []
    assert unsupported_numbers("Есть поезд за 3999 ₽.", context) == ["3999"]
    assert unsupported_numbers("Варианты:\n1. поезд за 4321 ₽\n2. на 02 человек", context) == []


def _closing_sample() -> Sample:
    prompt = [Message(role="system", content="Ты ассистент."), Message(role="user", content="Найдите купе из Твери"),
              Message(role="assistant", tool_calls=[{"id": "c1", "name": "search_train_tickets", "arguments": {}}]),
              Message(role="tool", tool_call_id="c1", name="search_train_tickets", content='{"price": 4321}')]
    return Sample(id="s1", expert="fc", lang="ru", prompt=prompt, target_type="text",
                  completion=[Message(role="assistant", content="Билет стоит 4321 ₽.", train=True)])


def test_answer_judge_scores_closing_answers_only():
    llm = ScriptedLLM({"fc.answer_judge": sequence('<think>проверю</think>{"score": 9, "issues": []}',
                                                   '{"score": 42}')})
    stage = AnswerJudgeStage(AnswerJudgeConfig(kind="fc.answer_judge", input="fc.samples"), stage_context(llm))
    [row] = asyncio.run(stage.process(to_row(_closing_sample())))
    assert row["status"] == "ok" and row["answer_consistency"] == 9.0
    task = llm.requests[0].messages[0]["content"]
    assert '"price": 4321' in task and "Билет стоит 4321" in task
    assert llm.requests[0].response_format["json_schema"]["name"] == "fc_answer_judge"
    [row] = asyncio.run(stage.process(to_row(_closing_sample())))
    assert row["status"] == "rejected" and row["reason"].startswith("answer_judge_unusable")
    opening = _closing_sample().model_copy(update={"prompt": _closing_sample().prompt[:2]})
    [row] = asyncio.run(stage.process(to_row(opening)))  # no tool result before it: not a closing answer
    assert row["status"] == "ok" and row["answer_consistency"] is None and len(llm.requests) == 2


def test_fc_targets_gates_keep_nulls_and_apply_thresholds():
    import polars as pl

    df = pl.DataFrame({"asks_withheld": [True, False, None, None, None, None],
                       "unsupported_numbers": [None, None, 0, 2, 1, 0],
                       "answer_consistency": [None, None, 8.0, 3.0, 9.0, 9.0],
                       "contradiction_rule": [None, None, False, False, False, True],
                       "asks_given": [False, False, None, None, None, None]})

    def kept(gate: FcTargetsGate) -> list[bool]:
        keep = pl.lit(True)
        for pred in _fc_targets(gate):
            if set(pred.columns) <= set(df.columns):  # a predicate applies where its scores are
                keep = keep & (pred.expr.fill_null(True) if pred.keep_null else pred.expr)
        return df.select(keep.alias("k"))["k"].to_list()

    # the default tolerates no unsupported number (it used to allow one) and no contradiction
    assert kept(FcTargetsGate()) == [True, False, True, False, False, False]
    assert kept(FcTargetsGate(max_unsupported_numbers=1, drop_contradictions=False)) == [
        True, False, True, False, True, True]


def test_the_judge_returns_every_problem_and_an_approval_with_issues_is_not_one():
    verdict = parse_verdict(json.dumps({"approved": True, "issues": ["реплика неестественна", "дата не в ISO"]},
                                       ensure_ascii=False))
    assert not verdict.approved and verdict.issues == ["реплика неестественна", "дата не в ISO"]
    assert parse_verdict('```json\n{"approved": true, "issues": []}\n```').approved


def test_a_number_the_user_said_in_words_supports_its_digits():
    # the gate now allows no unsupported number, so «три билета» must support 3
    assert unsupported_numbers("Купил 3 билета за 4321 ₽.", ["Купите три билета", '{"price": 4321}']) == []
    assert unsupported_numbers("Купил 4 билета.", ["Купите три билета"]) == ["4"]
