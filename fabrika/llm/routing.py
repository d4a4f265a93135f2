"""Endpoint health and choice for the OpenAI-compatible backend.

* :class:`CircuitBreaker` — per endpoint: ``failure_threshold`` consecutive
  failures (connection errors, timeouts, 5xx) open it; while open, no request is
  sent there; after ``cooldown_s`` one probe request is let through (half-open);
  its success closes the breaker, its failure reopens it with a doubled
  cool-down (up to ``max_cooldown_s``). A dead server is then asked once per
  cool-down instead of by every request in flight.
* :class:`EndpointPool` — slots: an endpoint takes at most ``max_concurrency``
  requests; a request waits for a free slot on *any* endpoint (not on the one
  it happened to pick), so mixed GPU nodes are each filled to their limit.
* :class:`RoutingPolicy` — which endpoint with a free slot gets the request.
  The default, :class:`CapacityPolicy`, picks the lowest in-flight ÷
  ``max_concurrency``. A policy sees the request, so a later one can route by
  prompt prefix (KV-cache affinity) without touching the pool.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

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

    def record(self, error: LLMError | None, probe: bool = False) -> None:
        """Count one outcome; only health failures (see :func:`counts_against_health`) open the breaker."""
        if probe:
            self.probing = False
        if error is None or not counts_against_health(error):  # an answer (even a 4xx): the server is alive
            self.failures = 0
            if self.state != "closed":
                self.state = "closed"
                self.current_cooldown = 0.0
            return
        self.failures += 1
        self.last_error = error.message[:200]
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


@dataclass
class EndpointPool:
    """Slots over several endpoints, with per-endpoint breakers and a pluggable :class:`RoutingPolicy`."""

    endpoints: list[Endpoint]
    policy: RoutingPolicy = field(default_factory=CapacityPolicy)
    _waiters: deque = field(default_factory=deque)

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
        if len(eps) == 1:  # the common case, without building candidate lists
            ep = eps[0]
            if ep.in_flight < ep.max_concurrency and ep.breaker.state == "closed":
                ep.in_flight += 1
                return ep, False
        while True:
            now = time.monotonic()
            free = [ep for ep in self.endpoints
                    if ep.in_flight < ep.max_concurrency and ep.breaker.available(now)]
            if free:
                ep = free[0] if len(free) == 1 else self.policy.pick(free, request)
                ep.in_flight += 1
                return ep, ep.breaker.on_dispatch(now)
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

    def release(self, ep: Endpoint, error: LLMError | None, probe: bool) -> None:
        ep.in_flight -= 1
        if error is None:
            ep.served += 1
        ep.breaker.record(error, probe)
        self._wake(everyone=probe)  # a probe's outcome concerns every waiter: go on, or back off

    def _wake(self, everyone: bool = False) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                if not everyone:
                    return

    def health(self) -> list[dict[str, Any]]:
        """Per endpoint: in flight, served, breaker state (for the manifest and tests)."""
        return [{"base_url": redact(ep.base_url), "in_flight": ep.in_flight, "served": ep.served,
                 "breaker": ep.breaker.state, "opened": ep.breaker.opened} for ep in self.endpoints]
