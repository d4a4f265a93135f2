"""The request-keyed cache: what is in the key, what is not, persistence, cache-only."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import pytest

from fabrika.errors import CacheMissError, ConfigError
from fabrika.llm import CACHE_KEY_VERSION, LLMConfig, LLMEngine, ResponseCache, build_engine, request_key
from fabrika.llm.types import ChatResponse, Choice, Usage
from fabrika.testing import FakeOpenAIServer
from tests.llm.llm_helpers import req

BASE = req("Привет", model="m", temperature=0.7)


@pytest.mark.parametrize("change", [
    {"model": "other"}, {"messages": ({"role": "user", "content": "Пока"},)}, {"tools": ({"type": "function"},)},
    {"tool_choice": "none"}, {"temperature": 0.1}, {"top_p": 0.5}, {"max_tokens": 10}, {"n": 2}, {"seed": 1},
    {"sample_index": 1}, {"response_format": {"type": "json_object"}}, {"stop": ("\n",)},
    {"extra_body": {"guided_json": {}}},
])
def test_output_relevant_fields_change_the_key(change: dict) -> None:
    assert request_key(dataclasses.replace(BASE, **change)) != request_key(BASE)


def test_bookkeeping_fields_do_not_change_the_key() -> None:
    other = dataclasses.replace(BASE, tag="another.role", meta={"stage": "x", "item": 3})
    assert request_key(other) == request_key(BASE)
    assert isinstance(CACHE_KEY_VERSION, int)
    # the recipe itself is pinned by a literal hash in test_llm_real_faults.test_cache_key_recipe_is_pinned
    assert len(request_key(BASE)) == 64


def test_cache_roundtrip_persists_and_refuses_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path, flush_every=2)
    resp = ChatResponse(choices=(Choice("текст", ({"id": "1", "name": "f", "arguments": "{}"},), "tool_calls", "мысль"),
                                 Choice(None, (), "length")), usage=Usage(3, 4), model="m", backend="openai")
    cache.put("k1", resp)
    from fabrika.errors import LLMError
    cache.put("k2", ChatResponse(error=LLMError("server", "x")))
    assert cache.get("k1") is not None and cache.get("k2") is None  # served from the write buffer
    cache.close()
    again = ResponseCache(path)
    got = again.get("k1")
    assert got is not None and got.cached and got.choices == resp.choices and got.usage == resp.usage
    assert got.backend == "openai" and got.model == "m"
    assert set(again.get_many(["k1", "k2", "k3"])) == {"k1"}
    assert len(again) == 1
    again.close()


async def test_second_identical_call_is_served_from_cache(make_engine: Callable[..., LLMEngine], tmp_path: Path,
                                                          server: FakeOpenAIServer) -> None:
    reqs = [req(f"q{i}") for i in range(20)]
    async with make_engine(server, cache=True) as eng:
        first = await eng.complete(reqs)
    assert server.served == 20
    server.reset_counts()
    async with make_engine(server, cache=True) as eng2:  # a new engine: the cache is on disk
        second = await eng2.complete(reqs)
        one = await eng2.complete_one(reqs[3])
    assert server.served == 0
    assert [r.text for r in second] == [r.text for r in first]
    assert all(r.cached for r in second) and one.cached
    assert eng2.accounting.totals()["cache_hits"] == 21
    assert eng2.accounting.totals()["prompt_tokens"] == 0  # hits cost nothing


async def test_changing_max_tokens_reasks_only_changed(make_engine: Callable[..., LLMEngine],
                                                       server: FakeOpenAIServer) -> None:
    reqs = [req(f"q{i}", max_tokens=100) for i in range(10)]
    async with make_engine(server, cache=True) as eng:
        await eng.complete(reqs)
    server.reset_counts()
    changed = [dataclasses.replace(r, max_tokens=200) if i % 3 == 0 else r for i, r in enumerate(reqs)]
    async with make_engine(server, cache=True) as eng:
        await eng.complete(changed)
    assert server.served == 4  # i = 0, 3, 6, 9
    assert [r["max_tokens"] for r in server.requests] == [200] * 4


async def test_config_default_change_reasks(make_engine: Callable[..., LLMEngine], server: FakeOpenAIServer) -> None:
    async with make_engine(server, cache=True, max_tokens=50) as eng:
        await eng.complete([req("a"), req("b", max_tokens=7)])
    server.reset_counts()
    async with make_engine(server, cache=True, max_tokens=60) as eng:
        await eng.complete([req("a"), req("b", max_tokens=7)])
    assert server.served == 1 and server.requests[0]["max_tokens"] == 60


async def test_errors_are_not_cached(make_engine: Callable[..., LLMEngine], server: FakeOpenAIServer) -> None:
    server.faults(kind="bad_request", times=1)
    async with make_engine(server, cache=True) as eng:
        assert not (await eng.complete_one(req("q"))).ok
        assert (await eng.complete_one(req("q"))).ok
    assert server.served == 2


async def test_cache_only_miss_is_a_cache_miss_error(make_engine: Callable[..., LLMEngine],
                                                     server: FakeOpenAIServer) -> None:
    async with make_engine(server, cache=True) as eng:
        await eng.complete([req("have")])
    server.reset_counts()
    async with make_engine(server, cache=True, cache_only=True) as eng:
        have, miss = await eng.complete([req("have"), req("missing")])
    assert have.ok and have.cached
    assert isinstance(miss.error, CacheMissError) and miss.error.kind == "cache_miss"
    assert eng.cache_misses == 1 and server.served == 0
    assert eng.accounting.totals()["failures"] == {"cache_miss": 1}


def test_cache_only_without_cache_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cache_only"):
        build_engine(LLMConfig(cache_only=True, cache={"enabled": False}), None)


async def test_identical_requests_in_flight_share_one_call(make_engine: Callable[..., LLMEngine]) -> None:
    with FakeOpenAIServer(latency_ms=50) as srv:
        async with make_engine(srv, cache=True) as eng:
            resps = await eng.complete([req("один"), req("один"), req("два"), req("один")])
        assert srv.served == 2
        assert [r.cached for r in resps] == [False, True, False, True]
        assert resps[0].text == resps[1].text == resps[3].text
        t = eng.accounting.totals()
        assert (t["requests"], t["cache_hits"], t["successes"]) == (4, 2, 2)
        srv.reset_counts()
        async with make_engine(srv, cache=False) as eng:  # without a cache every request is its own call
            await eng.complete([req("три"), req("три")])
        assert srv.served == 2


def test_the_cache_key_is_hashed_only_when_a_cache_reads_it(tmp_path: Path, monkeypatch) -> None:
    """Without a cache the key (a hash of the whole history) is never computed: on long FC dialogues
    hashing every request stalled the client's event loop; with a cache every request is keyed."""
    import asyncio

    import fabrika.llm.engine as engine_module
    from fabrika.testing import ScriptedLLM

    calls: list[int] = []
    real = engine_module.request_key

    def counting(request, scope=None):  # noqa: ANN001 - the engine's own call signature
        calls.append(1)
        return real(request, scope=scope)

    monkeypatch.setattr(engine_module, "request_key", counting)
    backend = ScriptedLLM(lambda r: "ответ")
    requests = [req(f"вопрос {i}", model="m") for i in range(5)]

    async def ask(engine: LLMEngine) -> list[ChatResponse]:
        try:
            return await engine.complete(requests)
        finally:
            await engine.aclose()

    out = asyncio.run(ask(LLMEngine(backend, config=LLMConfig(backend="sim", model="m"))))
    assert [r.text for r in out] == ["ответ"] * 5 and calls == []
    cache = ResponseCache(tmp_path / "c.sqlite")
    out = asyncio.run(ask(LLMEngine(backend, config=LLMConfig(backend="sim", model="m"), cache=cache)))
    assert [r.text for r in out] == ["ответ"] * 5 and len(calls) >= 5
