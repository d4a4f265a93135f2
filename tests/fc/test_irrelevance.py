"""fc.irrelevance: only true irrelevance samples (no clarification answers), whole context, judge polarity."""

from __future__ import annotations

import asyncio
import json

import fabrika.generators.fc.sim_responders as sim
from fabrika.generators.fc.irrelevance import IrrelevanceConfig, IrrelevanceStage
from fabrika.generators.fc.samples import episode_samples
from fabrika.llm.types import ChatRequest
from fabrika.schemas.messages import Dialogue, Message
from fabrika.schemas.tools import ToolCall
from fabrika.testing import ScriptedLLM, stage_context
from tests.fc.test_plans import TOOLS

WEATHER = [t.tool for t in TOOLS[:2]] + [TOOLS[2].tool]


def _dialogue(clarify: bool) -> Dialogue:
    call = ToolCall(id="c1", name="get_weather", arguments={"city": "Казань"})
    msgs = [Message(role="user", content="Какая сейчас погода?" if clarify else "Какая погода в Казани?")]
    if clarify:
        msgs += [Message(role="assistant", content="Уточните, пожалуйста: город?", train=True),
                 Message(role="user", content="город — Казань")]
    msgs += [Message(role="assistant", tool_calls=[call], train=True),
             Message(role="tool", tool_call_id="c1", name="get_weather", content='{"t": 5}'),
             Message(role="assistant", content="В Казани +5.", train=True)]
    offset = 2 if clarify else 0
    targets = ([{"index": 1, "step": 0, "round": 0, "target_type": "clarification", "expected": []}] if clarify else [])
    targets += [{"index": 1 + offset, "step": offset // 2, "round": 0, "target_type": "tool_call",
                 "expected": [{"name": "get_weather", "arguments": {"city": "Казань"}}]},
                {"index": 3 + offset, "step": offset // 2, "round": 1, "target_type": "text", "expected": []}]
    return Dialogue(id="ep-1", messages=msgs, tools=WEATHER, lang="ru",
                    meta={"plan_id": "p", "targets": targets,
                          "step_kinds": (["clarification", "tool_call"] if clarify else ["tool_call"]),
                          "step_tools": ([[], ["get_weather"]] if clarify else [["get_weather"]])})


def _stage(llm) -> IrrelevanceStage:
    return IrrelevanceStage(IrrelevanceConfig(kind="fc.irrelevance", share=1.0), stage_context(llm))


def test_the_answer_to_a_clarification_is_not_eligible():
    stage = _stage(None)
    clarified = [s for s in episode_samples(_dialogue(clarify=True)) if s.target_type == "tool_call"]
    assert len(clarified) == 1 and clarified[0].meta["answers_clarification"] is True
    assert stage.eligible(clarified[0]) is None
    # the same request asked in one turn is eligible, and every tool the turn needs is removed
    direct = [s for s in episode_samples(_dialogue(clarify=False)) if s.target_type == "tool_call"]
    assert stage.eligible(direct[0]) == ["get_weather"]
    # rows written before the flag existed: a question right before the user's turn also blocks it
    legacy = clarified[0].model_copy(update={"meta": {k: v for k, v in clarified[0].meta.items()
                                                      if k != "answers_clarification"}})
    assert stage.eligible(legacy) is None


def _scripted(judge_answer: str) -> ScriptedLLM:
    return ScriptedLLM({"fc.irrelevance.answer": lambda r: "К сожалению, узнать погоду сейчас не получится.",
                        "fc.irrelevance.judge": lambda r: judge_answer})


def test_writer_and_judge_see_the_whole_conversation_and_polarity_is_explicit():
    row = {"id": "ep-1", "dialogue": _dialogue(clarify=False).model_dump_json()}
    llm = _scripted('{"any_tool_fits": false, "fitting_tools": [], "issues": []}')
    [out] = asyncio.run(_stage(llm).process(row))
    assert out["status"] == "ok" and out["target_type"] == "irrelevance"
    for req in llm.requests:
        assert "Какая погода в Казани?" in req.messages[0]["content"]
    assert llm.tagged("fc.irrelevance.judge")[0].response_format["json_schema"]["name"] == "fc_irrelevance_judge"
    [out] = asyncio.run(_stage(_scripted('{"any_tool_fits": true, "fitting_tools": ["get_forecast"]}')).process(row))
    assert out["status"] == "rejected" and out["reason"] == "judge_rejected: a remaining tool fits: get_forecast"
    [out] = asyncio.run(_stage(_scripted('{"approved": true}')).process(row))  # the old, ambiguous shape
    assert out["status"] == "rejected" and out["reason"].startswith("judge answer unusable: any_tool_fits")


def test_sim_judge_polarity_on_a_known_relevant_case():
    """A remaining tool whose key phrase the user said must be reported as fitting, an unrelated one must not."""
    relevant = {"name": "get_forecast", "tiers": ["Погода — прогноз"], "description": "Погода — прогноз"}
    unrelated = {"name": "get_rates", "tiers": ["Курсы валют"], "description": "Курсы валют"}
    for tools, fits in (([relevant, unrelated], True), ([unrelated], False)):
        task = {"conversation": [{"role": "user", "content": "погода — прогноз: город — Казань"}], "tools": tools}
        req = ChatRequest(messages=({"role": "user", "content": f"```json\n{json.dumps(task, ensure_ascii=False)}\n```"},),
                          tag="fc.irrelevance.judge")
        verdict = json.loads(sim.irrelevance_responder(req, __import__("random").Random(0)))
        assert verdict["any_tool_fits"] is fits




def test_a_failed_or_cut_off_writer_is_a_standard_rejection_of_that_sample():
    from fabrika.llm.rejections import TRUNCATED
    from fabrika.testing import llm_error

    row = {"id": "ep-1", "dialogue": _dialogue(clarify=False).model_dump_json()}
    verdict = '{"any_tool_fits": false, "fitting_tools": [], "issues": []}'
    for writer, reason in ((lambda r: llm_error("bad_request"), "llm_error: bad_request: HTTP 400"),
                           (lambda r: {"content": "К сожалению, узна", "finish_reason": "length"}, TRUNCATED)):
        llm = ScriptedLLM({"fc.irrelevance.answer": writer, "fc.irrelevance.judge": lambda r: verdict})
        [out] = asyncio.run(_stage(llm).process(row))
        assert out["status"] == "rejected" and out["reason"].startswith(reason), out["reason"]
        assert out["id"].startswith("fci-") and out["source_id"]
