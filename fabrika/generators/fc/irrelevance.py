"""``fc.irrelevance``: derived samples where the right tool is gone.

From a ``tool_call`` sample that opens a turn (its prompt ends with the user's
message), the tools it calls are removed from the visible list; the LLM writes
the assistant's text answer saying no available tool can do it, and a judge
confirms that no remaining tool satisfies the request — otherwise the derived
sample is rejected with the judge's issue. Samples whose history already calls
a removed tool are skipped (the prompt would contradict the tool list).

Input: ``fc.dialogues`` (preferred: an episode row is far smaller than its
samples, which repeat the prompt prefix, so the stage streams less) or
``fc.samples``. Derived ids depend only on the source sample, so both give the
same samples.
"""

from __future__ import annotations

import json
from typing import ClassVar, Literal

from pydantic import Field

from fabrika.agents.prompts import prompt_text
from fabrika.generators.fc.common import language_ok, response_error
from fabrika.generators.fc.plans import parse_verdict
from fabrika.generators.fc.samples import episode_samples
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id
from fabrika.schemas.messages import Dialogue, Message
from fabrika.schemas.records import Sample
from fabrika.schemas.rows import from_row, to_row


class IrrelevanceConfig(StageConfig):
    """Config of ``fc.irrelevance`` (input: ``fc.samples``)."""

    kind: Literal["fc.irrelevance"] = "fc.irrelevance"
    # input: fc.dialogues (preferred) or fc.samples
    share: float = Field(default=0.3, ge=0, le=1, description="Share of eligible samples to derive from (chosen by ctx.rng).")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Temperature of the answer writer.")
    max_tokens: int = Field(default=512, ge=64, description="Completion budget of the answer and the judge.")


@register_stage
class IrrelevanceStage(Stage):
    kind: ClassVar[str] = "fc.irrelevance"
    Config: ClassVar[type[StageConfig]] = IrrelevanceConfig

    def eligible(self, sample: Sample) -> tuple[list[str], str] | None:
        """(removed tool names, the user's request) or ``None`` when the sample cannot be derived from."""
        if sample.target_type != "tool_call" or not sample.prompt or sample.prompt[-1].role != "user":
            return None
        removed = sorted({c["name"] for c in (sample.ground_truth or {}).get("calls", [])})
        if not removed or len(removed) >= len(sample.tools):
            return None
        if any(c.name in removed for m in sample.prompt for c in m.tool_calls or []):
            return None
        return removed, sample.prompt[-1].content or ""

    async def process(self, row: Row) -> list[Row]:
        """One ``fc.samples`` row, or one ``fc.dialogues`` row (every sample of the episode)."""
        if "dialogue" in row:
            candidates = [s for s in episode_samples(Dialogue.model_validate_json(row["dialogue"]))
                          if self.eligible(s) is not None]
            if not candidates:
                return [rejected(stable_id(row["id"], prefix="fci-none-"),
                                 "not_eligible: no turn-opening tool_call sample with tools left")]
            out: list[Row] = []
            for sample in candidates:
                out += await self.derive(sample)
            return out
        return await self.derive(from_row(Sample, row))

    async def derive(self, sample: Sample) -> list[Row]:
        cfg: IrrelevanceConfig = self.config  # type: ignore[assignment]
        out_id = stable_id(sample.id, prefix="fci-")
        found = self.eligible(sample)
        if found is None:
            return [rejected(out_id, "not_eligible: not a turn-opening tool_call sample with tools left",
                             source_id=sample.id, lang=sample.lang)]
        if self.ctx.rng(sample.id).random() >= cfg.share:
            return [rejected(out_id, f"not_sampled: share={cfg.share}", source_id=sample.id, lang=sample.lang)]
        removed, request = found
        tools = [t for t in sample.tools if t.name not in removed]
        task = json.dumps({"request": request, "tools": [t.to_openai()["function"] for t in tools]},
                          ensure_ascii=False, indent=1)
        base = {"source_id": sample.id, "lang": sample.lang}
        answer_resp, judge_resp = await self.ctx.llm.complete([
            ChatRequest(messages=({"role": "user", "content": prompt_text("irrelevance_answer", sample.lang).format(task=task)},),
                        temperature=cfg.temperature, max_tokens=cfg.max_tokens, tag="fc.irrelevance.answer"),
            ChatRequest(messages=({"role": "user", "content": prompt_text("irrelevance_judge", sample.lang).format(task=task)},),
                        temperature=0.0, max_tokens=cfg.max_tokens, tag="fc.irrelevance.judge"),
        ])
        err = response_error(answer_resp)
        if err:
            return [rejected(out_id, err, **base)]
        text = (answer_resp.text or "").strip()
        if not text or "<tool_call>" in text:
            return [rejected(out_id, "invalid_answer: empty or contains a tool call", **base)]
        if not language_ok(text, sample.lang):
            return [rejected(out_id, f"wrong_language: answer not in {sample.lang!r}", **base)]
        verdict = parse_verdict(judge_resp.text if judge_resp.ok else None)
        if not verdict.approved:
            return [rejected(out_id, f"judge_rejected: {(verdict.issues or ['a remaining tool fits'])[0]}", **base)]
        derived = Sample(
            id=out_id, expert="fc", lang=sample.lang, prompt=sample.prompt,
            completion=[Message(role="assistant", content=text, train=True)], tools=tools,
            target_type="irrelevance", ground_truth={"calls": []},
            meta={**sample.meta, "derived_from": sample.id, "removed_tools": removed},
        )
        return [ok(out_id, **{k: v for k, v in to_row(derived).items() if k != "id"}, source_id=sample.id)]
