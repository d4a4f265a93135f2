"""The engine as one stage sees it: requests stamped with the stage, answers counted.

Stages call ``ctx.llm.complete(...)`` as usual; this wrapper sets
``request.meta["stage"]`` (accounting groups by it) and keeps per-stage
counters for the progress line. A ``cache_miss`` answer under ``--cache-only``
marks the current item so the runner leaves it unwritten for a later run
instead of storing a rejection that would hide it forever. The latest answer of
each item is kept (cut to ``RAW_EXCERPT_CHARS``) so that the runner can store it
on the item's rejection rows: the reason next to the raw text that caused it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.stage import RAW_EXCERPT_CHARS

#: Per-item flag cell set by the runner inside each item's task.
ITEM_CACHE_MISS: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("fabrika_item_miss", default=None)
#: Per-item cell ``[excerpt, calls started, start number of the excerpt's call]`` (set by the runner,
#: filled here). The excerpt is the answer to the call that *started* last, so concurrent calls inside
#: one item give the same excerpt however they finish (DESIGN contract 7).
ITEM_LAST_ANSWER: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "fabrika_item_answer", default=None)


def answer_excerpt(response: ChatResponse, limit: int = RAW_EXCERPT_CHARS) -> str:
    """The raw answer as a person debugging a rejection wants it: text, tool calls, truncation, or the error."""
    if response.error is not None:
        text = f"[{response.error.kind}] {response.error.message}"
    elif not response.choices:
        text = "[no choices]"
    else:
        choice = response.choices[0]
        text = choice.content or ""
        if choice.tool_calls:
            text += ("\n" if text else "") + "tool_calls: " + json.dumps(list(choice.tool_calls), ensure_ascii=False,
                                                                        default=str)
        if choice.truncated:
            text += " [truncated: finish_reason=length]"
    return text if len(text) <= limit else text[:limit] + f"… [{len(text)} chars]"


@dataclass
class LLMCounters:
    requests: int = 0
    cached: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class StageLLM:
    """Delegates to the engine; anything not overridden (``accounting``…) passes through."""

    def __init__(self, engine: Any, stage: str, counters: LLMCounters) -> None:
        self._engine = engine
        self._stage = stage
        self.counters = counters

    def _stamp(self, request: ChatRequest) -> ChatRequest:
        if request.meta.get("stage") == self._stage:
            return request
        return dataclasses.replace(request, meta={**request.meta, "stage": self._stage})

    @staticmethod
    def _start() -> int:
        cell = ITEM_LAST_ANSWER.get()
        if cell is None:
            return -1
        cell[1] += 1
        return cell[1]

    @staticmethod
    def _keep_answer(started: int, responses: Sequence[ChatResponse]) -> None:
        cell = ITEM_LAST_ANSWER.get()
        if cell is not None and responses and started >= cell[2]:
            cell[0], cell[2] = answer_excerpt(responses[-1]), started

    def _observe(self, responses: Sequence[ChatResponse]) -> None:
        c = self.counters
        for r in responses:
            c.requests += 1
            c.cached += bool(r.cached)
            c.prompt_tokens += r.usage.prompt_tokens
            c.completion_tokens += r.usage.completion_tokens
            if r.error is not None:
                c.errors += 1
                c.errors_by_kind[r.error.kind] = c.errors_by_kind.get(r.error.kind, 0) + 1
                if r.error.kind == "cache_miss":
                    cell = ITEM_CACHE_MISS.get()
                    if cell is not None:
                        cell[0] = True

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        started = self._start()
        responses = await self._engine.complete([self._stamp(r) for r in requests])
        self._observe(responses)
        self._keep_answer(started, responses)
        return responses

    async def complete_one(self, request: ChatRequest) -> ChatResponse:
        started = self._start()
        response = await self._engine.complete_one(self._stamp(request))
        self._observe([response])
        self._keep_answer(started, [response])
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)
