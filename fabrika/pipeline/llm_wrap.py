"""The engine as one stage sees it: requests stamped with the stage, answers counted.

Stages call ``ctx.llm.complete(...)`` as usual; this wrapper sets
``request.meta["stage"]`` (accounting groups by it), keeps per-stage counters
for the progress line and the manifest, and notes in the current item's
:class:`ItemState` what its answers mean for it:

* an answer whose error leaves the item pending
  (:func:`fabrika.llm.failures.leaves_item_pending`: outage, rate limit, open
  breaker, wrong key or model, ``--cache-only`` miss) marks the item so the
  runner writes nothing for it — the next run asks again, instead of a
  rejection that would hide it forever;
* a terminal error (``bad_request``, ``context_length``) is remembered, so an
  item that produced nothing but rejections counts toward the stage's
  failure rate;
* the backends that actually produced its answers label its rows (``llm_backend``).

The latest answer of each item is kept (cut to ``RAW_EXCERPT_CHARS``) so that the
runner can store it on the item's rejection rows: the reason next to the raw text
that caused it.
"""

from __future__ import annotations

import contextvars
import functools
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from fabrika.errors import LLMError
from fabrika.llm.engine import replaced_request
from fabrika.llm.failures import FailureTally, leaves_item_pending
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.request_log import REQUEST_SCOPE, RequestScope, log_requests, note_attempt_error, real_engine
from fabrika.pipeline.stage import RAW_EXCERPT_CHARS


@dataclass(slots=True)
class ItemState:
    """What the LLM answers of one item said (set by the runner per item task).

    ``requests`` (``None``: not recorded) collects the item's request log
    (:mod:`fabrika.pipeline.request_log`), ``bodies`` is where their bodies go."""

    pending: LLMError | None = None
    terminal: LLMError | None = None
    backends: set[str] = field(default_factory=set)
    requests: list[dict[str, Any]] | None = None
    bodies: Any = None
    #: request key -> errors of its failed attempts, noted by the engine's retry hook
    attempt_errors: dict[str, list[str]] | None = None
    #: request key -> the endpoint of each of those failed attempts (``None`` where no server answered)
    attempt_endpoints: dict[str, list[str | None]] | None = None


#: The current item's state; ``None`` outside an item (setup, global stages).
ITEM_STATE: contextvars.ContextVar[ItemState | None] = contextvars.ContextVar("fabrika_item_state", default=None)
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
    #: requests whose failure left an item (or, outside items, the stage) pending
    pending: int = 0
    failures: FailureTally = field(default_factory=FailureTally)

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "cached": self.cached, "errors": self.errors,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "errors_by_kind": dict(self.errors_by_kind), "pending": self.pending,
                "failures": self.failures.as_dict()}


def _log_target() -> Any:
    """Where the current request is logged: the item's state when it records one, else the global stage's
    :class:`~fabrika.pipeline.request_log.RequestScope`; ``None``: not recorded."""
    item = ITEM_STATE.get()
    if item is not None:
        return item if item.requests is not None else None
    scope = REQUEST_SCOPE.get()
    return scope if scope is not None and scope.requests is not None else None


def _note_retry(engine: Any, request: ChatRequest, error: LLMError) -> None:
    """The engine's retry hook: a failed attempt of the current item's request (before it is retried)."""
    target = _log_target()
    if target is not None:
        note_attempt_error(engine, target, request, error)


#: The current ``complete`` call's cell for what the engine prepared: ``[(requests as sent, cache keys)]``.
CALL_PREPARED: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("fabrika_call_prepared",
                                                                                  default=None)


def _note_prepared(prepared: list[ChatRequest], keys: list[str]) -> None:
    """The engine's ``on_prepared`` hook: the requests of the current call as sent, and their cache keys."""
    cell = CALL_PREPARED.get()
    if cell is not None and not cell:
        cell.append((prepared, keys))


def watch_retries(engine: Any) -> None:
    """Install :func:`_note_retry` and :func:`_note_prepared` as the engine's hooks (an engine without them
    is left alone)."""
    real = real_engine(engine)
    if real is not None and getattr(real, "on_retry", False) is None:
        real.on_retry = functools.partial(_note_retry, real)
    if real is not None and getattr(real, "on_prepared", False) is None:
        real.on_prepared = _note_prepared


class StageLLM:
    """Delegates to the engine; anything not overridden (``accounting``…) passes through."""

    def __init__(self, engine: Any, stage: str, counters: LLMCounters) -> None:
        self._engine = engine
        self._stage = stage
        self.counters = counters
        # wrapping the engine itself: stamp and fill its defaults in one copy (the engine then sends it as is)
        self._prepare_with = getattr(engine, "prepare_with", None) if real_engine(engine) is engine else None

    def _stamp(self, request: ChatRequest) -> ChatRequest:
        if request.meta.get("stage") == self._stage:
            return request
        changes = {"meta": {**request.meta, "stage": self._stage}}
        if self._prepare_with is not None:
            return self._prepare_with(request, changes)
        return replaced_request(request, changes)

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
        item = ITEM_STATE.get()
        for r in responses:
            c.requests += 1
            c.cached += bool(r.cached)
            c.prompt_tokens += r.usage.prompt_tokens
            c.completion_tokens += r.usage.completion_tokens
            err = r.error
            if err is None:
                if item is not None and r.backend:
                    item.backends.add(r.backend)
                continue
            c.errors += 1
            c.errors_by_kind[err.kind] = c.errors_by_kind.get(err.kind, 0) + 1
            c.failures.add(err)
            if leaves_item_pending(err):
                c.pending += 1
                if item is not None and item.pending is None:
                    item.pending = err
            elif item is not None and item.terminal is None:
                item.terminal = err

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        started = self._start()
        stamped = [self._stamp(r) for r in requests]
        target = _log_target()
        if target is None:
            responses = await self._engine.complete(stamped)
            self._observe(responses)
            self._keep_answer(started, responses)
            return responses
        call = target.next_call() if started < 0 and isinstance(target, RequestScope) else started  # a scope numbers its own
        watch_retries(self._engine)
        cell: list[Any] = []
        token = CALL_PREPARED.set(cell)
        try:
            responses = await self._engine.complete(stamped)
        finally:
            CALL_PREPARED.reset(token)
        self._observe(responses)
        self._keep_answer(started, responses)
        log_requests(self._engine, target, call, stamped, responses, cell[0] if cell else None)
        return responses

    async def complete_one(self, request: ChatRequest) -> ChatResponse:
        started = self._start()
        stamped = self._stamp(request)
        target = _log_target()
        if target is None:
            response = await self._engine.complete_one(stamped)
            self._observe([response])
            self._keep_answer(started, [response])
            return response
        call = target.next_call() if started < 0 and isinstance(target, RequestScope) else started  # a scope numbers its own
        watch_retries(self._engine)
        cell: list[Any] = []
        token = CALL_PREPARED.set(cell)
        try:
            response = await self._engine.complete_one(stamped)
        finally:
            CALL_PREPARED.reset(token)
        self._observe([response])
        self._keep_answer(started, [response])
        log_requests(self._engine, target, call, [stamped], [response], cell[0] if cell else None)
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)
