"""The engine against the fake server, over both transports (the openai SDK and fabrika's aiohttp)."""

from __future__ import annotations

import time
from typing import Callable

import pytest

from fabrika.llm import LLMEngine
from fabrika.testing import FakeOpenAIServer
from tests.llm.llm_helpers import req

TRANSPORTS = ["raw", "aiohttp", "openai_sdk"]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


async def test_success_fields_and_tag_header(server: FakeOpenAIServer, make_engine: Callable[..., LLMEngine],
                                             transport: str) -> None:
    server.script(tag="fc.user", responses=["Привет!"], cycle=True)
    async with make_engine(server, transport=transport) as eng:
        [a, b] = await eng.complete([req("x", tag="fc.user.turn"), req("y", tag="if.gen")])
    assert a.ok and a.text == "Привет!" and a.backend == "openai" and a.attempts == 1 and not a.cached
    assert b.text.startswith("[fake]")
    assert a.usage.prompt_tokens > 0
    assert server.counts["routes"] == {"script0": 1, "default": 1}
    assert [r["messages"][0]["content"] for r in server.requests_for("fc.user")] == ["x"]
    assert [r["messages"][0]["content"] for r in server.requests_for("if")] == ["y"]


@pytest.mark.parametrize("kind", ["rate_limit", "server"])
async def test_retryable_faults_are_retried(server: FakeOpenAIServer, make_engine: Callable[..., LLMEngine],
                                            transport: str, kind: str) -> None:
    server.faults(kind=kind, match="q", times=2, retry_after=0)
    async with make_engine(server, transport=transport) as eng:
        resp = await eng.complete_one(req("q"))
    assert resp.ok and resp.attempts == 3
    assert server.served == 3
    t = eng.accounting.totals()
    assert (t["retries"], t["success_after_retry"], t["successes"], t["failed"]) == (2, 1, 0, 0)


async def test_retry_after_is_honoured(server: FakeOpenAIServer, make_engine: Callable[..., LLMEngine],
                                       transport: str) -> None:
    server.faults(kind="rate_limit", times=1, retry_after=0.4)
    async with make_engine(server, transport=transport) as eng:
        start = time.perf_counter()
        resp = await eng.complete_one(req("q"))
        elapsed = time.perf_counter() - start
    assert resp.ok and resp.attempts == 2
    assert elapsed >= 0.4  # backoff_initial_s is 1 ms: only Retry-After explains the wait


@pytest.mark.parametrize("kind", ["bad_request", "auth", "not_found", "context_length"])
async def test_terminal_errors_are_not_retried(server: FakeOpenAIServer, make_engine: Callable[..., LLMEngine],
                                               transport: str, kind: str) -> None:
    server.faults(kind=kind, times=1)
    async with make_engine(server, transport=transport) as eng:
        resp = await eng.complete_one(req("q"))
    assert not resp.ok and resp.error.kind == kind and resp.attempts == 1 and resp.choices == ()
    assert server.served == 1
    assert resp.error.__cause__ is not None or transport in ("aiohttp", "raw")
    assert eng.accounting.totals()["failures"] == {kind: 1}


async def test_a_hang_on_a_server_that_answers_others_times_out_then_retries(
        make_engine: Callable[..., LLMEngine], transport: str) -> None:
    with FakeOpenAIServer(hang_s=10, latency_ms=20) as srv:
        srv.faults(match="повиснет", kind="hang", times=1)
        async with make_engine(srv, transport=transport, timeout_s=0.3) as eng:
            start = time.perf_counter()
            resps = await eng.complete([req("повиснет"), *(req(f"q{i}") for i in range(3))])
            elapsed = time.perf_counter() - start
    assert all(r.ok for r in resps) and resps[0].attempts == 2  # the server was alive: a plain retry
    assert elapsed >= 0.3
    assert eng.accounting.totals()["retries"] == 1


async def test_a_hang_while_the_server_answers_nothing_is_not_asked_again(make_engine: Callable[..., LLMEngine]) -> None:
    """A server that accepts connections and never answers costs one timeout, not max_retries of them."""
    with FakeOpenAIServer(hang_s=10) as srv:
        srv.faults(kind="hang")
        async with make_engine(srv, timeout_s=0.1, max_retries=6) as eng:
            resp = await eng.complete_one(req("q"))
            later = await eng.complete([req(f"p{i}") for i in range(5)])
            assert eng.fleet_down()
    assert resp.error is not None and resp.error.kind == "unavailable" and resp.attempts == 2
    assert "hung" in resp.error.message
    assert all(r.error is not None and r.error.kind == "unavailable" for r in later)
    assert srv.served == 1  # only the first attempt reached the hung server


async def test_truncated_is_kept_counted_not_retried(server: FakeOpenAIServer, make_engine: Callable[..., LLMEngine],
                                                     transport: str) -> None:
    server.faults(kind="length", times=1)
    async with make_engine(server, transport=transport) as eng:
        resp = await eng.complete_one(req("q", max_tokens=5))
    assert resp.ok and resp.choices[0].truncated and resp.attempts == 1
    assert server.served == 1
    assert eng.accounting.totals()["truncated"] == 1


async def test_connection_refused_is_a_recorded_failure(make_engine: Callable[..., LLMEngine], transport: str) -> None:
    srv = FakeOpenAIServer().start()
    srv.stop()  # the port is now closed
    async with make_engine(srv, transport=transport, max_retries=1) as eng:
        resp = await eng.complete_one(req("q"))
    assert resp.error.kind == "connection" and resp.attempts == 2


async def test_load_balancing_across_two_servers(make_engine: Callable[..., LLMEngine], transport: str) -> None:
    with FakeOpenAIServer(latency_ms=20) as a, FakeOpenAIServer(latency_ms=20) as b:
        async with make_engine(a, b, transport=transport) as eng:
            resps = await eng.complete([req(f"q{i}") for i in range(100)])
    assert all(r.ok for r in resps)
    assert a.served + b.served == 100
    assert 35 <= a.served <= 65, (a.served, b.served)


async def test_concurrency_limit_is_respected(make_engine: Callable[..., LLMEngine], transport: str) -> None:
    with FakeOpenAIServer(latency_ms=30) as srv:
        eng = make_engine(transport=transport, endpoints=[{"base_url": srv.base_url, "max_concurrency": 5}])
        async with eng:
            resps = await eng.complete([req(f"q{i}") for i in range(40)])
    assert all(r.ok for r in resps)
    assert srv.max_in_flight == 5


async def test_order_is_preserved_with_varied_latency(server: FakeOpenAIServer,
                                                      make_engine: Callable[..., LLMEngine]) -> None:
    server.script(responder=lambda r: {"content": "echo:" + r["messages"][0]["content"],
                                       "latency_ms": (hash(r["messages"][0]["content"]) % 30)})
    async with make_engine(server) as eng:
        resps = await eng.complete([req(f"q{i}") for i in range(50)])
    assert [r.text for r in resps] == [f"echo:q{i}" for i in range(50)]


async def test_thirty_percent_faults_every_request_accounted(make_engine: Callable[..., LLMEngine],
                                                             transport: str) -> None:
    kinds = ["rate_limit", "server", "bad_request", "context_length", "length", "truncated_json", "bad_args"]
    with FakeOpenAIServer() as srv:
        srv.faults(rate=0.3, kinds=kinds, seed=3, retry_after=0)
        async with make_engine(srv, transport=transport, max_retries=4, max_in_flight=64) as eng:
            resps = await eng.complete([req(f"вопрос {i}", tag=f"t{i % 3}", meta={"stage": "s"}) for i in range(300)])
        faults = srv.counts["faults"]
    assert len(resps) == 300
    first_try = sum(1 for r in resps if r.ok and r.attempts == 1)
    after_retry = sum(1 for r in resps if r.ok and r.attempts > 1)
    failed = [r for r in resps if not r.ok]
    assert first_try + after_retry + len(failed) == 300
    assert all(r.error.kind in {"bad_request", "context_length", "rate_limit", "server"} for r in failed)
    t = eng.accounting.totals()
    assert (t["requests"], t["successes"], t["success_after_retry"], t["failed"]) == (
        300, first_try, after_retry, len(failed))
    assert sum(t["failures"].values()) == len(failed)
    assert t["retries"] == sum(r.attempts - 1 for r in resps)
    # every fault the server injected is visible to the caller: a retry, a failure, or marked content
    assert faults.get("rate_limit", 0) + faults.get("server", 0) + faults.get("bad_request", 0) + faults.get(
        "context_length", 0) == t["retries"] + len(failed)
    assert t["truncated"] == faults.get("length", 0)
    assert srv.served == sum(r.attempts for r in resps)
    rows = eng.accounting.snapshot()["rows"]
    assert {r["stage"] for r in rows} == {"s"} and {r["tag"] for r in rows} == {"t0", "t1", "t2"}


async def test_dead_endpoint_cools_down_and_traffic_moves(make_engine: Callable[..., LLMEngine],
                                                          transport: str) -> None:
    dead = FakeOpenAIServer().start()
    dead.stop()
    with FakeOpenAIServer(latency_ms=5) as live:
        async with make_engine(dead, live, transport=transport, max_retries=3,
                               breaker={"failure_threshold": 3, "cooldown_s": 60}) as eng:
            resps = [await eng.complete_one(req(f"q{i}")) for i in range(30)]
            health = eng.stats()["endpoints"]
    assert all(r.ok for r in resps)
    assert live.served == 30
    # the dead endpoint is tried until its breaker opens (3 consecutive failures), then skipped
    assert sum(r.attempts for r in resps) == 33
    assert [h["breaker"] for h in health] == ["open", "closed"]
