"""``fc.answer_judge`` (an LLM scorer) and the ``fc_targets`` gate group over FC text-target scores.

A closing answer is the assistant's text after tool results; nothing but the
exact-match reward checked it before (non-empty, in the right script). The
judge reads the conversation, the tool results and the answer and scores its
consistency 0–10 (``answer_consistency``, null for samples it does not apply
to). The cheap rule scores are written by ``fc.samples`` itself:
``asks_withheld`` (a clarification names the withheld argument), ``asks_given``
(it asks for what the dialogue already gave), ``unsupported_numbers`` /
``unsupported_facts`` (numbers, dates, names of a closing answer found in no tool
result or user turn) and ``contradiction_rule``; ``fc.target_judge`` adds the LLM
halves (``answer_contradicts``, ``asked_given_llm``). Thresholds live in the gate
group (contract 2).

The module is a whole stage in one place — config, :class:`~fabrika.pipeline.llm_stage.LLMStage`
(``requests`` / ``parse``), the ``sim`` responder and the gate group — and is the worked
example of ``docs/STAGES.md``.
"""

from __future__ import annotations

import json
import random
import re
import typing
from typing import Any, ClassVar

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fabrika.agents.prompts import CATALOGUE, prompt_text
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.generators.fc.irrelevance import conversation_view
from fabrika.llm.sim import register_sim_responder
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.columns import Column
from fabrika.pipeline.llm_stage import LLMStage
from fabrika.pipeline.stage import Row, StageConfig, ok, register_stage, rejected
from fabrika.schemas.messages import Message
from fabrika.schemas.records import Sample, TargetType
from fabrika.schemas.rows import from_row
from fabrika.textutil.answers import extract_json, is_failure
from fabrika.textutil.jsontext import dumps_indent1


class AnswerJudgeConfig(StageConfig):
    """Config of ``fc.answer_judge`` (input: ``fc.samples``)."""

    max_tokens: int = Field(default=512, ge=64, description="Completion budget of one judge request.")


class AnswerVerdict(BaseModel):
    """How consistent a closing answer is with the tool results (0 contradicts … 10 fully consistent)."""

    model_config = ConfigDict(extra="forbid")

    score: float = Field(ge=0, le=10)
    issues: list[str] = Field(default_factory=list)


def closing_context(sample: Sample) -> tuple[list[str], list[str]] | None:
    """(user turns, tool results since the last user turn) when ``sample`` is a closing answer, else ``None``."""
    if sample.target_type != "text":
        return None
    last_user = max((i for i, m in enumerate(sample.prompt) if m.role == "user"), default=-1)
    results = [m.content or "" for m in sample.prompt[last_user + 1:] if m.role == "tool"
               and m.flag != "validator_error"]
    if not results:
        return None
    return [m.content or "" for m in sample.prompt if m.role == "user"], results


_NO_SCORE = {"answer_consistency": None, "answer_issues": None}
#: the target types that are never a closing answer (every valid one but ``text``; a row's None or an
#: unknown value still goes through the full decoding, with its errors)
_TARGET_TYPE = Column("target_type", str, required=False)
_NOT_CLOSING = frozenset(typing.get_args(TargetType)) - {"text"}


@register_stage
class AnswerJudgeStage(LLMStage[AnswerJudgeConfig]):
    """Annotating stage: ``answer_consistency`` (0–10) per closing answer, null elsewhere."""

    kind = "fc.answer_judge"
    prompt_templates: ClassVar[tuple[Any, ...]] = (CATALOGUE.select("answer_judge"),)
    reads = (Column("prompt", list[Message]), Column("completion", list[Message]), _TARGET_TYPE)
    writes = (Column("answer_consistency", float, required=False), Column("answer_issues", list[str], required=False))
    annotates: ClassVar[bool] = True
    answer_model = AnswerVerdict

    def requests(self, row: Row) -> list[ChatRequest]:
        if _TARGET_TYPE.read(row) in _NOT_CLOSING:  # closing_context is None: no need to decode the sample
            return []
        sample = from_row(Sample, row)
        found = closing_context(sample)
        if found is None:
            return []
        users, results = found
        answer = "\n".join(m.content or "" for m in sample.completion)
        task = {"conversation": conversation_view(sample.prompt), "user_turns": users,
                "results": [json.loads(r) if r[:1] in "[{" else r for r in results], "answer": answer}
        return [ChatRequest(
            messages=({"role": "user", "content": prompt_text("answer_judge", sample.lang).format(
                task=dumps_indent1(task))},),
            temperature=0.0, max_tokens=self.config.max_tokens, tag="fc.answer_judge")]

    def rejection_columns(self, row: Row) -> dict[str, Any]:
        return dict(_NO_SCORE)

    def parse(self, row: Row, responses: list[ChatResponse]) -> list[Row]:
        rid = self.item_id(row)  # an annotation: one score row per input row, keyed by its id
        if not responses:  # not a closing answer: the score does not apply
            return [ok(rid, **_NO_SCORE)]
        (resp,) = responses
        data = extract_json(resp.text, expect=dict, reasoning_content=resp.choices[0].reasoning)
        if is_failure(data):
            return [rejected(rid, f"answer_judge_{data}", **_NO_SCORE)]
        try:
            verdict = AnswerVerdict.model_validate(data)
        except ValidationError as exc:
            return [rejected(rid, f"answer_judge_unusable: {exc.errors()[0]['msg']}", **_NO_SCORE)]
        return [ok(rid, answer_consistency=float(verdict.score),
                   answer_issues=json.dumps(verdict.issues, ensure_ascii=False))]


def answer_judge_responder(request: ChatRequest, rng: random.Random) -> str:
    """``sim`` judge: 10 when every number of the answer occurs in the results or user turns, else 3.

    It reads the task from the prompt's JSON block, as a model would.
    """
    block = _TASK_BLOCK.search(str(request.messages[-1].get("content") or ""))
    task = json.loads(block.group(1)) if block else {}
    seen = json.dumps(task.get("results"), ensure_ascii=False) + " " + " ".join(task.get("user_turns") or [])
    missing = [n for n in re.findall(r"\d+", task.get("answer") or "") if n not in seen]
    return json.dumps({"score": 3 if missing else 10, "issues": [f"number {n}" for n in missing]})


_TASK_BLOCK = re.compile(r"```json\s*\n(.*?)```", re.DOTALL)
register_sim_responder("fc.answer_judge", answer_judge_responder)


class FcTargetsGate(BaseModel):
    """``filters.fc_targets``: thresholds on the scores of FC text targets (null = does not apply, kept)."""

    model_config = ConfigDict(extra="forbid")

    require_clarification_asks: bool = Field(
        default=True, description="Drop clarification targets that do not ask about a withheld argument.")
    max_unsupported_numbers: int = Field(
        default=0, ge=0, description="Most numbers a closing answer may state that no tool result or user turn has "
        "(number words count: «три билета» supports 3).")
    max_unsupported_facts: int = Field(
        default=0, ge=0, description="Most numbers, dates and names a closing answer may state that no tool result "
        "or user turn supports (`unsupported_facts`, rules of fabrika.filters.fc_facts).")
    drop_contradictions: bool = Field(
        default=True, description="Drop closing answers that contradict the last tool result: by the rule "
        "(`contradiction_rule`) or by `fc.target_judge` (`answer_contradicts`).")
    drop_asked_given: bool = Field(
        default=True, description="Drop clarifications and text targets that ask for what the user or a tool "
        "already gave: by the rule (`asks_given`: aliases, lemmas, transliteration) or by `fc.target_judge` "
        "(`asked_given_llm`).")
    min_answer_consistency: float = Field(
        default=6.0, ge=0, le=10, description="Least `fc.answer_judge` score (0–10) of a closing answer.")


def _false(column: str) -> pl.Expr:
    """Keep rows whose flag is false (a column of nulls only has dtype Null: cast it first)."""
    return ~pl.col(column).cast(pl.Boolean)


def _fc_targets(p: FcTargetsGate) -> list[GatePredicate]:
    preds = [
        GatePredicate("fc_targets.max_unsupported_numbers", pl.col("unsupported_numbers") <= p.max_unsupported_numbers,
                      ("unsupported_numbers",), keep_null=True),
        GatePredicate("fc_targets.max_unsupported_facts", pl.col("unsupported_facts") <= p.max_unsupported_facts,
                      ("unsupported_facts",), keep_null=True),
        GatePredicate("fc_targets.min_answer_consistency", pl.col("answer_consistency") >= p.min_answer_consistency,
                      ("answer_consistency",), keep_null=True),
    ]
    if p.require_clarification_asks:
        preds.insert(0, GatePredicate("fc_targets.require_clarification_asks", pl.col("asks_withheld"),
                                      ("asks_withheld",), keep_null=True))
    if p.drop_contradictions:
        preds += [GatePredicate("fc_targets.contradiction_rule", _false("contradiction_rule"),
                                ("contradiction_rule",), keep_null=True),
                  GatePredicate("fc_targets.answer_contradicts", _false("answer_contradicts"),
                                ("answer_contradicts",), keep_null=True)]
    if p.drop_asked_given:
        preds += [GatePredicate("fc_targets.asks_given", _false("asks_given"), ("asks_given",), keep_null=True),
                  GatePredicate("fc_targets.asked_given_llm", _false("asked_given_llm"), ("asked_given_llm",),
                                keep_null=True)]
    return preds


register_gate_group("fc_targets", FcTargetsGate, _fc_targets)
