"""Failure modes real servers have, through the real HTTP client: HTML error pages, aborted answers,
Retry-After dates, dead servers (breaker), mixed node sizes, an engine-wide in-flight cap."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Callable

import pytest

from fabrika.llm import LLMEngine, request_key
from fabrika.llm.cache import CACHE_KEY_VERSION
from fabrika.llm.retry import map_exception
from fabrika.testing import FakeOpenAIServer
from tests.llm.llm_helpers import req


@pytest.fixture(params=["raw", "aiohttp", "openai_sdk"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


async def test_nginx_html_502_is_retried_and_reported_without_markup(make_engine: Callable[..., LLMEngine],
                                                                     transport: str) -> None:
    with FakeOpenAIServer() as srv:
        srv.faults(kind="bad_gateway_html", times=1)
        async with make_engine(srv, transport=transport, cache=True) as eng:
            ok = await eng.complete_one(req("q"))
        assert ok.ok and ok.attempts == 2
        srv.faults(kind="bad_gateway_html")  # always, from now on
        async with make_engine(srv, transport=transport, max_retries=1) as eng:
            bad = await eng.complete_one(req("другой"))
    assert bad.error is not None and bad.error.kind == "server" and bad.error.status_code == 502
    assert "502 Bad Gateway" in bad.error.message and "<html" not in bad.error.message.lower()


async def test_abort_finish_is_retried_and_never_cached(make_engine: Callable[..., LLMEngine], tmp_path: Path,
                                                        transport: str) -> None:
    with FakeOpenAIServer() as srv:
        srv.faults(kind="abort", times=1)
        async with make_engine(srv, transport=transport, cache=True, run_dir=tmp_path) as eng:
            first = await eng.complete_one(req("q"))
        assert first.ok and first.attempts == 2 and first.choices[0].finish_reason == "stop"
        srv.faults(kind="abort")
        async with make_engine(srv, transport=transport, cache=True, run_dir=tmp_path, max_retries=2) as eng:
            aborted = await eng.complete_one(req("всегда обрывается"))
            assert aborted.error is not None and aborted.error.kind == "server" and aborted.attempts == 3
            assert "abort" in aborted.error.message
            assert eng.cache is not None and eng.cache.get(eng.key(req("всегда обрывается"))) is None
            assert eng.cache.get(eng.key(req("q"))) is not None  # the finished answer is cached


async def test_retry_after_http_date_is_honoured(make_engine: Callable[..., LLMEngine]) -> None:
    with FakeOpenAIServer(retry_after=2.0) as srv:  # an HTTP date has 1 s resolution: 2 s is ≥ 1 s ahead
        srv.faults(kind="rate_limit_date", times=1)
        async with make_engine(srv) as eng:
            start = time.perf_counter()
            resp = await eng.complete_one(req("q"))
            waited = time.perf_counter() - start
    assert resp.ok and resp.attempts == 2
    assert 0.5 < waited < 4  # waited for the date (second resolution), within retry_after_max_s


async def test_breaker_stops_hammering_a_failing_server(make_engine: Callable[..., LLMEngine]) -> None:
    with FakeOpenAIServer() as srv:
        srv.faults(kind="overloaded")  # every request: 503
        async with make_engine(srv, max_retries=3, breaker={"failure_threshold": 4, "cooldown_s": 0.2}) as eng:
            resps = await eng.complete([req(f"q{i}") for i in range(40)])
            health = eng.stats()["endpoints"]
        assert all(r.error is not None and r.error.kind in ("server", "connection") for r in resps)
        assert health[0]["breaker"] == "open"
        # 40 requests x 4 attempts would be 160 hits; the breaker lets through the first wave and a few probes
        assert srv.served < 80, srv.served
        srv.clear()
        async with make_engine(srv, max_retries=3, breaker={"failure_threshold": 4, "cooldown_s": 0.05}) as eng:
            back = await eng.complete([req(f"q{i}") for i in range(10)])
        assert all(r.ok for r in back)


async def test_a_timeout_while_the_server_answers_nothing_opens_the_breaker_at_once(
        make_engine: Callable[..., LLMEngine]) -> None:
    with FakeOpenAIServer(hang_s=5) as srv:
        srv.faults(kind="hang")
        async with make_engine(srv, timeout_s=0.2, max_retries=0, breaker={"failure_threshold": 5,
                                                                          "cooldown_s": 30}) as eng:
            resps = [await eng.complete_one(req(f"q{i}")) for i in range(5)]
        assert [r.error.kind for r in resps if r.error] == ["timeout"] + ["unavailable"] * 4
        assert "hung" in resps[-1].error.message  # type: ignore[union-attr]
        assert srv.served == 1


def test_timeouts_of_a_server_that_answers_others_count_toward_the_threshold() -> None:
    from fabrika.errors import LLMError
    from fabrika.llm.routing import CircuitBreaker

    b = CircuitBreaker(failure_threshold=2, cooldown_s=0.05, max_cooldown_s=60)
    slow = LLMError("timeout", "read timeout")
    b.record(slow, stalled=False)  # other requests were answered meanwhile: slow, not hung
    assert b.state == "closed" and not b.hung
    b.record(slow, stalled=False)
    assert b.state == "open" and not b.hung and b.current_cooldown == 0.05
    b.record(None, probe=True)
    b.record(slow, stalled=True)  # nothing answered since it was sent: hung, open at once for max_cooldown_s
    assert b.state == "open" and b.hung and b.current_cooldown == 60
    b.record(None)
    assert b.state == "closed" and not b.hung


def test_connect_timeout_is_a_connection_error() -> None:
    import aiohttp

    assert map_exception(aiohttp.ConnectionTimeoutError("connect")).kind == "connection"
    assert map_exception(aiohttp.SocketTimeoutError("read")).kind == "timeout"


async def test_mixed_endpoints_are_each_filled_to_their_limit(make_engine: Callable[..., LLMEngine]) -> None:
    with FakeOpenAIServer(latency_ms=60) as big, FakeOpenAIServer(latency_ms=60) as small:
        cfg = {"endpoints": [{"base_url": big.base_url, "max_concurrency": 48},
                             {"base_url": small.base_url, "max_concurrency": 8}]}
        async with make_engine(big, small, **cfg) as eng:
            resps = await eng.complete([req(f"q{i}") for i in range(560)])
    assert all(r.ok for r in resps)
    assert big.max_in_flight == 48 and small.max_in_flight == 8
    assert big.served + small.served == 560 and big.served > 4 * small.served


async def test_max_in_flight_is_engine_wide(make_engine: Callable[..., LLMEngine]) -> None:
    with FakeOpenAIServer(latency_ms=30) as srv:
        async with make_engine(srv, max_in_flight=12,
                               endpoints=[{"base_url": srv.base_url, "max_concurrency": 256}]) as eng:
            resps = await asyncio.gather(*[eng.complete_one(req(f"q{i}")) for i in range(120)])
    assert all(r.ok for r in resps)
    assert srv.max_in_flight == 12


def test_cache_key_recipe_is_pinned() -> None:
    """A literal hash: any change to the recipe shows here (then bump CACHE_KEY_VERSION and this value)."""
    r = req("Привет", model="m", temperature=0.7, max_tokens=16, seed=3)
    assert CACHE_KEY_VERSION == 2
    assert request_key(r, scope="openai") == "ffe12e57a5440de1f1020561b0e88f282c976d20318d7f43d883cd89511c8153"
    assert request_key(r, scope="sim/0/default") != request_key(r, scope="openai")


async def test_proxy_environment_is_honoured(make_engine: Callable[..., LLMEngine],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY routes the aiohttp transport through the proxy (the fake server answers absolute-form
    requests like a forwarding proxy would); NO_PROXY exempts a host."""
    with FakeOpenAIServer() as proxy, FakeOpenAIServer() as direct:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "")
        unreachable = FakeOpenAIServer(port=9)  # never started: only the proxy can answer for it
        async with make_engine(unreachable, max_retries=0) as eng:
            resp = await eng.complete_one(req("через прокси"))
        assert resp.ok and proxy.served == 1
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with make_engine(direct, max_retries=0) as eng:
            assert (await eng.complete_one(req("напрямую"))).ok
        assert direct.served == 1 and proxy.served == 1


async def test_deadline_bounds_a_request_across_its_retries(make_engine: Callable[..., LLMEngine]) -> None:
    with FakeOpenAIServer() as srv:
        srv.faults(kind="server")  # every attempt: 500 at once, retried with backoff
        async with make_engine(srv, max_retries=20, backoff_initial_s=0.2, backoff_max_s=0.2, deadline_s=0.5,
                               breaker={"failure_threshold": 100}) as eng:
            resp = await eng.complete_one(req("q"))
    assert resp.error is not None and resp.error.kind == "timeout" and "deadline" in resp.error.message
    assert srv.served <= 4  # the deadline, not the 21 attempts, ended it (backoff 0.2 s, deadline 0.5 s)


def test_breaker_half_open_probe_closes_or_reopens_with_a_longer_cooldown() -> None:
    from fabrika.errors import LLMError
    from fabrika.llm.routing import CircuitBreaker

    b = CircuitBreaker(failure_threshold=2, cooldown_s=0.05, max_cooldown_s=0.15)
    down = LLMError("connection", "refused")
    b.record(down)
    assert b.state == "closed" and b.available(time.monotonic())
    b.record(LLMError("bad_request", "the item's fault"))  # a 4xx: the server is alive, the count restarts
    b.record(down)
    assert b.state == "closed"
    b.record(down)
    assert b.state == "open" and not b.available(time.monotonic())
    time.sleep(0.06)
    now = time.monotonic()
    assert b.available(now) and b.on_dispatch(now) is True  # the one probe
    assert not b.available(now)  # nobody else while it is out
    b.record(down, probe=True)
    assert b.state == "open" and abs(b.current_cooldown - 0.1) < 1e-9  # doubled
    time.sleep(0.11)
    assert b.on_dispatch(time.monotonic()) is True
    b.record(None, probe=True)
    assert b.state == "closed" and b.available(time.monotonic())


async def test_an_engine_recovers_when_its_server_comes_back(make_engine: Callable[..., LLMEngine]) -> None:
    srv = FakeOpenAIServer().start()
    try:
        async with make_engine(srv, max_retries=0, breaker={"failure_threshold": 2, "cooldown_s": 0.1}) as eng:
            assert (await eng.complete_one(req("до"))).ok
            srv.stop()
            failed = [await eng.complete_one(req(f"лежит {i}")) for i in range(4)]
            assert all(r.error is not None and r.error.kind == "connection" for r in failed)
            assert eng.stats()["endpoints"][0]["breaker"] == "open"
            srv.start()  # same port
            await asyncio.sleep(0.15)
            back = [await eng.complete_one(req(f"после {i}")) for i in range(3)]
            assert all(r.ok for r in back) and eng.stats()["endpoints"][0]["breaker"] == "closed"
    finally:
        srv.stop()


def test_other_servers_finish_reason_spellings_are_normalised() -> None:
    from fabrika.llm.openai_compat import parse_completion

    def finish(reason: object) -> object:
        data = {"choices": [{"message": {"content": "x"}, "finish_reason": reason}], "model": "m"}
        return parse_completion(data, "openai").choices[0].finish_reason

    assert [finish(r) for r in ("eos_token", "stop", "max_tokens", "function_call", "abort", None)] == [
        "stop", "stop", "length", "tool_calls", "abort", None]


async def test_a_server_echoing_the_key_in_an_error_does_not_leak_it(make_engine: Callable[..., LLMEngine]) -> None:
    secret = "sk-echoed-0123456789"
    body = '{"error": {"message": "bad key Bearer %s", "code": "invalid_api_key"}}' % secret
    with FakeOpenAIServer() as srv:
        srv.script(responses=[{"http_status": 401, "body": body}], cycle=True)  # a proxy echoing headers
        async with make_engine(srv, endpoints=[{"base_url": srv.base_url, "api_key": secret}]) as eng:
            resp = await eng.complete_one(req("q"))
    assert resp.error is not None and resp.error.kind == "auth"
    assert secret not in str(resp.error) and "***" in resp.error.message


@pytest.mark.parametrize(("message", "lost"), [
    ({"content": None}, True),
    ({"content": ""}, True),
    ({"content": "  \n"}, True),
    ({"content": "Ответ"}, False),
    ({"content": None, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}, False),
    ({"content": None, "reasoning_content": "думаю"}, False),  # reasoning only: the model's answer, a verdict
])
def test_a_200_answer_that_finished_with_nothing_in_it_is_a_retryable_server_error(message: dict, lost: bool) -> None:
    from fabrika.errors import LLMError
    from fabrika.llm.openai_compat import parse_completion
    from fabrika.llm.routing import counts_against_health

    finish = "tool_calls" if message.get("tool_calls") else "stop"
    data = {"choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}]}
    if not lost:
        assert parse_completion(data, "openai").choices
        return
    with pytest.raises(LLMError) as info:
        parse_completion(data, "openai")
    assert info.value.kind == "server" and info.value.retryable and "empty answer" in info.value.message
    assert not counts_against_health(info.value)  # the server answered: its breaker does not move
