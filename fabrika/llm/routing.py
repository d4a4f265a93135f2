"""Endpoint health and choice for the OpenAI-compatible backend.

* :class:`CircuitBreaker` — per endpoint: ``failure_threshold`` consecutive
  failures (connection errors, timeouts, 5xx) open it; while open, no request is
  sent there; after ``cooldown_s`` one probe request is let through (half-open);
  its success closes the breaker, its failure reopens it with a doubled
  cool-down (up to ``max_cooldown_s``). A dead server is then asked once per
  cool-down instead of by every request in flight. A *hung* server (it accepts
  connections and never answers) is recognised at its first timeout: a request
  that timed out while the endpoint completed nothing since it was sent opens the
  breaker at once, for ``max_cooldown_s``, and while every endpoint is hung a
  request fails at once (``unavailable``: its item stays pending) instead of
  waiting ``timeout_s`` behind a probe — so a hung fleet ends a run after about
  one ``timeout_s``, not after ``max_retries`` × ``timeout_s``.
* :class:`EndpointPool` — slots: an endpoint takes at most ``max_concurrency``
  sequences (a request counts its ``n`` samples, as a vLLM server gives each a
  sequence slot; an ``n``-sample request enters once one slot is free, so it may
  overshoot by ``n - 1``); a request waits for a free slot on *any* endpoint (not on
  the one it happened to pick), so mixed GPU nodes are each filled to their limit.
* :class:`RoutingPolicy` — which endpoint with a free slot gets the request.
  The default, :class:`CapacityPolicy`, picks the lowest in-flight ÷
  ``max_concurrency``. A policy sees the request, so a later one can route by
  prompt prefix (KV-cache affinity) without touching the pool.
* :class:`AffinityPolicy` — prefix affinity: consistent hashing of the
  request's ``routing_key`` (the episode id of agent turns; by default a hash of
  the prompt, so K samples of one prompt meet) onto a ring of virtual nodes,
  with bounded load (an endpoint takes a request only while its in-flight stays
  within ``(1 + epsilon)`` × its capacity share of the mean); past the bound the
  walk goes on clockwise, and the least-loaded endpoint is the last resort. A
  server that is down (breaker open) or full is skipped, so its keys move to the
  next endpoint on the ring and come back when it recovers. With ``home_wait_s``
  a request whose healthy home is past the bound waits up to that long for the
  home to finish a request (woken by its releases, not by other servers') before
  it spills — only while the fleet is saturated (its in-flight ÷ capacity is at
  least ``saturation``: a spill would only move the request from one queue to
  another and lose its prefix cache); it never waits for a home that is down, and
  placement after the wait obeys the same bound; a key seen for the first time
  never waits (no server holds its prefix yet). A spill moves the whole
  episode: the policy remembers where each key's last request went (the last
  ``sticky_keys`` keys) and that server is its home from then on, so the next
  turns meet the prefix the spilled turn left there instead of going back to a
  server whose copy is one turn stale.
  The sticky table is per process; since the items of one episode are handled
  by one worker, an episode still sees one home.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import json
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence

from fabrika.errors import LLMError
from fabrika.llm.redact import redact
from fabrika.llm.types import ChatRequest

#: HTTP statuses that say "this server is unwell" (they count toward its breaker).
UNHEALTHY_STATUSES = frozenset({500, 502, 503, 504})


@dataclass(slots=True)
class CircuitBreaker:
    """Closed → open after ``failure_threshold`` consecutive failures → half-open after the cool-down."""

    failure_threshold: int = 5
    cooldown_s: float = 2.0
    max_cooldown_s: float = 60.0
    failures: int = 0
    state: str = "closed"  # closed | open | half_open
    open_until: float = 0.0
    current_cooldown: float = 0.0
    probing: bool = False
    last_error: str = ""
    opened: int = 0
    #: opened by a timeout while the endpoint answered nothing at all (see module docs)
    hung: bool = False

    def available(self, now: float) -> bool:
        """Whether a request may be sent now (does not change state)."""
        if self.state == "closed":
            return True
        return now >= self.open_until and not self.probing

    def wait_s(self, now: float) -> float:
        """Seconds until :meth:`available` may turn true (0 when it is)."""
        if self.state == "closed":
            return 0.0
        return max(0.0, self.open_until - now) if not self.probing else min(1.0, self.cooldown_s)

    def on_dispatch(self, now: float) -> bool:
        """Called when a request is sent; returns True when it is the half-open probe."""
        if self.state != "closed" and now >= self.open_until and not self.probing:
            self.state = "half_open"
            self.probing = True
            return True
        return False

    def record(self, error: LLMError | None, probe: bool = False, stalled: bool = False) -> None:
        """Count one outcome; only health failures (see :func:`counts_against_health`) open the breaker.

        ``stalled``: the endpoint completed no request since this one was sent. A timeout then
        means the server is hung, not slow: the breaker opens at once, for ``max_cooldown_s``.
        """
        if probe:
            self.probing = False
        if error is None or not counts_against_health(error):  # an answer (even a 4xx): the server is alive
            self.failures = 0
            self.hung = False
            if self.state != "closed":
                self.state = "closed"
                self.current_cooldown = 0.0
            return
        self.failures += 1
        self.last_error = error.message[:200]
        if error.kind == "timeout" and stalled:
            self.hung = True
            if self.state == "closed" or probe:
                self.current_cooldown = self.max_cooldown_s
                self.state = "open"
                self.open_until = time.monotonic() + self.current_cooldown
                self.opened += 1
            return
        if probe or (self.state == "closed" and self.failures >= self.failure_threshold):
            self.current_cooldown = min(self.max_cooldown_s, (self.current_cooldown * 2) or self.cooldown_s)
            self.state = "open"
            self.open_until = time.monotonic() + self.current_cooldown
            self.opened += 1


def counts_against_health(error: LLMError) -> bool:
    """Connection errors, timeouts and 5xx answers say the server is unwell; 4xx and 429 do not."""
    if error.kind in ("connection", "timeout"):
        return True
    return error.kind == "server" and (error.status_code is None or error.status_code in UNHEALTHY_STATUSES)


@dataclass(slots=True)
class Endpoint:
    """One server: its URL, headers, slot limit and health."""

    base_url: str
    url: str
    headers: dict[str, str]
    api_key: str
    max_concurrency: int
    breaker: CircuitBreaker
    in_flight: int = 0
    served: int = 0
    sdk: Any = None
    proxy: str | None = None

    @property
    def load(self) -> float:
        return self.in_flight / self.max_concurrency


class RoutingPolicy(Protocol):
    """Chooses among endpoints that are healthy and have a free slot (never empty when called)."""

    def pick(self, candidates: Sequence[Endpoint], request: ChatRequest) -> Endpoint: ...


@dataclass
class CapacityPolicy:
    """Lowest in-flight ÷ ``max_concurrency``; ties go round-robin, so equal nodes share evenly."""

    _rr: int = 0

    def pick(self, candidates: Sequence[Endpoint], request: ChatRequest) -> Endpoint:
        if len(candidates) == 1:
            return candidates[0]
        self._rr = (self._rr + 1) % len(candidates)
        best = candidates[self._rr]
        best_load = best.load
        for ep in candidates:
            load = ep.load
            if load < best_load:
                best, best_load = ep, load
        return best


def sequences_of(request: ChatRequest) -> int:
    """What a request weighs in an endpoint's in-flight count: its ``n`` samples decode as ``n``
    sequences (``n`` of a vLLM server's slots), so an ``n=8`` request counts as 8, not 1."""
    return max(1, request.n)


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def routing_key_of(request: ChatRequest) -> str:
    """The request's ``routing_key``, or a hash of its prompt (messages and tools) when it sets none:
    repeated samples of one prompt then share a server and its prefix cache."""
    if request.routing_key is not None:
        return request.routing_key
    return json.dumps([request.messages, request.tools], sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class AffinityPolicy:
    """Consistent hashing with bounded load (Mirrokni et al., 2018), capacity-aware.

    An endpoint ``e`` may take the request while ``in_flight(e) + 1 <= max(ceil((1 + epsilon) *
    (total_in_flight + 1) * max_concurrency(e) / total_capacity), floor(saturation *
    max_concurrency(e)))``: with equal servers no endpoint goes above ``(1 + epsilon)`` × the
    mean in-flight, or above ``saturation`` × its own limit where that is more (with
    ``max_concurrency`` at 2× the server's sequence slots and ``saturation`` 0.5, a server
    that would start the request at once keeps it; the bound bites where it would queue). ``epsilon`` trades cache
    reuse (large) against balance (small). ``vnodes`` virtual nodes per endpoint even out
    the key ranges: with 64, the largest of four servers' shares of the keys was up to 1.22×
    the mean (next to a 1.25 bound: spills, and one server's queue while others idle); with
    256 it stays within about 1.1× (measured over 20,000 keys and several port sets).
    """

    epsilon: float = 0.25
    vnodes: int = 256
    #: seconds a request may wait for its key's home (healthy but past the bound) before spilling; 0: never
    home_wait_s: float = 0.0
    #: the load (in-flight ÷ ``max_concurrency``) from which a server counts as saturated: below it an endpoint
    #: always takes a request, whatever the bound (a request it would start at once gains nothing by moving
    #: and loses its prefix); a request waits for its home (``home_wait_s``) only while the whole fleet is
    #: at least this loaded. 0: the plain bound, and waits at any load
    saturation: float = 0.0
    #: how many keys' servers are remembered (least recently used dropped first); 0: none, a spill moves one turn
    sticky_keys: int = 65_536
    fallback: CapacityPolicy = field(default_factory=CapacityPolicy)
    _ring: list[int] = field(default_factory=list)
    _owners: list[str] = field(default_factory=list)
    _built_for: tuple[str, ...] = ()
    _all: list[Endpoint] = field(default_factory=list)
    #: key -> base URL of the server its last request went to (its home from then on: its prefix is there)
    _sticky: "OrderedDict[int, str]" = field(default_factory=OrderedDict)  # by the key's 64-bit hash
    #: requests that went to their key's home / further along the ring / to the fallback; ``rehomed``: of the
    #: spills and fallbacks, those that moved their key's home (each spill of a keyed episode does)
    stats: dict[str, int] = field(default_factory=lambda: {"home": 0, "spill": 0, "fallback": 0, "rehomed": 0})
    #: requests that waited for their home (``home_wait_s``), and those of them that spilled all the same
    wait_stats: dict[str, int] = field(default_factory=lambda: {"waited": 0, "waited_then_spilled": 0})

    def __post_init__(self) -> None:
        if self.epsilon < 0:
            raise ValueError(f"llm.routing_epsilon must be >= 0, got {self.epsilon}")
        if self.home_wait_s < 0:
            raise ValueError(f"llm.routing_home_wait_s must be >= 0, got {self.home_wait_s}")
        if not 0.0 <= self.saturation <= 1.0:
            raise ValueError(f"llm.routing_saturation must be within [0, 1], got {self.saturation}")

    def bind(self, endpoints: Sequence[Endpoint]) -> None:
        """Build the ring over *all* endpoints of the pool (not only those free now), so a key's
        home does not move when some other server is busy."""
        self._all = list(endpoints)
        urls = tuple(ep.base_url for ep in endpoints)
        points = sorted((_hash64(f"{url}#{v}"), url) for url in urls for v in range(self.vnodes))
        self._ring = [h for h, _ in points]
        self._owners = [u for _, u in points]
        self._built_for = urls
        self._sticky = OrderedDict((k, u) for k, u in self._sticky.items() if u in urls)

    def bound(self, ep: Endpoint, weight: int = 1) -> int:
        """The most sequences ``ep`` may hold once the next request (``weight`` sequences) is placed."""
        eps = self._all
        total = sum(e.in_flight for e in eps) + weight
        cap = sum(e.max_concurrency for e in eps)
        # at least the request itself: an idle endpoint never sends its own key's request away; and an endpoint
        # below ``saturation`` takes it whatever the others hold
        return max(weight, math.ceil((1.0 + self.epsilon) * total * ep.max_concurrency / cap),
                   math.floor(self.saturation * ep.max_concurrency))

    def home(self, request: ChatRequest, now: float) -> Endpoint | None:
        """The key's home among the endpoints whose breaker lets a request through now (the server it was
        re-homed to, else the first such endpoint clockwise on the ring), or None before :meth:`bind`."""
        if not self._ring:
            return None
        by_url = {ep.base_url: ep for ep in self._all}
        for url in self._order(_hash64(routing_key_of(request))):
            ep = by_url.get(url)
            if ep is not None and ep.breaker.available(now):
                return ep
        return None

    def _order(self, key: int) -> Iterator[str]:
        """The endpoints' URLs in the key's order of preference, each once: its sticky home (where it was
        re-homed by a spill), then clockwise from the key on the ring."""
        sticky = self._sticky.get(key)
        if sticky is not None:
            yield sticky
        start = bisect.bisect_left(self._ring, key)
        seen: set[str] = {sticky} if sticky is not None else set()
        n = len(self._ring)
        for step in range(n):
            url = self._owners[(start + step) % n]
            if url in seen:
                continue
            seen.add(url)
            yield url
            if len(seen) == len(self._built_for):
                return

    def saturated(self, now: float) -> bool:
        """Whether the healthy endpoints' in-flight ÷ capacity is at least :attr:`saturation`."""
        healthy = [ep for ep in self._all if ep.breaker.available(now)]
        cap = sum(ep.max_concurrency for ep in healthy)
        return cap > 0 and sum(ep.in_flight for ep in healthy) >= self.saturation * cap

    def should_wait(self, request: ChatRequest, now: float) -> tuple[Endpoint, float] | None:
        """``(home, seconds)``: the home to wait for (healthy, but full or past the bound, in a saturated
        fleet) and for how long at most, or None: go ahead and place."""
        if self.home_wait_s <= 0 or len(self._all) < 2:
            return None
        if _hash64(routing_key_of(request)) not in self._sticky:
            return None  # a key seen for the first time has no prefix anywhere: nothing to wait for
        ep = self.home(request, now)
        if ep is None:
            return None
        weight = sequences_of(request)
        fits = ep.in_flight < ep.max_concurrency and ep.in_flight + weight <= self.bound(ep, weight)
        if fits or not self.saturated(now):
            return None
        return ep, self.home_wait_s

    def note_wait(self, spilled: bool) -> None:
        """Count a request that started waiting for its home (``spilled=False``), or one that spilled after the wait."""
        self.wait_stats["waited_then_spilled" if spilled else "waited"] += 1

    def pick(self, candidates: Sequence[Endpoint], request: ChatRequest) -> Endpoint:
        if not self._ring or len(self._all) < len(candidates):
            self.bind(candidates)
        by_url = {ep.base_url: ep for ep in candidates}
        weight = sequences_of(request)
        key = _hash64(routing_key_of(request))
        first: str | None = None
        for rank, url in enumerate(self._order(key)):
            first = url if rank == 0 else first
            ep = by_url.get(url)
            if ep is not None and ep.in_flight + weight <= self.bound(ep, weight):
                self.stats["home" if rank == 0 else "spill"] += 1
                self._remember(key, url, moved=rank > 0)
                return ep
        self.stats["fallback"] += 1
        chosen = self.fallback.pick(candidates, request)
        self._remember(key, chosen.base_url, moved=chosen.base_url != first)
        return chosen

    def _remember(self, key: int, url: str, moved: bool) -> None:
        """The key's later requests go to ``url`` first; ``moved``: away from its home (the whole episode
        moves with its spilled turn)."""
        if moved:
            self.stats["rehomed"] += 1
        self._sticky[key] = url
        self._sticky.move_to_end(key)
        while len(self._sticky) > self.sticky_keys:
            self._sticky.popitem(last=False)


@dataclass
class EndpointPool:
    """Slots over several endpoints, with per-endpoint breakers and a pluggable :class:`RoutingPolicy`."""

    endpoints: list[Endpoint]
    policy: RoutingPolicy = field(default_factory=CapacityPolicy)
    _waiters: deque = field(default_factory=deque)
    #: requests waiting for one endpoint (their key's home) to finish a request, by base URL
    _home_waiters: dict[str, list] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bind = getattr(self.policy, "bind", None)
        if callable(bind):
            bind(self.endpoints)

    @property
    def capacity(self) -> int:
        return sum(ep.max_concurrency for ep in self.endpoints)

    async def acquire(self, request: ChatRequest) -> tuple[Endpoint, bool]:
        """A slot on some endpoint: ``(endpoint, is_probe)``; waits while every healthy endpoint is full.

        Raises ``LLMError("connection")`` with ``retry_after`` when every endpoint's
        breaker is open: the retry policy then waits for the next probe instead of
        sending requests to dead servers. While a half-open probe is out, requests
        wait for its outcome (without spending a retry attempt).
        """
        eps = self.endpoints
        weight = sequences_of(request)
        if len(eps) == 1:  # the common case, without building candidate lists
            ep = eps[0]
            if ep.in_flight < ep.max_concurrency and ep.breaker.state == "closed":
                ep.in_flight += weight
                return ep, False
        should_wait = getattr(self.policy, "should_wait", None)  # a policy that may hold a request for its home
        note_wait = getattr(self.policy, "note_wait", None)
        deadline: float | None = None
        while True:
            now = time.monotonic()
            free = [ep for ep in self.endpoints
                    if ep.in_flight < ep.max_concurrency and ep.breaker.available(now)]
            if free and callable(should_wait):
                wait = should_wait(request, now)
                if wait is not None:
                    home, wait_s = wait
                    if deadline is None:
                        deadline = now + wait_s
                        if callable(note_wait):
                            note_wait(False)
                    if now < deadline:
                        await self._wait_for(home, deadline - now)
                        continue
                    if callable(note_wait):
                        note_wait(True)
            if free:
                # the policy decides even with one free endpoint: a turn that goes elsewhere because its home is
                # full is a spill (affinity then moves the episode), not a placement it never heard of
                ep = self.policy.pick(free, request)
                ep.in_flight += weight
                return ep, ep.breaker.on_dispatch(now)
            if all(ep.breaker.hung and ep.breaker.state != "closed" for ep in self.endpoints):
                names = ", ".join(ep.base_url for ep in self.endpoints)
                raise LLMError("unavailable", f"every endpoint is hung ({names}: a request got no answer within "
                               "llm.timeout_s while the server answered nothing else); is the server stuck?")
            probing = any(ep.breaker.probing for ep in self.endpoints)
            if not probing and not any(ep.breaker.available(now) for ep in self.endpoints):
                wait = min(ep.breaker.wait_s(now) for ep in self.endpoints)
                last = next((ep.breaker.last_error for ep in self.endpoints if ep.breaker.last_error), "")
                names = ", ".join(ep.base_url for ep in self.endpoints)
                raise LLMError("connection", f"circuit open for {names} after repeated failures"
                               + (f" (last: {last})" if last else "") + "; is the server up?",
                               retry_after=max(wait, 0.01))
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._wake()  # pass the slot we were given to the next waiter
                else:
                    try:
                        self._waiters.remove(fut)
                    except ValueError:
                        pass
                raise

    def release(self, ep: Endpoint, error: LLMError | None, probe: bool, weight: int = 1, *,
                stalled: bool = False, neutral: bool = False) -> None:
        """Give back what :meth:`acquire` took (``weight``: the request's :func:`sequences_of`).

        ``stalled``: the endpoint completed nothing since the request was sent (see
        :meth:`CircuitBreaker.record`). ``neutral``: the request was cancelled — no outcome, the
        breaker counts nothing (a probe that was cancelled lets the next request probe).
        """
        ep.in_flight -= weight
        if neutral:
            if probe:
                ep.breaker.probing = False
            self._wake(everyone=probe)
            return
        if error is None:
            ep.served += 1
        opened = ep.breaker.opened
        ep.breaker.record(error, probe, stalled)
        # a probe's outcome, or a breaker that just opened, concerns every waiter: go on, or back off
        self._wake(everyone=probe or ep.breaker.opened != opened)
        for fut in self._home_waiters.pop(ep.base_url, ()):  # they look again (the bound moved too)
            if not fut.done():
                fut.set_result(None)

    async def _wait_for(self, ep: Endpoint, timeout: float) -> None:
        """Until ``ep`` releases a request or ``timeout`` seconds pass (a home wait, see :class:`AffinityPolicy`)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = self._home_waiters.setdefault(ep.base_url, [])
        waiting.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            if fut in waiting:
                waiting.remove(fut)

    def _wake(self, everyone: bool = False) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                if not everyone:
                    return

    def down(self) -> bool:
        """True while every endpoint's breaker is open or half-open (nothing healthy to send to)."""
        return all(ep.breaker.state != "closed" for ep in self.endpoints)

    def health(self) -> list[dict[str, Any]]:
        """Per endpoint: in flight, served, breaker state (for the manifest and tests)."""
        return [{"base_url": redact(ep.base_url), "in_flight": ep.in_flight, "served": ep.served,
                 "breaker": ep.breaker.state, "opened": ep.breaker.opened} for ep in self.endpoints]
