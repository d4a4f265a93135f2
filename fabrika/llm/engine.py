"""The LLM engine: cache → backend (with retries) → accounting, for many requests at once.

:class:`LLMEngine` is the :class:`fabrika.llm.base.LLMClient` every stage uses
(``ctx.llm``). ``complete(requests)`` runs them concurrently and returns the
responses in request order; it never raises for a failed request — the
failure comes back as ``ChatResponse(error=LLMError(kind))`` in its slot.

Per request:

1. defaults from :class:`~fabrika.llm.config.LLMConfig` (model, temperature,
   top_p, max_tokens, seed, extra_body) fill unset fields *before* the cache key is taken,
   so changing a default re-asks exactly the requests it changes;
2. the cache answers if it can (one batched SQLite lookup per ``complete``);
   with ``cache_only`` a miss becomes a :class:`~fabrika.errors.CacheMissError`
   response and :attr:`LLMEngine.cache_misses` counts it (the runner must fail
   the run loudly when it is non-zero);
3. otherwise the backend is called under the retry policy
   (:mod:`fabrika.llm.retry`), at most ``max_in_flight`` requests engine-wide
   (whatever number of ``complete`` calls run at once), each within the
   optional ``deadline_s``; ``finish_reason == "length"`` answers are kept,
   counted as truncated and cached under their own ``max_tokens``; a finish
   reason outside :data:`~fabrika.llm.cache.CACHEABLE_FINISH` (``abort``,
   unknown) is a retryable ``server`` error, ``content_filter`` a terminal
   ``bad_request``;
4. the outcome is counted in :attr:`LLMEngine.accounting` and successes are cached.

The cache key includes the backend's scope (:func:`fabrika.llm.cache.request_key`):
``sim`` answers are never served to a real backend.

With the cache on, identical requests in flight at the same time share one
backend call (the followers count as cache hits).

Repeated samples (requests of one ``complete`` call that are equal but for
``sample_index``) go out as one request with ``n = K`` when the backend
supports it (``supports_n``, the openai-compatible backend) and
``llm.group_samples`` is on: the server prefills the prompt once. Samples are
grouped in runs of consecutive ``sample_index`` (the request carries the run's
first index, the server's seed is offset by it, choice ``j`` is sample
``first + j``), and each sample is split back into its own response and cache
entry — so a resume that finds some samples cached asks only for the rest, and
the rows are the same as with K requests.

The hot path avoids per-request validation and allocations beyond the
response itself; batches larger than ``max_in_flight`` run through a fixed pool
of workers instead of one task per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Sequence

import fabrika.llm.gctune as gctune
from fabrika.errors import CacheMissError, LLMError
from fabrika.llm.accounting import Accounting
from fabrika.llm.cache import CACHEABLE_FINISH, request_key
from fabrika.llm.retry import RetryPolicy, call_with_retries, map_exception
from fabrika.llm.types import ChatRequest, ChatResponse, Usage

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from fabrika.llm.base import Backend
    from fabrika.llm.cache import ResponseCache
    from fabrika.llm.config import LLMConfig


class LLMEngine:
    """Concurrent, cached, retried, accounted access to one backend.

    Build it with :func:`fabrika.llm.factory.build_engine`. Use one engine per
    event loop; close it with :meth:`aclose` (or ``async with``) so buffered
    cache writes are flushed.
    """

    def __init__(self, backend: "Backend", *, config: "LLMConfig | None" = None,
                 cache: "ResponseCache | None" = None) -> None:
        from fabrika.llm.config import LLMConfig

        self.config = config or LLMConfig()
        cfg = self.config
        self.backend = backend
        self.cache = cache
        self.cache_only = cfg.cache_only
        self.policy = RetryPolicy(cfg.max_retries, cfg.backoff_initial_s, cfg.backoff_max_s, cfg.backoff_jitter_s,
                                  cfg.retry_after_max_s)
        prices = {m: (p.prompt, p.completion) for m, p in (cfg.price_per_1m or {}).items()}
        self.accounting = Accounting(prices)
        self.max_in_flight = cfg.max_in_flight
        self.cache_misses = 0
        self.closed = False
        self._inflight: dict[str, asyncio.Future[ChatResponse | None]] = {}
        defaults = {"model": cfg.model, "temperature": cfg.temperature, "top_p": cfg.top_p,
                    "max_tokens": cfg.max_tokens, "seed": cfg.seed}
        self._defaults: dict[str, Any] = {k: v for k, v in defaults.items() if v is not None}
        self._extra_body = dict(cfg.extra_body) if cfg.extra_body else None
        #: requests currently at the backend (for progress displays)
        self.in_flight = 0
        self._slots = Slots(self.max_in_flight)
        self.deadline_s = getattr(cfg, "deadline_s", None)
        scope = getattr(backend, "cache_scope", None)
        self._scope_of = scope if callable(scope) else None
        self._scope = backend.name
        self._group = bool(getattr(cfg, "group_samples", True)) and bool(getattr(backend, "supports_n", False))
        gctune.hold()  # fewer, cheaper GC passes while the engine runs (fabrika.llm.gctune); released by aclose
        #: called with ``(request, error)`` for each failed attempt that is retried (the runner's request log);
        #: only failures reach it, so it costs nothing on the success path
        self.on_retry: Callable[[ChatRequest, LLMError], None] | None = None
        #: called once per :meth:`complete` with the requests as sent (defaults filled) and their cache keys
        #: (``""`` without a cache), so the request log needs no second hash: one check per call when unset
        self.on_prepared: Callable[[list[ChatRequest], list[str]], None] | None = None

    @property
    def backend_name(self) -> str:
        return self.backend.name

    # -- request preparation -----------------------------------------------
    def prepare(self, request: ChatRequest) -> ChatRequest:
        """``request`` with the configured defaults filled in where it sets none."""
        missing = self._missing(request)
        return replaced_request(request, missing) if missing else request

    def prepare_with(self, request: ChatRequest, changes: dict[str, Any]) -> ChatRequest:
        """``prepare(dataclasses.replace(request, **changes))`` in one copy (``StageLLM`` stamps its stage so:
        :meth:`complete` then finds nothing to fill and sends the request as it is)."""
        if self._extra_body is not None or any(name in self._defaults for name in changes):
            return self.prepare(replaced_request(request, changes))
        missing = self._missing(request)
        return replaced_request(request, {**missing, **changes} if missing else changes)

    def _missing(self, request: ChatRequest) -> dict[str, Any] | None:
        """The fields :meth:`prepare` fills in ``request`` (``None``: none)."""
        missing: dict[str, Any] | None = None
        for name, value in self._defaults.items():
            if getattr(request, name) is None:
                if missing is None:
                    missing = {}
                missing[name] = value
        if self._extra_body is not None:
            own = request.extra_body
            merged = self._extra_body if not own else {**self._extra_body, **own}
            if merged != own:
                missing = missing or {}
                missing["extra_body"] = merged
        return missing

    def key(self, request: ChatRequest) -> str:
        """The cache key of ``request`` after defaults (see :mod:`fabrika.llm.cache`)."""
        return self._key(self.prepare(request))

    def prepared_key(self, request: ChatRequest) -> str:
        """The cache key of a request :meth:`prepare` already returned (``key`` without preparing it again)."""
        return self._key(request)

    def _key(self, request: ChatRequest) -> str:
        scope = self._scope_of(request) if self._scope_of is not None else self._scope
        return request_key(request, scope=scope)

    # -- public API --------------------------------------------------------
    async def complete_one(self, request: ChatRequest) -> ChatResponse:
        return (await self.complete((request,)))[0]

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        """Answer ``requests`` concurrently; ``result[i]`` answers ``requests[i]``."""
        if self.closed:
            raise RuntimeError("LLMEngine.complete() after aclose(); build a new engine")
        prepared = [self.prepare(r) for r in requests]
        # The cache key hashes the whole prompt; without a cache nothing reads it (coalescing
        # is cache-only too), and on long dialogues hashing every request stalls the event loop.
        keys = [self._key(r) for r in prepared] if self.cache is not None else [""] * len(prepared)
        if self.on_prepared is not None:
            self.on_prepared(prepared, keys)
        out: list[ChatResponse | None] = [None] * len(prepared)
        acct = self.accounting
        todo: list[int]
        if self.cache is not None:
            hits = self.cache.get_many(keys) if len(keys) > 1 else {}
            if len(keys) == 1:
                one = self.cache.get(keys[0])
                if one is not None:
                    hits = {keys[0]: one}
            todo = []
            for i, k in enumerate(keys):
                hit = hits.get(k)
                if hit is not None:
                    out[i] = hit
                    acct.record(acct.key(prepared[i], prepared[i].model or ""), hit)
                else:
                    todo.append(i)
        else:
            todo = list(range(len(prepared)))

        if self.cache_only and todo:
            for i in todo:
                r = prepared[i]
                err = CacheMissError(f"no cached answer for tag={r.tag!r} key={keys[i][:16]}… and llm.cache_only "
                                     "is set; rerun without --cache-only to call the model")
                resp = ChatResponse(error=err, model=r.model or "", backend=self.backend.name, attempts=0)
                out[i] = resp
                self.cache_misses += 1
                acct.record(acct.key(r, r.model or ""), resp)
            todo = []

        # One task per request up to the backend's capacity; beyond it a fixed pool of
        # workers (no thousands of tasks parked on a semaphore).
        width = min(self.max_in_flight, getattr(self.backend, "capacity", None) or self.max_in_flight)
        units = self._sample_runs(prepared, todo) if self._group and len(todo) > 1 else None
        if units is not None:
            await self._run_units(units, prepared, keys, out, width)
        elif len(todo) == 1:
            i = todo[0]
            out[i] = await self._call(prepared[i], keys[i])
        elif todo and len(todo) <= width:
            results = await asyncio.gather(*[self._call(prepared[i], keys[i]) for i in todo])
            for i, resp in zip(todo, results):
                out[i] = resp
        elif todo:
            it = iter(todo)

            async def worker() -> None:
                for i in it:
                    out[i] = await self._call(prepared[i], keys[i])

            await asyncio.gather(*[worker() for _ in range(width)])
        answered = [r for r in out if r is not None]
        if len(answered) != len(out):  # an engine bug: never hand a stage fewer answers than requests
            raise RuntimeError(f"LLMEngine.complete: {len(out) - len(answered)} of {len(out)} requests got no response")
        return answered

    # -- repeated samples as one n=K request ---------------------------------
    def _sample_runs(self, prepared: list[ChatRequest], todo: list[int]) -> list[list[int]] | None:
        """``todo`` cut into units: runs of consecutive ``sample_index`` of one prompt, else singletons.
        ``None`` when nothing groups (the plain path is faster)."""
        groups: dict[str, list[int]] = {}
        order: list[str] = []
        for i in todo:
            r = prepared[i]
            if r.n != 1:
                base = f"single:{i}"
            else:
                base = self._key(dataclasses.replace(r, sample_index=0))
            if base not in groups:
                groups[base] = []
                order.append(base)
            groups[base].append(i)
        if len(order) == len(todo):
            return None
        units: list[list[int]] = []
        for base in order:
            members = sorted(groups[base], key=lambda i: prepared[i].sample_index)
            run = [members[0]]
            for i in members[1:]:
                if prepared[i].sample_index == prepared[run[-1]].sample_index + 1:
                    run.append(i)
                else:
                    units.append(run)
                    run = [i]
            units.append(run)
        return units

    async def _run_units(self, units: list[list[int]], prepared: list[ChatRequest], keys: list[str],
                         out: list[ChatResponse | None], width: int) -> None:
        async def one(u: list[int]) -> None:
            if len(u) == 1:
                out[u[0]] = await self._call(prepared[u[0]], keys[u[0]])
                return
            resps = await self._call_group([prepared[i] for i in u], [keys[i] for i in u])
            for i, resp in zip(u, resps):
                out[i] = resp

        if len(units) <= width:
            await asyncio.gather(*[one(u) for u in units])
            return
        it = iter(units)

        async def worker() -> None:
            for u in it:
                await one(u)

        await asyncio.gather(*[worker() for _ in range(width)])

    async def _call_group(self, requests: list[ChatRequest], keys: list[str]) -> list[ChatResponse]:
        """K samples (consecutive ``sample_index``) as one ``n=K`` request, split back per sample."""
        if self.cache is not None and any(k in self._inflight for k in keys):  # some sample is already asked
            return list(await asyncio.gather(*[self._call(r, k) for r, k in zip(requests, keys)]))
        futs: list[asyncio.Future[ChatResponse | None]] = []
        if self.cache is not None:
            loop = asyncio.get_running_loop()
            for k in keys:
                fut = loop.create_future()
                self._inflight[k] = fut
                futs.append(fut)
        try:
            resps = await self._call_backend_group(requests, keys)
        except BaseException:
            for fut in futs:
                fut.set_result(None)
            raise
        finally:
            for k, fut in zip(keys, futs):
                if self._inflight.get(k) is fut:
                    del self._inflight[k]
        for fut, resp in zip(futs, resps):
            fut.set_result(resp)
        return resps

    async def _call_backend_group(self, requests: list[ChatRequest], keys: list[str]) -> list[ChatResponse]:
        acct = self.accounting
        first = requests[0]
        n = len(requests)
        grouped = dataclasses.replace(first, n=n)
        akeys = [acct.key(r, r.model or "") for r in requests]
        slots = self._slots
        if not slots.take():
            await slots.wait()
        self.in_flight += 1
        try:
            resp, attempts = await self._retried(grouped, akeys[0])
            out = split_samples(resp, n, attempts)
        except LLMError as exc:
            err = ChatResponse(error=exc, model=first.model or "", backend=self.backend.name,
                               attempts=getattr(exc, "attempts", 1))
            out = [err] * n
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a backend bug: recorded, and logged loudly
            _log.exception("LLM backend %r raised %s for tag %r (n=%d); recorded as failed requests",
                           self.backend.name, type(exc).__name__, first.tag, n)
            e = map_exception(exc)
            e.__cause__ = exc
            out = [ChatResponse(error=e, model=first.model or "", backend=self.backend.name)] * n
        finally:
            self.in_flight -= 1
            slots.release()
        for akey, key, r in zip(akeys, keys, out):
            acct.record(akey, r)
            if r.error is None and self.cache is not None:
                self.cache.put(key, r)
        return out

    async def _call(self, request: ChatRequest, key: str) -> ChatResponse:
        """One request through the backend; identical requests in flight share one call.

        Coalescing follows the cache's rule (same key ⇒ same answer), so it is on
        only with the cache; a follower is counted as a cache hit.
        """
        if self.cache is None:
            return await self._call_backend(request, key)
        leader = self._inflight.get(key)
        if leader is not None:
            resp = await asyncio.shield(leader)
            if resp is not None:
                if resp.error is None:
                    resp = dataclasses.replace(resp, cached=True, attempts=0)
                self.accounting.record(self.accounting.key(request, request.model or ""), resp)
                return resp
            return await self._call(request, key)  # the leader was cancelled: ask ourselves
        fut: asyncio.Future[ChatResponse | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            resp = await self._call_backend(request, key)
        except BaseException:
            fut.set_result(None)
            raise
        finally:
            if self._inflight.get(key) is fut:
                del self._inflight[key]
        fut.set_result(resp)
        return resp

    async def _attempt(self, request: ChatRequest) -> ChatResponse:
        """One backend attempt; an unfinished answer (``abort``, unknown finish) raises so it is retried."""
        resp = await self.backend.send(request)
        if request.n > 1 and len(resp.choices) != request.n:
            raise LLMError("server", f"asked for n={request.n} samples, the server answered "
                           f"{len(resp.choices)} choices")
        for c in resp.choices:
            if c.finish_reason not in CACHEABLE_FINISH:
                if c.finish_reason == "content_filter":
                    raise LLMError("bad_request", "the provider's content filter stopped the answer "
                                   "(finish_reason content_filter)")
                raise LLMError("server", f"unfinished answer (finish_reason {c.finish_reason!r}); retried, "
                               "never cached")
        return resp

    async def _retried(self, request: ChatRequest, akey: Any) -> tuple[ChatResponse, int]:
        acct = self.accounting
        def retried(error: LLMError) -> None:
            acct.record_retry(akey)
            if self.on_retry is not None:
                self.on_retry(request, error)

        work = call_with_retries(lambda: self._attempt(request), self.policy, retried)
        if self.deadline_s is None:
            return await work
        try:
            async with asyncio.timeout(self.deadline_s):
                return await work
        except TimeoutError as exc:
            raise LLMError("timeout", f"request deadline of {self.deadline_s:g} s (llm.deadline_s) passed "
                           "across its retries") from exc

    async def _call_backend(self, request: ChatRequest, key: str) -> ChatResponse:
        acct = self.accounting
        akey = acct.key(request, request.model or "")
        slots = self._slots  # engine-wide max_in_flight, across concurrent complete() calls
        if not slots.take():
            await slots.wait()
        self.in_flight += 1
        try:
            resp, attempts = await self._retried(request, akey)
            if attempts != resp.attempts:
                resp = dataclasses.replace(resp, attempts=attempts)
        except LLMError as exc:
            resp = ChatResponse(error=exc, model=request.model or "", backend=self.backend.name,
                                attempts=getattr(exc, "attempts", 1))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a backend or sim-responder bug: recorded, and logged loudly
            _log.exception("LLM backend %r raised %s for tag %r; recorded as a failed request",
                           self.backend.name, type(exc).__name__, request.tag)
            err = map_exception(exc)
            err.__cause__ = exc
            resp = ChatResponse(error=err, model=request.model or "", backend=self.backend.name)
        finally:
            self.in_flight -= 1
            slots.release()
        acct.record(akey, resp)
        if resp.error is None and self.cache is not None:
            self.cache.put(key, resp)
        return resp

    # -- lifecycle -----------------------------------------------------------
    def flush(self) -> None:
        """Write buffered cache entries now (the runner calls it after each shard)."""
        if self.cache is not None:
            self.cache.flush()

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        gctune.release()
        try:
            await self.backend.aclose()
        finally:
            if self.cache is not None:
                self.cache.close()

    async def __aenter__(self) -> "LLMEngine":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def fleet_down(self) -> bool:
        """True while the backend has nothing healthy to send to (every endpoint's circuit open);
        backends without endpoints (``sim``, in-process vLLM) are never down."""
        down = getattr(self.backend, "fleet_down", None)
        return bool(down()) if callable(down) else False

    def stats(self) -> dict[str, Any]:
        """The accounting snapshot plus engine-level counters (for the run manifest)."""
        snap = self.accounting.snapshot()
        snap["backend"] = self.backend.name
        snap["cache_misses"] = self.cache_misses
        health = getattr(self.backend, "health", None)
        if callable(health):
            snap["endpoints"] = health()
        return snap


_set = object.__setattr__


_new = object.__new__


def replaced_request(request: ChatRequest, changes: dict[str, Any]) -> ChatRequest:
    """``dataclasses.replace(request, **changes)`` for the hot path (~3x faster: no ``__init__``
    keyword binding and no loop over the field names; ``ChatRequest`` has no ``__post_init__`` and every
    field is an init field). One line per field of :class:`ChatRequest`, in its order
    (``tests/llm/test_canonical.py`` checks every field against ``dataclasses.replace``)."""
    get = changes.get
    new = _new(ChatRequest)
    _set(new, "messages", get("messages", request.messages))
    _set(new, "model", get("model", request.model))
    _set(new, "tools", get("tools", request.tools))
    _set(new, "tool_choice", get("tool_choice", request.tool_choice))
    _set(new, "temperature", get("temperature", request.temperature))
    _set(new, "top_p", get("top_p", request.top_p))
    _set(new, "max_tokens", get("max_tokens", request.max_tokens))
    _set(new, "n", get("n", request.n))
    _set(new, "seed", get("seed", request.seed))
    _set(new, "sample_index", get("sample_index", request.sample_index))
    _set(new, "response_format", get("response_format", request.response_format))
    _set(new, "stop", get("stop", request.stop))
    _set(new, "extra_body", get("extra_body", request.extra_body))
    _set(new, "tag", get("tag", request.tag))
    _set(new, "routing_key", get("routing_key", request.routing_key))
    _set(new, "meta", get("meta", request.meta))
    return new


_replaced = replaced_request


class Slots:
    """The engine's ``max_in_flight``: ``asyncio.Semaphore`` without a coroutine per acquire while a slot is free.

    ``if not slots.take(): await slots.wait()`` takes a slot (a free one at once, else the next released one,
    first come first served; no barging past a waiter), :meth:`release` gives it back or hands it to the
    first waiter. A waiter cancelled after it was handed a slot passes the slot on."""

    __slots__ = ("free", "_waiters")

    def __init__(self, n: int) -> None:
        self.free = n
        self._waiters: deque[asyncio.Future[None]] = deque()

    def take(self) -> bool:
        """Take a free slot now (``False``: none free, or others wait for one: :meth:`wait`)."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Wait for a slot (after :meth:`take` said no)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a slot, then cancelled before it ran: pass it on
                self.release()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.free += 1

    def locked(self) -> bool:
        """No slot is free now (as ``asyncio.Semaphore.locked``)."""
        return self.free == 0 or bool(self._waiters)


def split_samples(resp: ChatResponse, n: int, attempts: int) -> list[ChatResponse]:
    """One response per choice of an ``n``-sample answer. The prompt's tokens are counted once (on the
    first sample: it was prefilled once); completion tokens are shared out evenly."""
    comp = resp.usage.completion_tokens
    share, rest = divmod(comp, n)
    return [dataclasses.replace(resp, choices=(c,), attempts=attempts,
                                usage=Usage(resp.usage.prompt_tokens if j == 0 else 0, share + (rest if j == 0 else 0)))
            for j, c in enumerate(resp.choices)]
