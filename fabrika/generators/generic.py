"""A generic pair of stages: read prompts from a file, complete each one with the LLM.

``generic.prompts`` (source) reads a JSONL or parquet file of prompts;
``generic.complete`` asks the engine for one completion per prompt and records
the text, or a rejection on an LLM error, a truncated or an empty answer (the
smallest :class:`~fabrika.pipeline.llm_stage.LLMStage`).
Together they make the smallest useful pipeline (``configs/smoke.yaml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Iterator

from pydantic import Field

from fabrika.errors import InputError
from fabrika.inputs import iter_records, where
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.columns import Column, Contract
from fabrika.pipeline.llm_stage import LLMStage
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id


class PromptsConfig(StageConfig):
    """Config of ``generic.prompts``."""

    path: Path = Field(description="JSONL (one object per line) or parquet file of prompts, relative to the config file.")
    text_field: str = Field(default="prompt", description="Field holding the prompt text.")
    id_field: str | None = Field(default=None, description="Field holding a stable id; default: hash of the text.")


def iter_prompt_records(path: Path, text_field: str, *,
                        what: str = "prompts file") -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, record)`` pairs whose ``text_field`` is a non-empty string (:func:`fabrika.inputs.iter_records`)."""
    hint = f"one object with a {text_field!r} string per record"
    for n, rec in iter_records(path, what=what, hint=hint):
        if not isinstance(rec.get(text_field), str) or not rec[text_field].strip():
            raise InputError(f"{where(path, n)}: missing or empty {text_field!r}")
        yield n, rec


@register_stage
class PromptsStage(Stage[PromptsConfig]):
    """Source stage: one ok row per prompt, id = hash of the text (or the file's id field)."""

    kind = "generic.prompts"
    reads = ()  # the prompts file
    writes = (Column("prompt", str, doc="the prompt text (text_field of the file)"),)
    input_files = (InputFile("path", "prompts file", field_keys=("text_field",)),)

    @classmethod
    def contract(cls, config: PromptsConfig) -> Contract:
        return Contract(cls.reads, cls.writes, open=True)  # the file's other fields travel as columns
    calls_llm: ClassVar[bool] = False

    @classmethod
    def check_config(cls, config: PromptsConfig, pipeline: Any) -> list[tuple[str, str]]:
        path = pipeline.resolve_path(config.path)
        if not path.is_file():
            return []  # reported by the generic path check
        try:
            for _ in iter_prompt_records(path, config.text_field):
                pass
        except InputError as exc:
            return [("path", str(exc))]
        return []

    def input_rows(self) -> Iterator[Row]:
        path = self.ctx.pipeline.resolve_path(self.config.path)
        for _, rec in iter_prompt_records(path, self.config.text_field):
            text = rec[self.config.text_field]
            rid = str(rec[self.config.id_field]) if self.config.id_field else stable_id(text, prefix="prompt-")
            extra = {k: v for k, v in rec.items() if k not in (self.config.text_field, self.config.id_field, "id")}
            yield {"id": rid, "prompt": text, **extra}

    async def process(self, row: Row) -> list[Row]:
        return [ok(self.item_id(row), **{k: v for k, v in row.items() if k != "id"})]


class CompleteConfig(StageConfig):
    """Config of ``generic.complete``."""

    prompt_field: str = Field(default="prompt", description="Input column with the user prompt.")
    system: str | None = Field(default=None, description="Optional system message.")
    model: str | None = Field(default=None, description="Model override; default the engine's model.")
    temperature: float | None = Field(default=0.7, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(default=512, ge=1, description="Answer length cap; a truncated answer is rejected.")
    tag: str = Field(default="generic.complete", description="Request tag (accounting; sim responder).")


@register_stage
class CompleteStage(LLMStage[CompleteConfig]):
    """One completion per input row; the answer is untrusted and checked before it is kept."""

    kind = "generic.complete"
    writes = (Column("prompt", str), Column("completion", str), Column("messages", list[dict[str, Any]]),
              Column("model", str))

    @classmethod
    def contract(cls, config: CompleteConfig) -> Contract:
        return Contract(reads=(Column(config.prompt_field, str, doc="the user prompt"),), writes=cls.writes)

    def output_id(self, row: Row) -> str:
        return stable_id(self.item_id(row), self.name, prefix="gen-")

    def requests(self, row: Row) -> list[ChatRequest]:
        messages: list[dict[str, Any]] = []
        if self.config.system:
            messages.append({"role": "system", "content": self.config.system})
        messages.append({"role": "user", "content": str(row[self.config.prompt_field])})
        return [ChatRequest(
            messages=tuple(messages),
            model=self.config.model,
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            seed=self.ctx.rng(self.item_id(row)).randrange(2**31),
            tag=self.config.tag,
        )]

    def parse(self, row: Row, responses: list[ChatResponse]) -> list[Row]:
        (response,) = responses
        text = (response.choices[0].content or "").strip()
        if not text:
            return [rejected(self.output_id(row), "empty_answer: no text")]
        prompt = str(row[self.config.prompt_field])
        messages = list(self.requests(row)[0].messages) + [{"role": "assistant", "content": text}]
        return [ok(self.output_id(row), prompt=prompt, completion=text, messages=messages, model=response.model)]
