"""LLMStage: the call, the standard rejections (one wording), structured output, per-answer stages."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from fabrika.generators.generic import CompleteConfig, CompleteStage
from fabrika.llm.rejections import NO_CHOICES, TRUNCATED, answer_problem, llm_error_reason
from fabrika.llm.types import ChatRequest, ChatResponse, Choice
from fabrika.pipeline.llm_stage import LLMStage
from fabrika.pipeline.stage import STAGES, Row, StageConfig, ok, register_stage, rejected
from fabrika.testing import ScriptedLLM, llm_error, run_stage, stage_context

PROMPTS = [{"id": p, "prompt": p} for p in ("хорошо", "длинно", "плохо", "сбой", "пусто")]


def _answer(request: ChatRequest) -> Any:
    prompt = request.messages[-1]["content"]
    if prompt == "хорошо":
        return "Всё в порядке."
    if prompt == "длинно":
        return {"content": "Ответ, который оборвался на полусл", "finish_reason": "length"}
    if prompt == "плохо":
        return llm_error("bad_request")  # the item's fault: a recorded rejection
    if prompt == "сбой":
        return llm_error("server")  # the fleet's fault: retried, then the item stays pending
    assert prompt == "пусто", prompt
    return "   "


def test_generic_complete_rejects_with_the_standard_wording_and_leaves_outages_pending() -> None:
    async def go() -> Any:
        llm = ScriptedLLM(_answer)
        async with stage_context(llm=llm, rows={"prompts": PROMPTS}) as ctx:
            return await run_stage(CompleteStage, CompleteConfig(name="answers", input="prompts"), ctx), llm

    result, llm = asyncio.run(go())
    by_input = {r["input_id"]: r for r in result.rows}
    assert by_input["хорошо"]["status"] == "ok" and by_input["хорошо"]["completion"] == "Всё в порядке."
    assert by_input["длинно"]["reason"] == TRUNCATED == "truncated: answer cut off (finish_reason=length)"
    assert by_input["плохо"]["reason"] == ("llm_error: bad_request: HTTP 400: 'messages' must contain at least "
                                           "one message")
    assert by_input["пусто"]["reason"] == "empty_answer: no text"
    assert result.pending == ["сбой"] and "сбой" not in by_input  # nothing written: the next run asks again
    assert result.reasons() == {"truncated": 1, "llm_error": 1, "empty_answer": 1}
    assert len(llm.tagged("generic.complete")) > len(PROMPTS)  # the server error was retried before giving up


def test_the_reason_helpers_cover_every_unusable_answer() -> None:
    err = llm_error("context_length")
    assert llm_error_reason(err).startswith("llm_error: context_length: HTTP 400: This model's maximum context")
    assert answer_problem(ChatResponse(error=err)) == llm_error_reason(err)
    assert answer_problem(ChatResponse()) == NO_CHOICES
    cut = ChatResponse(choices=(Choice(content="обры", finish_reason="length"),))
    assert answer_problem(cut) == TRUNCATED and answer_problem(cut, allow_truncated=True) is None
    long = llm_error("bad_request", "x" * 5000)
    assert len(llm_error_reason(long)) < 400  # the raw answer goes to raw_excerpt, not into the reason


class _Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fits: bool


class _VoteConfig(StageConfig):
    pass


@register_stage
class _VoteStage(LLMStage[_VoteConfig]):
    """Three samples per row; every answer is its own row (per_answer), parsed into ``_Verdict``."""

    kind = "test.llm_stage.vote"
    answer_model = _Verdict
    per_answer = True

    def requests(self, row: Row) -> list[ChatRequest]:
        return [ChatRequest(messages=({"role": "user", "content": f"{row['text']} #{i}"},), sample_index=i,
                            tag="test.vote", max_tokens=16) for i in range(3)]

    def parse(self, row: Row, responses: list[ChatResponse]) -> list[Row]:
        out = []
        for i, resp in enumerate(responses):
            rid = f"{row['id']}-{i}"
            if (problem := self.answer_problem(resp)) is not None:
                out.append(rejected(rid, problem))
                continue
            try:
                out.append(ok(rid, fits=_Verdict.model_validate_json(resp.text or "").fits))
            except ValueError:
                out.append(rejected(rid, "invalid_json: not a verdict"))
        return out


def test_per_answer_stages_see_every_answer_and_requests_carry_the_declared_schema() -> None:
    def vote(request: ChatRequest) -> Any:
        n = request.messages[0]["content"][-1]
        return {"0": '{"fits": true}', "1": {"content": '{"fits": tr', "finish_reason": "length"},
                "2": "Да, подходит."}[n]

    async def go() -> Any:
        llm = ScriptedLLM(vote)
        async with stage_context(llm=llm) as ctx:
            return await run_stage(_VoteStage, {"name": "vote"}, ctx, rows=[{"id": "r1", "text": "подходит?"}]), llm

    try:
        result, llm = asyncio.run(go())
    finally:
        STAGES.pop("test.llm_stage.vote", None)
    rows = {r["id"]: r for r in result.rows}
    assert rows["r1-0"]["status"] == "ok" and rows["r1-0"]["fits"] is True
    assert rows["r1-1"]["reason"] == TRUNCATED  # one cut-off sample rejects itself, not the row
    assert rows["r1-2"]["reason"].startswith("invalid_json")
    formats = {json.dumps(r.response_format, sort_keys=True) for r in llm.requests}
    assert len(formats) == 1
    fmt = llm.requests[0].response_format
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "test_llm_stage_vote"
    assert fmt["json_schema"]["schema"] == _Verdict.model_json_schema()
