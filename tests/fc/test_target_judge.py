"""fc.target_judge: the LLM half of the contradiction and "already given?" checks, with explicit polarity."""

from __future__ import annotations

import asyncio
import json
import random

from fabrika.generators.fc.target_judge import TAG_CONTRADICTION, TAG_GIVEN, TargetJudgeConfig, TargetJudgeStage
from fabrika.llm.sim import find_sim_responder
from fabrika.llm.types import ChatRequest
from fabrika.schemas.messages import Message
from fabrika.schemas.records import Sample
from fabrika.schemas.rows import to_row
from fabrika.schemas.tools import Tool
from fabrika.testing import ScriptedLLM, sequence, stage_context

TOOL = Tool.model_validate({"function": {"name": "find_hotels", "parameters": {
    "type": "object", "required": ["city"], "properties": {"city": {"type": "string", "description": "Город"},
                                                            "date": {"type": "string", "description": "Дата"}}}}})


def _sample(answer: str, target: str = "text", result: str | None = '{"hotels": [{"name": "Бриз"}]}',
            user: str = "Найдите отель в Питере") -> Sample:
    prompt = [Message(role="system", content="Ты ассистент."), Message(role="user", content=user)]
    if result is not None:
        prompt += [Message(role="assistant", tool_calls=[{"id": "c1", "name": "find_hotels", "arguments": {}}]),
                   Message(role="tool", tool_call_id="c1", name="find_hotels", content=result)]
    return Sample(id="s1", expert="fc", lang="ru", prompt=prompt, target_type=target, tools=[TOOL],
                  completion=[Message(role="assistant", content=answer, train=True)])


def _stage(llm: ScriptedLLM) -> TargetJudgeStage:
    return TargetJudgeStage(TargetJudgeConfig(kind="fc.target_judge", input="fc.samples"), stage_context(llm))


def test_the_judge_is_asked_with_explicit_polarity_and_its_verdicts_become_columns():
    llm = ScriptedLLM({TAG_CONTRADICTION: sequence('<think>сверю</think>```json\n{"contradicts": true, '
                                                   '"evidence": "ничего не нашлось"}\n```')})
    [row] = asyncio.run(_stage(llm).process(to_row(_sample("К сожалению, ничего не нашлось."))))
    assert row["status"] == "ok" and row["answer_contradicts"] is True and row["asked_given_llm"] is None
    prompt = llm.requests[0].messages[0]["content"]
    assert "true, если ответ противоречит результату (это ошибка)" in prompt
    assert llm.requests[0].response_format["json_schema"]["schema"]["required"] == ["contradicts"]


def test_a_clarification_gets_the_already_given_question_and_an_unreadable_verdict_is_a_rejection():
    llm = ScriptedLLM({TAG_GIVEN: sequence('{"already_given": true, "slot": "city", "where": "в Питере"}')})
    [row] = asyncio.run(_stage(llm).process(to_row(_sample("В каком городе?", "clarification", result=None))))
    assert row["status"] == "ok" and row["asked_given_llm"] is True and row["answer_contradicts"] is None
    assert "already given: city" in row["target_judge_evidence"]
    llm = ScriptedLLM({TAG_GIVEN: sequence('{"already_given": fa')})
    [row] = asyncio.run(_stage(llm).process(to_row(_sample("В каком городе?", "clarification", result=None))))
    assert row["status"] == "rejected" and row["asked_given_llm"] is None


def test_tool_call_targets_are_not_judged():
    s = _sample("", "tool_call").model_copy(update={"completion": [Message(
        role="assistant", tool_calls=[{"id": "c2", "name": "find_hotels", "arguments": {"city": "Тверь"}}], train=True)]})
    llm = ScriptedLLM({})
    [row] = asyncio.run(_stage(llm).process(to_row(s)))
    assert row["status"] == "ok" and row["answer_contradicts"] is None and llm.requests == []


def test_the_sim_judge_answers_with_the_rules():
    stage = _stage(ScriptedLLM({}))
    for sample, tag, key, want in [
        (_sample("К сожалению, ничего не нашлось."), TAG_CONTRADICTION, "contradicts", True),
        (_sample("Нашёл отель «Бриз»."), TAG_CONTRADICTION, "contradicts", False),
        (_sample("В каком городе?", "clarification", result=None), TAG_GIVEN, "already_given", True),
        (_sample("В каком городе?", "clarification", result=None, user="Найдите отель"), TAG_GIVEN,
         "already_given", False),
    ]:
        req: ChatRequest = next(r for r in stage.requests(to_row(sample)) if r.tag == tag)
        answer = find_sim_responder(tag)(req, random.Random(0))
        assert json.loads(str(answer))[key] is want, (sample.completion[0].content, answer)
