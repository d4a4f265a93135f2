"""``fc.target_judge``: an LLM check of FC text targets, with explicit polarity.

Two questions the rules of :mod:`fabrika.filters.fc_facts` and
:mod:`fabrika.filters.fc_given` answer only for the forms they know:

* a **closing answer** (text after tool results): does it *contradict* the last
  tool result? The judge returns ``{"contradicts": true|false, "evidence": …}`` —
  ``true`` is the bad verdict, said in the key's name, so a judge cannot flip the
  scale the way a bare 0–10 score can be flipped (``answer_contradicts``);
* a **clarification** (or a text target that asks): does it ask for something the
  user or a tool *already gave*, in any wording (a synonym, a short form, a
  transliteration)? ``{"already_given": true|false, "slot": …}`` (``asked_given_llm``).

Null where a question does not apply. The ``sim`` responder answers with the
rules, so the offline pipeline exercises the stage; the ``fc_targets`` gate group
(:mod:`fabrika.generators.fc.answer_judge`) reads both columns.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fabrika.agents.prompts import CATALOGUE, prompt_text
from fabrika.filters.fc_facts import contradiction
from fabrika.filters.fc_given import ALIASES, asked_params, dates_in, given_in, result_has
from fabrika.generators.fc.answer_judge import closing_context
from fabrika.generators.fc.irrelevance import conversation_view
from fabrika.llm.sim import register_sim_responder
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.columns import Column
from fabrika.pipeline.llm_stage import LLMStage, structured_format
from fabrika.pipeline.stage import Row, StageConfig, ok, register_stage, rejected
from fabrika.schemas.messages import Message
from fabrika.schemas.records import Sample
from fabrika.schemas.rows import from_row
from fabrika.textutil.answers import extract_json, is_failure

__all__ = ["ContradictionVerdict", "GivenVerdict", "TargetJudgeConfig", "TargetJudgeStage"]

TAG_CONTRADICTION = "fc.target_judge.contradiction"
TAG_GIVEN = "fc.target_judge.given"


class TargetJudgeConfig(StageConfig):
    """Config of ``fc.target_judge`` (input: ``fc.samples``)."""

    max_tokens: int = Field(default=512, ge=64, description="Completion budget of one judge request.")


class ContradictionVerdict(BaseModel):
    """``contradicts: true`` — the answer says something the last tool result contradicts (a wrong target)."""

    model_config = ConfigDict(extra="forbid")

    contradicts: bool
    evidence: str = ""


class GivenVerdict(BaseModel):
    """``already_given: true`` — the question asks for what the user or a tool already gave (a wrong target)."""

    model_config = ConfigDict(extra="forbid")

    already_given: bool
    slot: str = ""
    where: str = ""


_NO_SCORE: dict[str, Any] = {"answer_contradicts": None, "asked_given_llm": None, "target_judge_evidence": None}


def _params(sample: Sample) -> dict[str, str]:
    out: dict[str, str] = {}
    for t in sample.tools or []:
        for k, v in (t.function.parameters.get("properties") or {}).items():
            out.setdefault(k, str(v.get("description", "")) if isinstance(v, dict) else "")
    return out


def _asks(sample: Sample, answer: str) -> bool:
    return sample.target_type == "clarification" or (sample.target_type == "text" and "?" in answer)


@register_stage
class TargetJudgeStage(LLMStage[TargetJudgeConfig]):
    """Annotating stage: ``answer_contradicts`` and ``asked_given_llm`` per FC text target, null elsewhere."""

    kind = "fc.target_judge"
    prompt_templates: ClassVar[tuple[Any, ...]] = (CATALOGUE.select("contradiction_judge", "given_judge"),)
    annotates: ClassVar[bool] = True
    reads = (Column("prompt", list[Message]), Column("completion", list[Message]), Column("target_type", str),
             Column("lang", str))
    writes = (Column("answer_contradicts", bool, required=False), Column("asked_given_llm", bool, required=False),
              Column("target_judge_evidence", str, required=False))

    def requests(self, row: Row) -> list[ChatRequest]:
        sample = from_row(Sample, row)
        answer = "\n".join(m.content or "" for m in sample.completion)
        out: list[ChatRequest] = []
        found = closing_context(sample)
        if found is not None:
            task = {"conversation": conversation_view(sample.prompt), "last_result": _json(found[1][-1]),
                    "answer": answer}
            out.append(self._request("contradiction_judge", sample.lang, task, TAG_CONTRADICTION,
                                     ContradictionVerdict))
        if _asks(sample, answer):
            task = {"conversation": conversation_view(sample.prompt), "parameters": _params(sample),
                    "question": answer}
            out.append(self._request("given_judge", sample.lang, task, TAG_GIVEN, GivenVerdict))
        return out

    def _request(self, prompt: str, lang: str, task: dict[str, Any], tag: str, model: type[BaseModel]) -> ChatRequest:
        return ChatRequest(
            messages=({"role": "user", "content": prompt_text(prompt, lang).format(
                task=json.dumps(task, ensure_ascii=False, indent=1))},),
            temperature=0.0, max_tokens=self.config.max_tokens, tag=tag,
            response_format=structured_format(model, tag.replace(".", "_")))

    def rejection_columns(self, row: Row) -> dict[str, Any]:
        return dict(_NO_SCORE)

    def parse(self, row: Row, responses: list[ChatResponse]) -> list[Row]:
        rid = self.item_id(row)  # an annotation: one score row per input row, keyed by its id
        scores: dict[str, Any] = dict(_NO_SCORE)
        evidence: list[str] = []
        for req_tag, resp in zip(self._tags(row), responses):
            data = extract_json(resp.text, expect=dict, reasoning_content=resp.choices[0].reasoning)
            if is_failure(data):
                return [rejected(rid, f"target_judge_{data}", **_NO_SCORE)]
            try:
                if req_tag == TAG_CONTRADICTION:
                    c = ContradictionVerdict.model_validate(data)
                    scores["answer_contradicts"] = c.contradicts
                    if c.contradicts:
                        evidence.append(f"contradicts: {c.evidence}")
                else:
                    g = GivenVerdict.model_validate(data)
                    scores["asked_given_llm"] = g.already_given
                    if g.already_given:
                        evidence.append(f"already given: {g.slot} ({g.where})")
            except ValidationError as exc:
                return [rejected(rid, f"target_judge_unusable: {exc.errors()[0]['msg']}", **_NO_SCORE)]
        scores["target_judge_evidence"] = json.dumps(evidence, ensure_ascii=False) if evidence else None
        return [ok(rid, **scores)]

    def _tags(self, row: Row) -> list[str]:
        return [r.tag for r in self.requests(row)]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- sim responder: the rules answer ------------------------------------------------------------

_TASK_BLOCK = re.compile(r"```json\s*\n(.*?)```", re.DOTALL)


def target_judge_responder(request: ChatRequest, rng: random.Random) -> str:
    """``sim`` judge: the rule checks, read from the prompt's JSON block as a model would read it."""
    block = _TASK_BLOCK.search(str(request.messages[-1].get("content") or ""))
    task = json.loads(block.group(1)) if block else {}
    conv = task.get("conversation") or []
    if request.tag == TAG_CONTRADICTION:
        why = contradiction(str(task.get("answer") or ""), task.get("last_result"))
        return json.dumps({"contradicts": why is not None, "evidence": why or ""}, ensure_ascii=False)
    # the current task: since the last closing answer (an assistant text right after a tool result), as a
    # reader scopes «already given» — a date a finished booking used answers no new request's question
    start = max((i + 1 for i, m in enumerate(conv) if i and m.get("role") == "assistant" and not m.get("calls")
                 and conv[i - 1].get("role") == "tool"), default=0)
    users = [str(m.get("content") or "") for m in conv[start:] if m.get("role") == "user"]
    results = [str(m.get("content") or "") for m in conv[start:] if m.get("role") == "tool"]
    params = {k: {"description": v} for k, v in (task.get("parameters") or {}).items()}
    for p in asked_params(str(task.get("question") or ""), params, "ru"):
        desc = f"{p} {params[p]['description']}".lower()
        if result_has(p, results):
            return json.dumps({"already_given": True, "slot": p, "where": "tool"}, ensure_ascii=False)
        place = re.search(r"город|city|town|place|mest|мест|пункт|destination|origin", desc)
        if place and any(given_in(city, users) for city in ALIASES):
            return json.dumps({"already_given": True, "slot": p, "where": "user"}, ensure_ascii=False)
        if re.search(r"дат|date|day|день|число", desc) and any(dates_in(u) for u in users):
            return json.dumps({"already_given": True, "slot": p, "where": "user"}, ensure_ascii=False)
    return json.dumps({"already_given": False, "slot": "", "where": ""})


register_sim_responder("fc.target_judge", target_judge_responder)
