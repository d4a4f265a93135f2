"""``general.teacher``: K teacher completions per prompt and the reference length L0.

The general reward (:mod:`fabrika.rewards.general`) is ``R · (1 − α)`` with
``α = sgn(R) · clip(L(y) / L0(x))``; L0 comes from here. Each answer is stored
(``teacher_answers``, JSON list) with:

* ``text`` — the visible answer (:func:`fabrika.textutil.reasoning.answer_text`: reasoning removed),
* ``length`` — L of that answer in ``length_unit``, measured by the reward's own
  :func:`~fabrika.rewards.general.completion_length`, so L0 and L(y) are one scale,
* ``usable`` and ``problem`` — a truncated answer (``finish_reason == "length"``), one cut off
  while reasoning, an empty one or a failed request is recorded with its problem and
  **never** enters L0 (a cut-off answer would pull L0 towards ``max_tokens``).

``ref_length`` (L0) is ``ref_length_stat`` (mean or median) of the usable lengths;
``teacher_usable`` counts them (gate ``general.min_usable_answers``). A prompt with
no usable answer is a recorded rejection that keeps its answers.

Sampling: ``n_per_request: true`` asks for the K answers as ``n=K`` in one request
(OpenAI-compatible servers and vLLM support it; one cache entry). A server that
ignores ``n`` and returns fewer choices fails the ``n=K`` request in the engine (it is
retried like a server error, never cached short), and a failed ``n=K`` request falls
back to K single requests, so K is always K. ``false`` sends K requests with
``sample_index`` 0…K−1. Both are deterministic: each request's seed derives from
the pipeline seed, the stage and the prompt id.
"""

from __future__ import annotations

import json
import statistics
from typing import Any, Literal

from pydantic import Field

import fabrika.generators.general.columns as cols
from fabrika.filters.teacher_rm import prompt_messages
from fabrika.llm.rejections import TRUNCATED, llm_error_reason
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.rewards.general import completion_length
from fabrika.schemas.general import GeneralPromptRow
from fabrika.schemas.ids import stable_id
from fabrika.textutil.reasoning import split_reasoning

TAG = "general.teacher"


class GeneralTeacherConfig(StageConfig):
    """``general.teacher``: the teacher's K answers per prompt and L0."""

    k: int = Field(default=4, ge=1, le=64, description="Teacher answers per prompt.")
    n_per_request: bool = Field(default=True, description="Ask for K answers as n=K in one request (K single "
                                "requests when the server does not honour n); false = K requests.")
    model: str | None = Field(default=None, description="Teacher model at the backend; None = the engine default.")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Teacher sampling temperature.")
    max_tokens: int | None = Field(default=2048, ge=1, description="Token limit per answer; a truncated answer "
                                   "is recorded and never enters L0.")
    system: str | None = Field(default=None, description="System turn put in front of prompts that have none.")
    length_unit: Literal["chars", "words"] = Field(
        default="chars", description="Unit of the stored lengths and L0: the GRPO trainer's `length_unit` "
        "(`tokens` is not offered: the trainer counts policy tokens of the whole completion, reasoning included).")
    ref_length_stat: Literal["mean", "median"] = Field(default="median",
                                                       description="Statistic of the usable lengths that is L0.")


def _problem(resp: ChatResponse, index: int) -> tuple[dict[str, Any], str | None]:
    """One stored answer for choice ``index`` of ``resp`` and its problem (None when usable)."""
    if resp.error is not None:
        return {"text": None, "finish_reason": None}, llm_error_reason(resp.error)
    if index >= len(resp.choices):
        return {"text": None, "finish_reason": None}, "missing_choice"
    choice = resp.choices[index]
    split = split_reasoning(choice.content, choice.reasoning)
    entry = {"text": split.answer, "finish_reason": choice.finish_reason, "had_reasoning": bool(split.reasoning)}
    if choice.truncated:
        return entry, TRUNCATED
    if not split.complete:
        return entry, "cut_off_in_reasoning"
    if not split.answer:
        return entry, "empty_answer"
    return entry, None


def reference_length(lengths: list[float], stat: str) -> float | None:
    """L0: ``stat`` (mean or median) of the usable answers' lengths; None when there are none."""
    if not lengths:
        return None
    return float(statistics.median(lengths) if stat == "median" else statistics.fmean(lengths))


@register_stage
class GeneralTeacherStage(Stage[GeneralTeacherConfig]):
    """Per prompt: K teacher answers (visible text, length, problem) and L0 over the usable ones."""

    kind = "general.teacher"
    reads = cols.TEACHER_READS
    writes = cols.TEACHER

    def messages(self, row: Row) -> list[dict[str, Any]]:
        messages = prompt_messages(row)
        if self.config.system and not (messages and messages[0].get("role") == "system"):
            messages = [{"role": "system", "content": self.config.system}, *messages]
        return messages

    def _request(self, row: Row, messages: list[dict[str, Any]], n: int, index: int) -> ChatRequest:
        cfg = self.config
        return ChatRequest(messages=tuple(messages), model=cfg.model, temperature=cfg.temperature,
                           max_tokens=cfg.max_tokens, n=n, sample_index=index,
                           seed=self.ctx.rng(self.item_id(row), index).randrange(2**31), tag=TAG,
                           meta={"id": self.item_id(row)})

    async def _answers(self, row: Row, messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
        k = self.config.k
        if not self.config.n_per_request or k == 1:
            responses = await self.ctx.llm.complete([self._request(row, messages, 1, i) for i in range(k)])
            return [_problem(r, 0) for r in responses]
        (first,) = await self.ctx.llm.complete([self._request(row, messages, k, 0)])
        got = len(first.choices) if first.ok else 0
        out = [_problem(first, i) for i in range(min(got, k))]
        if got < k:  # the server ignored n (fewer choices) or the request failed: single requests for the rest
            more = await self.ctx.llm.complete([self._request(row, messages, 1, i) for i in range(got, k)])
            out += [_problem(r, 0) for r in more]
        return out

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        messages = self.messages(row)
        answers = []
        for i, (entry, problem) in enumerate(await self._answers(row, messages)):
            length = (completion_length([{"role": "assistant", "content": entry["text"]}], cfg.length_unit)
                      if problem is None else None)
            answers.append({"index": i, **entry, "length": length, "usable": problem is None, "problem": problem})
        lengths = [float(a["length"]) for a in answers if a["usable"]]
        l0 = reference_length(lengths, cfg.ref_length_stat)
        # the pool's own lang, else what filter.language detected on the pool (its columns are joined on read)
        p = GeneralPromptRow.of(row)
        columns = {"prompt": json.dumps(messages, ensure_ascii=False), "lang": p.lang or p.lang_detected,
                   "service": p.service, "task": p.task, "prompt_id": p.id,
                   # copied so that a refilter re-applies general.max_per_template to the dataset rows
                   "template_id": p.template_id, "template_rank": p.template_rank,
                   "teacher_answers": json.dumps(answers, ensure_ascii=False), "teacher_k": len(answers),
                   "teacher_usable": len(lengths), "teacher_truncated": sum(a["problem"] == TRUNCATED for a in answers),
                   "ref_length": l0, "length_unit": cfg.length_unit, "ref_length_stat": cfg.ref_length_stat}
        out_id = stable_id(p.id, self.name, prefix="gt-")
        if l0 is None:
            problems = sorted({str(a["problem"]) for a in answers})
            return [rejected(out_id, f"no_usable_teacher_answer: {len(answers)} answers, problems {problems}",
                             **columns)]
        return [ok(out_id, **columns)]
