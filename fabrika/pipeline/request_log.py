"""Per item, the LLM requests that produced it: the runner's request log.

While an item runs, :class:`~fabrika.pipeline.llm_wrap.StageLLM` hands every finished request to
:func:`log_requests`: an entry (request key — the LLM cache key —, role tag, model, backend, cached or
fresh, attempts, the errors of its failed attempts, the endpoint that answered and that of each attempt,
tokens, finish reasons) goes into the item's
:class:`~fabrika.pipeline.llm_wrap.ItemState`, and the request's body into the run's
:class:`~fabrika.store.requests.RequestBodies` (answers stay in the LLM cache under the same key; a
run without a cache keeps them there too). Errors of attempts the engine retried come from its
``on_retry`` hook (:func:`note_attempt_error`).

``endpoint`` is the server of the request's last attempt — the one that answered, or whose error ended it —
as :func:`fabrika.llm.redact.public_url` writes it (no credentials, no query string); ``endpoints`` lists
every attempt's, the failed ones first, when there was more than one. A cached answer and the ``sim``
backend have none.

When the item is done, :func:`attach` puts the entries, sorted by key, on the item's first row under
:data:`~fabrika.store.shards.REQUESTS_KEY`; the journal and the shard writer take them from there into
the stage's sidecar (:mod:`fabrika.store.requests`), never into a column. The entries hold no times
and are not part of any dataset, hash or fingerprint.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

from fabrika.llm.cache import request_key
from fabrika.store.shards import REQUESTS_KEY

if TYPE_CHECKING:  # ``item`` arguments are fabrika.pipeline.llm_wrap.ItemState (it imports this module)
    from fabrika.errors import LLMError
    from fabrika.llm.types import ChatRequest, ChatResponse
    from fabrika.pipeline.stage import Row


def real_engine(client: Any) -> Any:
    """The :class:`~fabrika.llm.engine.LLMEngine` behind a stage's client (itself, or the engine a test
    client such as :class:`~fabrika.testing.ScriptedLLM` runs on); ``None`` when there is none."""
    for candidate in (client, getattr(client, "engine", None), getattr(client, "_engine", None)):
        if candidate is not None and callable(getattr(candidate, "prepare", None)) and \
                callable(getattr(candidate, "key", None)):
            return candidate
    return None


def _key(engine: Any, request: "ChatRequest") -> tuple["ChatRequest", str]:
    """``request`` as the engine sends it (defaults filled) and its cache key."""
    real = real_engine(engine)
    if real is None:
        return request, request_key(request)
    prepared = real.prepare(request)
    return prepared, real.key(prepared)


def _error_text(error: "LLMError") -> str:
    return f"{error.kind}: {error.message}"


def note_attempt_error(engine: Any, item: Any, request: "ChatRequest", error: "LLMError") -> None:
    """A failed attempt the engine is about to retry; an ``n``-sample request counts for each of its samples."""
    errors = item.attempt_errors
    if errors is None:
        errors = item.attempt_errors = {}
    samples = [request] if request.n <= 1 else [
        dataclasses.replace(request, n=1, sample_index=request.sample_index + j) for j in range(request.n)]
    where = item.attempt_endpoints
    if where is None:
        where = item.attempt_endpoints = {}
    for sample in samples:
        key = _key(engine, sample)[1]
        errors.setdefault(key, []).append(_error_text(error))
        where.setdefault(key, []).append(error.endpoint)


def log_requests(engine: Any, item: Any, call: int, requests: Sequence["ChatRequest"],
                 responses: Sequence["ChatResponse"],
                 sent: "tuple[list[ChatRequest], list[str]] | None" = None) -> None:
    """Entries for one ``complete`` call of the item (``call``: its start number within the item). ``sent``: the
    requests as the engine sent them and their cache keys (its ``on_prepared`` hook), else they are recomputed."""
    assert item.requests is not None
    bodies = item.bodies
    keep_answer = getattr(real_engine(engine), "cache", None) is None
    usable = sent is not None and len(sent[0]) == len(requests) and all(sent[1])
    for i, (request, response) in enumerate(zip(requests, responses)):
        prepared, key = (sent[0][i], sent[1][i]) if usable and sent is not None else _key(engine, request)
        failed = list((item.attempt_errors or {}).pop(key, ()))
        places = list((item.attempt_endpoints or {}).pop(key, ()))
        endpoint = response.endpoint
        if response.error is not None:
            failed.append(_error_text(response.error))
            endpoint = response.error.endpoint
        entry: dict[str, Any] = {
            "key": key, "call": call, "i": i, "tag": request.tag, "model": response.model or prepared.model or "",
            "backend": response.backend, "cached": bool(response.cached), "attempts": int(response.attempts),
            "prompt_tokens": response.usage.prompt_tokens, "completion_tokens": response.usage.completion_tokens,
            "messages": len(prepared.messages),
        }
        if response.choices:
            entry["finish"] = [c.finish_reason for c in response.choices]
        if response.error is not None:
            entry["error"] = _error_text(response.error)
        if failed:
            entry["errors"] = failed
        if endpoint is not None and not response.cached:
            entry["endpoint"] = endpoint
        if places and any(places) and not response.cached:
            entry["endpoints"] = [*places, endpoint]
        item.requests.append(entry)
        if bodies is not None:
            bodies.put(key, prepared, response if keep_answer else None)


def attach(rows: list["Row"], item: Any) -> None:
    """The item's entries, sorted by key (then call order), onto its first row for the shard writer."""
    if rows and item.requests:
        rows[0][REQUESTS_KEY] = sorted(item.requests, key=lambda e: (e["key"], e["call"], e["i"]))


__all__ = ["attach", "log_requests", "note_attempt_error", "real_engine"]
