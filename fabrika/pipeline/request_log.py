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

A *global* stage (``run_all``) has no items: the runner gives it a :class:`GlobalRequestLog`, and every
request it sends is logged there. Stage code says which rows a request made with :func:`request_scope`::

    with request_scope() as scope:
        responses = await self.ctx.llm.complete(requests)
    for k, rows in enumerate(rows_per_request):
        scope.made(rows, request=k)      # the k-th request of the scope made these rows

Each such row carries those entries into the sidecar (under its id, as an item would); what no row
claims — requests sent outside a scope, or whose rows were never written — is the stage's *shared*
record, written under the reserved sidecar item ``""`` (:data:`~fabrika.store.shards.SHARED_ITEM`)
and shown on every row's card of the stage. Every request the stage sent ends up in one or the other.
Outside a global stage (a per-item stage, a test) :func:`request_scope` does nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from fabrika.llm.cache import request_key
from fabrika.store.shards import REQUESTS_KEY, SHARED_REQUESTS_KEY

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
    real = real_engine(engine)
    keep_answer = getattr(real, "cache", None) is None
    # the engine's prepared requests (the same messages object as the request's: defaults only fill fields)
    # and, with a cache, their keys; without one each key is taken here, from the prepared request
    as_sent = sent[0] if sent is not None and len(sent[0]) == len(requests) else None
    keys = sent[1] if as_sent is not None and sent is not None and all(sent[1]) else None
    key_of = getattr(real, "prepared_key", None) if real is not None else None
    for i, (request, response) in enumerate(zip(requests, responses)):
        if keys is not None and as_sent is not None:
            prepared, key = as_sent[i], keys[i]
        elif as_sent is not None and key_of is not None and as_sent[i].messages is request.messages:
            prepared = as_sent[i]
            key = key_of(prepared)
        else:
            prepared, key = _key(engine, request)
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


def _by_key(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entries, key=lambda e: (e["key"], e["call"], e["i"]))


def attach(rows: list["Row"], item: Any) -> None:
    """The item's entries, sorted by key (then call order), onto its first row for the shard writer."""
    if rows and item.requests:
        rows[0][REQUESTS_KEY] = _by_key(item.requests)


class RequestScope:
    """Where a global stage's requests are logged while it runs (the fields :func:`log_requests` fills, like an
    item's); :meth:`made` says which rows they made. ``log is None``: a scope outside any global stage."""

    __slots__ = ("requests", "bodies", "attempt_errors", "attempt_endpoints", "calls", "log", "closed")

    def __init__(self, log: "GlobalRequestLog | None", bodies: Any = None) -> None:
        self.requests: list[dict[str, Any]] | None = [] if log is not None else None
        self.bodies = bodies
        self.attempt_errors: dict[str, list[str]] | None = None
        self.attempt_endpoints: dict[str, list[str | None]] | None = None
        self.calls = 0
        self.log = log
        self.closed = False

    def next_call(self) -> int:
        """The start number of a ``complete`` call within the scope."""
        self.calls += 1
        return self.calls

    def made(self, rows: Iterable["Row | str"], request: int | None = None) -> None:
        """``rows`` (row dicts or ids) were made from this scope's requests: all of them, or only the
        ``request``-th (0-based, in the order the scope's calls started, then their position in the call)."""
        if self.log is None or not self.requests:
            return
        entries = sorted(self.requests, key=lambda e: (e["call"], e["i"]))
        if request is not None:
            entries = entries[request:request + 1]
        self.log.claim([r if isinstance(r, str) else str(r["id"]) for r in rows], entries)


#: The scope a global stage's requests are logged in (set by the runner, then by :func:`request_scope`).
REQUEST_SCOPE: contextvars.ContextVar[RequestScope | None] = contextvars.ContextVar("fabrika_request_scope",
                                                                                    default=None)


@contextlib.contextmanager
def request_scope() -> Iterator[RequestScope]:
    """The requests sent inside the block, for :meth:`RequestScope.made` (see module docs)."""
    parent = REQUEST_SCOPE.get()
    if parent is None or parent.log is None:
        yield RequestScope(None)
        return
    scope = parent.log.open()
    token = REQUEST_SCOPE.set(scope)
    try:
        yield scope
    finally:
        REQUEST_SCOPE.reset(token)
        scope.closed = True


class GlobalRequestLog:
    """A global stage's request log: the shared pool, the scopes opened in it and which rows claimed what.
    Every scope is kept to the end of the stage (its entries too: the ids below stay theirs)."""

    def __init__(self, bodies: Any) -> None:
        self.bodies = bodies
        self.shared = RequestScope(self, bodies)
        self._scopes: list[RequestScope] = [self.shared]
        #: row id -> {id(entry): entry} it claimed
        self._by_row: dict[str, dict[int, dict[str, Any]]] = {}
        self._claimed: set[int] = set()
        self._written: set[int] = set()

    def open(self) -> RequestScope:
        scope = RequestScope(self, self.bodies)
        self._scopes.append(scope)
        return scope

    def claim(self, row_ids: list[str], entries: list[dict[str, Any]]) -> None:
        for rid in row_ids:
            self._by_row.setdefault(rid, {}).update((id(e), e) for e in entries)
        if row_ids:
            self._claimed.update(id(e) for e in entries)

    def sent(self) -> int:
        """How many requests were logged."""
        return sum(len(s.requests or ()) for s in self._scopes)

    def take(self, rows: list["Row"], final: bool) -> None:
        """Put the entries of ``rows`` on them for the shard writer (grouped by the sidecar item, ``input_id``
        or ``id``), and on the first row the shared ones not written yet: requests no row claimed, from the
        pool and from closed scopes; ``final`` (the stage's last shard): every entry not written yet."""
        if not rows:
            return
        firsts: dict[str, tuple["Row", dict[int, dict[str, Any]]]] = {}
        for row in rows:
            entries = self._by_row.pop(str(row["id"]), None)
            if entries:
                firsts.setdefault(str(row.get("input_id") or row["id"]), (row, {}))[1].update(entries)
        for row, entries in firsts.values():
            row[REQUESTS_KEY] = _by_key(entries.values())
            self._written.update(entries)
        shared = []
        for scope in self._scopes:
            done = final or scope.closed or scope is self.shared
            for e in scope.requests or ():
                if id(e) not in self._written and (final or (done and id(e) not in self._claimed)):
                    shared.append(e)
                    self._written.add(id(e))
        if shared:
            rows[0][SHARED_REQUESTS_KEY] = _by_key(shared)


__all__ = ["REQUEST_SCOPE", "GlobalRequestLog", "RequestScope", "attach", "log_requests", "note_attempt_error",
           "real_engine", "request_scope"]
