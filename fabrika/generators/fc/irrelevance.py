"""``fc.irrelevance``: derived samples where the right tool is gone.

From a ``tool_call`` sample that opens a turn (its prompt ends with the user's
message, and that message is not the answer to a clarification), every tool the
turn needs is removed from the visible list; the LLM writes the assistant's
text answer saying no available tool can do it, and a judge confirms that no
remaining tool serves the request (``any_tool_fits: false``) — otherwise the
derived sample is rejected with the judge's reason. Both see the whole
conversation up to that turn, not only the last message. Samples whose history
already calls a removed tool are skipped (the prompt would contradict the tool
list).

Input: ``fc.dialogues`` (preferred: an episode row is far smaller than its
samples, which repeat the prompt prefix, so the stage streams less) or
``fc.samples``. Derived ids depend only on the source sample, so both give the
same samples.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

from pydantic import Field, ValidationError

import fabrika.generators.fc.columns as cols
from fabrika.agents.prompts import ASSISTANT_KEYS, CATALOGUE, prompt_text
from fabrika.generators.fc.common import language_ok, response_error
from fabrika.generators.fc.samples import episode_samples
from fabrika.generators.fc.structured import IrrelevanceVerdict, response_format
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.llm_stage import LLMStage
from fabrika.pipeline.stage import Row, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id
from fabrika.schemas.messages import Dialogue, Message
from fabrika.schemas.records import Sample
from fabrika.schemas.rows import from_row, to_row
from fabrika.textutil.answers import extract_json, is_failure
from fabrika.textutil.jsontext import dumps_indent1
from fabrika.textutil.reasoning import split_reasoning

#: rows whose draws :meth:`IrrelevanceStage.requests` keeps for their parse (more than ever run at once)
DRAWN_MEMO = 2048


class IrrelevanceConfig(StageConfig):
    """Config of ``fc.irrelevance`` (input: ``fc.samples``)."""

    # input: fc.dialogues (preferred) or fc.samples
    share: float = Field(default=0.3, ge=0, le=1, description="Share of eligible samples to derive from (chosen by ctx.rng).")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Temperature of the answer writer.")
    max_tokens: int = Field(default=512, ge=64, description="Completion budget of the answer and the judge.")


def conversation_view(prompt: list[Message]) -> list[dict[str, Any]]:
    """The context up to the user's turn as the answer writer and judge read it (no system prompt)."""
    out: list[dict[str, Any]] = []
    for m in prompt:
        if m.role == "system":
            continue
        entry: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.tool_calls:
            entry["calls"] = [{"name": c.name, "arguments": c.arguments} for c in m.tool_calls]
        if m.role == "tool":
            entry["name"] = m.name
        out.append(entry)
    return out


def parse_irrelevance_verdict(text: str | None) -> IrrelevanceVerdict | str:
    """The judge's verdict, or why it is unusable. ``any_tool_fits=false`` approves the sample."""
    data = extract_json(text, expect=dict)
    if is_failure(data):
        return f"judge answer unusable: {data}"
    try:
        return IrrelevanceVerdict.model_validate({k: data[k] for k in ("any_tool_fits", "fitting_tools", "issues")
                                                  if k in data})
    except ValidationError as exc:
        return f"judge answer unusable: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}"


@register_stage
class IrrelevanceStage(LLMStage[IrrelevanceConfig]):
    """Derived irrelevance samples: the needed tools removed, a refusal written and judged (two requests each)."""

    kind = "fc.irrelevance"
    prompt_templates: ClassVar[tuple[Any, ...]] = (CATALOGUE.select("irrelevance_answer", "irrelevance_judge", *ASSISTANT_KEYS),)
    reads = cols.IRRELEVANCE_READS
    writes = cols.IRRELEVANCE
    per_answer = True  # an episode row derives several samples: each pair of answers stands alone
    pilot_draw_shares = ("share",)  # drawn per episode by ctx.rng: the estimate's pilot oversamples it

    def eligible(self, sample: Sample) -> list[str] | None:
        """The tools to remove (every tool this user turn needs), or ``None`` when no true sample can be derived.

        Eligible: a ``tool_call`` target that opens its turn (the prompt ends with
        the user's message), in a turn that is not the answer to a clarification
        (there the request was made earlier and the answer alone would contradict
        the refusal), where removing every tool the turn needs leaves tools, and
        no earlier message already called a removed tool.
        """
        if sample.target_type != "tool_call" or not sample.prompt or sample.prompt[-1].role != "user":
            return None
        meta = sample.meta or {}
        if meta.get("answers_clarification"):
            return None
        if "answers_clarification" not in meta and len(sample.prompt) >= 2:  # rows from before the flag
            before = sample.prompt[-2]
            if before.role == "assistant" and not before.tool_calls and "?" in (before.content or ""):
                return None
        needed = meta.get("turn_tools") or [c["name"] for c in (sample.ground_truth or {}).get("calls", [])]
        removed = sorted(set(needed))
        if not removed or len(removed) >= len(sample.tools):
            return None
        if any(c.name in removed for m in sample.prompt for c in m.tool_calls or []):
            return None
        return removed

    @cached_property
    def _drawn(self) -> dict[int, tuple[Row, list[tuple[Sample, tuple[list[str], str] | Row]]]]:
        """Per row in flight (by identity): its samples and their draws, made by :meth:`requests` for :meth:`parse`
        (the dialogue is parsed and its samples cut once per item, not twice)."""
        return {}

    def _sources(self, row: Row) -> list[Sample]:
        """One ``fc.samples`` row, or the eligible samples of one ``fc.dialogues`` row (the whole episode)."""
        dialogue: Dialogue | None = cols.DIALOGUE.read(row)
        if dialogue is not None:
            return [s for s in episode_samples(dialogue) if self.eligible(s) is not None]
        return [from_row(Sample, row)]

    def _draw(self, sample: Sample) -> tuple[list[str], str] | Row:
        """``(removed tools, task)`` of a sample to derive from, or the row that passes it over."""
        out_id = stable_id(sample.id, prefix="fci-")
        removed = self.eligible(sample)
        if removed is None:
            return rejected(out_id, "not_eligible: not a turn-opening tool_call sample (or it answers a "
                            "clarification, or no tools would be left)", source_id=sample.id, lang=sample.lang)
        if self.ctx.rng(sample.id).random() >= self.config.share:
            return rejected(out_id, f"not_sampled: share={self.config.share}", source_id=sample.id, lang=sample.lang)
        tools = [t for t in sample.tools if t.name not in removed]
        task = dumps_indent1({"conversation": conversation_view(sample.prompt),
                              "tools": [t.to_openai()["function"] for t in tools]})
        return removed, task

    def requests(self, row: Row) -> list[ChatRequest]:
        """Two per drawn sample: the refusal's writer and the judge, who both read the whole conversation."""
        cfg = self.config
        out: list[ChatRequest] = []
        drawn_all = [(sample, self._draw(sample)) for sample in self._sources(row)]
        memo = self._drawn
        if len(memo) >= DRAWN_MEMO:  # items that never reached parse (an unusable answer): forgotten
            memo.clear()
        memo[id(row)] = (row, drawn_all)
        for sample, drawn in drawn_all:
            if isinstance(drawn, dict):
                continue
            task = drawn[1]
            out += [
                ChatRequest(messages=({"role": "user", "content": prompt_text("irrelevance_answer", sample.lang).format(task=task)},),
                            temperature=cfg.temperature, max_tokens=cfg.max_tokens, tag="fc.irrelevance.answer"),
                ChatRequest(messages=({"role": "user", "content": prompt_text("irrelevance_judge", sample.lang).format(task=task)},),
                            temperature=0.0, max_tokens=cfg.max_tokens, tag="fc.irrelevance.judge",
                            response_format=response_format("fc_irrelevance_judge")),
            ]
        return out

    def parse(self, row: Row, responses: list[ChatResponse]) -> list[Row]:
        got = self._drawn.pop(id(row), None)
        # what requests() read and drew for this very row (the row object is alive until parse, so its id is its own)
        drawn_all = got[1] if got is not None and got[0] is row else \
            [(sample, self._draw(sample)) for sample in self._sources(row)]
        if not drawn_all:
            return [rejected(stable_id(self.item_id(row), prefix="fci-none-"),
                             "not_eligible: no turn-opening tool_call sample with tools left")]
        answers = iter(responses)
        out: list[Row] = []
        for sample, drawn in drawn_all:
            if isinstance(drawn, dict):
                out.append(drawn)
            else:
                out.append(self._derived(sample, drawn[0], next(answers), next(answers)))
        return out

    def _derived(self, sample: Sample, removed: list[str], answer_resp: ChatResponse,
                 judge_resp: ChatResponse) -> Row:
        out_id = stable_id(sample.id, prefix="fci-")
        tools = [t for t in sample.tools if t.name not in removed]
        base = {"source_id": sample.id, "lang": sample.lang}
        err = response_error(answer_resp)
        if err:
            return rejected(out_id, err, **base)
        split = split_reasoning(answer_resp.text, answer_resp.choices[0].reasoning)
        text = split.answer if split.complete else ""
        if not text or "<tool_call>" in text:
            return rejected(out_id, "invalid_answer: empty, unfinished reasoning or contains a tool call", **base)
        if not language_ok(text, sample.lang):
            return rejected(out_id, f"wrong_language: answer not in {sample.lang!r}", **base)
        err = response_error(judge_resp)
        verdict = parse_irrelevance_verdict(None if err else judge_resp.text)
        if isinstance(verdict, str):
            return rejected(out_id, verdict if not err else f"judge_{err}", **base)
        if verdict.any_tool_fits:
            why = ", ".join(verdict.fitting_tools) or (verdict.issues or ["-"])[0]
            return rejected(out_id, f"judge_rejected: a remaining tool fits: {why}", **base)
        derived = Sample(
            id=out_id, expert="fc", lang=sample.lang, prompt=sample.prompt,
            completion=[Message(role="assistant", content=text, train=True)], tools=tools,
            target_type="irrelevance", ground_truth={"calls": []},
            meta={**sample.meta, "derived_from": sample.id, "removed_tools": removed},
        )
        return ok(out_id, **{k: v for k, v in to_row(derived).items() if k != "id"}, source_id=sample.id)
