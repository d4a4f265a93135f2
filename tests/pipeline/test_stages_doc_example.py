"""docs/STAGES.md's worked example, ``fc.answer_judge``: its excerpts match the module, and the stage
(config, requests/parse, sim responder, gate group) works when run with the shipped harness only."""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from fabrika.generators.fc.answer_judge import AnswerJudgeConfig, AnswerJudgeStage, answer_judge_responder
from fabrika.llm.rejections import TRUNCATED
from fabrika.llm.sim import registered_sim_responders
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import STAGES
from fabrika.schemas.messages import Message
from fabrika.schemas.records import Sample
from fabrika.schemas.rows import to_row
from fabrika.testing import ScriptedLLM, StageRun, llm_error, run_stage, stage_context

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "STAGES.md"


def _excerpts() -> list[tuple[str, str]]:
    """``(path, chunk)`` for every code block of the doc that names its source file on its first line."""
    out = []
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL):
        first, _, body = block.partition("\n")
        if first.startswith("# ") and first[2:].strip().endswith(".py"):
            for chunk in re.split(r"^\.\.\.\n", body, flags=re.M):  # a line "..." elides part of the source
                if chunk.strip():
                    out.append((first[2:].strip(), chunk))
    return out


def test_the_doc_shows_the_module_as_it_is() -> None:
    excerpts = _excerpts()
    assert {p for p, _ in excerpts} >= {"fabrika/generators/fc/answer_judge.py",
                                        "tests/pipeline/test_stages_doc_example.py"}
    for path, chunk in excerpts:
        assert chunk in (ROOT / path).read_text(encoding="utf-8"), f"docs/STAGES.md is out of date with {path}:\n{chunk}"


def _sample(sid: str, answer: str, *, closing: bool = True) -> dict[str, Any]:
    prompt = [Message(role="system", content="Ты ассистент по железнодорожным билетам."),
              Message(role="user", content="Найдите купе из Твери в Москву на двоих")]
    if closing:
        prompt += [Message(role="assistant", tool_calls=[{"id": "c1", "name": "search_train_tickets",
                                                          "arguments": {"from": "Тверь", "to": "Москва"}}]),
                   Message(role="tool", tool_call_id="c1", name="search_train_tickets",
                           content='{"train": "ПОЕЗД-777", "price": 4321}')]
    return to_row(Sample(id=sid, expert="fc", lang="ru", prompt=prompt, target_type="text",
                         completion=[Message(role="assistant", content=answer, train=True)]))


ROWS = [_sample("consistent", "Нашёл поезд ПОЕЗД-777, купе стоит 4321 ₽."),
        _sample("invented", "Есть купе за 3999 ₽."),
        _sample("cut", "Купе за 4321 ₽."),
        _sample("refused", "Купе стоит 4321 ₽, поезд ПОЕЗД-777."),
        _sample("garbled", "Билет стоит 4321 ₽"),
        _sample("opening", "Сейчас поищу.", closing=False)]


def answers(request: ChatRequest) -> Any:
    """What real judges send back: reasoning, prose around fenced JSON, a cut-off answer, an error."""
    task = request.messages[-1]["content"]
    if "3999" in task:
        return ('<think>В результатах цена 4321, а в ответе 3999.</think>\nОценка:\n```json\n'
                '{"score": 2, "issues": ["цена 3999 не из результатов"]}\n```')
    if "Купе за 4321" in task:
        return {"content": '{"score": 9, "iss', "finish_reason": "length"}
    if "поезд ПОЕЗД-777." in task:
        return llm_error("bad_request")
    if "Билет стоит" in task:
        return "Ответ согласован, ставлю десять из десяти."
    return '<think>Цена и номер поезда совпадают.</think>{"score": 10, "issues": []}'


async def judge(rows: list[dict[str, Any]], answers: Any) -> tuple[StageRun, ScriptedLLM]:
    llm = ScriptedLLM({"fc.answer_judge": answers})
    async with stage_context(llm=llm, rows={"fc.samples": rows}) as ctx:
        result = await run_stage(AnswerJudgeStage, AnswerJudgeConfig(input="fc.samples"), ctx)
    return result, llm


def test_the_example_stage_with_the_shipped_harness() -> None:
    result, llm = asyncio.run(judge(ROWS, answers))
    rows = {r["id"]: r for r in result.rows}
    assert rows["consistent"]["answer_consistency"] == 10.0 and rows["consistent"]["status"] == "ok"
    assert rows["invented"]["answer_consistency"] == 2.0
    assert json.loads(rows["invented"]["answer_issues"]) == ["цена 3999 не из результатов"]
    for rid, reason in (("cut", TRUNCATED), ("refused", "llm_error: bad_request: HTTP 400")):
        assert rows[rid]["status"] == "rejected" and rows[rid]["reason"].startswith(reason)
        assert rows[rid]["answer_consistency"] is None  # the score columns exist on a rejection too
    assert rows["garbled"]["reason"].startswith("answer_judge_invalid_json")
    assert rows["opening"]["status"] == "ok" and rows["opening"]["answer_consistency"] is None
    asked = llm.tagged("fc.answer_judge")
    assert len(asked) == 5  # not the opening answer: the score does not apply there
    assert all(r.response_format["json_schema"]["name"] == "fc_answer_judge" for r in asked)
    assert '"price": 4321' in asked[0].messages[0]["content"]  # the judge sees the tool result

    # the gate group: thresholds are config, applied when the scored table is read
    async def gated(filters: dict[str, Any]) -> list[str]:
        from fabrika.pipeline.config import PipelineConfig

        pipeline = PipelineConfig(name="doc", stages=[], filters=filters)
        async with stage_context(rows={"fc.answer_judge": result.rows}, pipeline=pipeline) as ctx:
            return sorted(r["id"] for r in ctx.iter_rows("fc.answer_judge"))

    assert asyncio.run(gated({})) == ["consistent", "opening"]  # default min_answer_consistency 6
    assert asyncio.run(gated({"fc_targets": {"min_answer_consistency": 1}})) == ["consistent", "invented", "opening"]


def test_the_example_module_registers_its_kind_and_sim_responder() -> None:
    assert STAGES["fc.answer_judge"] is AnswerJudgeStage and AnswerJudgeConfig().kind == "fc.answer_judge"
    assert "fc.answer_judge" in registered_sim_responders()

    result, _ = asyncio.run(judge(ROWS[:2], lambda request: answer_judge_responder(request, random.Random(0))))
    # the responder reads the prompt's JSON block: it finds the number the answer made up
    assert {r["id"]: r["answer_consistency"] for r in result.rows} == {"consistent": 10.0, "invented": 3.0}


@pytest.mark.parametrize("kind", ["fc.answer_judge.other", "fc.plans"])
def test_the_example_config_only_takes_its_own_kind(kind: str) -> None:
    with pytest.raises(ValueError, match="fc.answer_judge"):
        AnswerJudgeConfig.model_validate({"kind": kind})


@pytest.mark.parametrize("target_type", ["tool_call", "clarification", "irrelevance"])
def test_a_target_type_that_never_closes_asks_nothing(target_type: str) -> None:
    """Such a row is not decoded (its score cannot apply); a ``text`` one with the same messages is judged."""
    closing = {**_sample("closing", "Нашёл поезд ПОЕЗД-777, купе стоит 4321 ₽."), "id": "as_text"}
    other = {**closing, "id": "other", "target_type": target_type}
    result, llm = asyncio.run(judge([closing, other], answers))
    rows = {r["id"]: r for r in result.rows}
    assert rows["other"]["status"] == "ok" and rows["other"]["answer_consistency"] is None
    assert rows["as_text"]["answer_consistency"] == 10.0
    assert len(llm.tagged("fc.answer_judge")) == 1
