"""The fake server's vLLM mode (slots, prefix cache, cost model) and repeated samples as one n=K request."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from fabrika.llm import ChatRequest, build_engine
from fabrika.testing import FakeOpenAIServer, SimVLLMConfig
from fabrika.testing.sim_vllm import SimVLLM, render_prompt
from tests.llm.llm_helpers import http_config


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "fake", "messages": [{"role": "user", "content": text}], **extra}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


PROMPT = "Расскажи, пожалуйста, подробно о погоде в Казани на этой неделе. " * 8  # 528 chars = 132+ tokens


def test_cost_model_prefill_decode_and_prefix_cache() -> None:
    cfg = SimVLLMConfig(slots=4, prefill_s_per_token=0.01, decode_s_per_token=0.1, overhead_s=0.0)
    clock = Clock()
    sim = SimVLLM(cfg, clock)
    p = sim.tokens(render_prompt(body(PROMPT)))
    d1 = sim.schedule(body(PROMPT), [answer("x" * 40)])  # 10 output tokens
    assert abs(d1 - (p * 0.01 + 10 * 0.1)) < 1e-9
    assert sim.stats["prompt_tokens_prefilled"] == p and sim.stats["prompt_tokens_cached"] == 0
    clock.t = 10.0  # after the first finished: its full blocks are cached
    d2 = sim.schedule(body(PROMPT), [answer("x" * 40)])
    cached = (p // cfg.block_tokens) * cfg.block_tokens
    assert sim.stats["prompt_tokens_cached"] == cached > 0
    assert abs(d2 - ((p - cached) * 0.01 + 1.0)) < 1e-9
    # a different prompt shares nothing
    sim.schedule(body("Совсем другой вопрос о поездах и расписании. " * 8), [answer("ok")])
    assert sim.stats["prompt_tokens_cached"] == cached


def test_blocks_are_not_cached_before_they_are_prefilled() -> None:
    """Two identical prompts arriving together both prefill (as separate requests in one vLLM step)."""
    sim = SimVLLM(SimVLLMConfig(slots=4, overhead_s=0.0), Clock())
    sim.schedule(body(PROMPT), [answer("a")])
    sim.schedule(body(PROMPT), [answer("a")])
    assert sim.stats["prompt_tokens_cached"] == 0
    assert sim.stats["prompt_tokens_prefilled"] == 2 * sim.tokens(render_prompt(body(PROMPT)))


def test_slots_queue_beyond_capacity() -> None:
    cfg = SimVLLMConfig(slots=2, prefill_s_per_token=0.0, decode_s_per_token=1.0, overhead_s=0.0)
    sim = SimVLLM(cfg, Clock())
    delays = [sim.schedule(body(f"q{i}"), [answer("abcd")]) for i in range(3)]  # 1 token each = 1 s
    assert delays == [1.0, 1.0, 2.0]
    assert sim.stats["queue_wait_s"] == 1.0
    assert sim.snapshot()["busy_s"] == 1.5  # 3 slot-seconds over 2 slots


def test_n_samples_share_one_prefill() -> None:
    cfg = SimVLLMConfig(slots=8, overhead_s=0.0)
    grouped, separate = SimVLLM(cfg, Clock()), SimVLLM(cfg, Clock())
    grouped.schedule(body(PROMPT, n=4), [answer(f"s{j}") for j in range(4)])
    for j in range(4):
        separate.schedule(body(PROMPT), [answer(f"s{j}")])
    p = grouped.tokens(render_prompt(body(PROMPT)))
    assert grouped.stats["prompt_tokens_prefilled"] == p and grouped.stats["sequences"] == 4
    assert separate.stats["prompt_tokens_prefilled"] == 4 * p


def test_lru_capacity_evicts() -> None:
    cfg = SimVLLMConfig(slots=1, cache_blocks=10, overhead_s=0.0)
    clock = Clock()
    sim = SimVLLM(cfg, clock)
    sim.schedule(body(PROMPT), [answer("a")])
    clock.t = 100.0
    sim.schedule(body("Другой длинный запрос про рецепты борща и пельменей. " * 8), [answer("b")])
    clock.t = 200.0
    sim.schedule(body(PROMPT), [answer("a")])  # its blocks were pushed out by the second prompt
    assert sim.stats["evicted_blocks"] > 0
    assert sim.stats["prompt_tokens_cached"] == 0


def test_http_stats_endpoint_and_generated_blocks_cached() -> None:
    cfg = SimVLLMConfig(slots=4, time_scale=1000.0)
    with FakeOpenAIServer(vllm=cfg) as srv:
        srv.script(tag="", responder=lambda req: "Ответ ассистента, достаточно длинный, чтобы занять блок " * 3)
        base = srv.base_url

        def post(path: str, data: dict[str, Any]) -> dict[str, Any]:
            r = urllib.request.Request(base + path, data=json.dumps(data).encode(), method="POST",
                                       headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(r, timeout=5) as resp:
                return json.loads(resp.read())

        first = post("/chat/completions", body(PROMPT))
        reply = first["choices"][0]["message"]
        follow = {"model": "fake", "messages": [{"role": "user", "content": PROMPT}, reply,
                                                {"role": "user", "content": "А завтра?"}]}
        post("/chat/completions", follow)
        with urllib.request.urlopen(base + "/stats", timeout=5) as resp:
            stats = json.loads(resp.read())
        assert stats["requests"] == 2 and stats["completion_tokens"] > 0 and stats["busy_s"] > 0
        # the second turn found the first turn's prompt *and* its answer in the cache
        assert stats["prompt_tokens_cached"] > srv.app.sim.tokens(render_prompt(body(PROMPT))) - 16
        assert post("/stats", {})["requests"] == 0  # POST resets


def _samples(k: int, seed: int = 11, start: int = 0) -> list[ChatRequest]:
    return [ChatRequest(messages=({"role": "user", "content": PROMPT},), temperature=1.0, seed=seed,
                        sample_index=i, tag="if.verifier") for i in range(start, k)]


async def test_n_k_and_k_requests_give_the_same_samples(tmp_path: Path) -> None:
    cfg = SimVLLMConfig(slots=16, time_scale=1000.0)
    texts = {}
    for group in (False, True):
        with FakeOpenAIServer(vllm=cfg) as srv:
            eng = build_engine(http_config(srv, group_samples=group, cache={"enabled": True}),
                               tmp_path / f"g{group}")
            async with eng:
                resps = await eng.complete(_samples(5))
            assert all(r.ok for r in resps)
            texts[group] = [r.text for r in resps]
            stats = srv.sim_stats()
            ns = [b.get("n", 1) for b in srv.requests]
            if group:
                assert ns == [5] and stats["sequences"] == 5
                assert stats["prompt_tokens_prefilled"] == stats["prompt_tokens"]  # one prompt for 5 samples
            else:
                assert ns == [1] * 5
    assert texts[True] == texts[False]
    assert len(set(texts[True])) == 5  # the samples differ (seed offset by sample index)


async def test_grouped_samples_resume_from_per_sample_cache(tmp_path: Path) -> None:
    cfg = SimVLLMConfig(slots=16, time_scale=1000.0)
    with FakeOpenAIServer(vllm=cfg) as srv:
        eng = build_engine(http_config(srv, cache={"enabled": True}), tmp_path)
        async with eng:
            first = await eng.complete(_samples(2))  # samples 0-1 (a run that stopped early)
            srv.app.requests.clear()
            resps = await eng.complete(_samples(5))
            assert [r.cached for r in resps] == [True, True, False, False, False]
            assert [b.get("n", 1) for b in srv.requests] == [3] and srv.requests[0]["seed"] == 13
            again = await eng.complete(_samples(5))
            assert all(r.cached for r in again)
    assert [r.text for r in resps[:2]] == [r.text for r in first]
    with FakeOpenAIServer(vllm=cfg) as srv:  # ungrouped answers for the same five samples
        eng = build_engine(http_config(srv, group_samples=False, cache={"enabled": False}), tmp_path / "plain")
        async with eng:
            plain = await eng.complete(_samples(5))
    assert [r.text for r in resps] == [r.text for r in plain]


async def test_short_n_answer_is_a_server_error_not_a_lost_sample(tmp_path: Path) -> None:
    with FakeOpenAIServer() as srv:
        srv.script(tag="", responses=[{"choices": ["only one"]}], name="short")  # asked 3, answers 1
        eng = build_engine(http_config(srv, max_retries=0, cache={"enabled": False}), tmp_path)
        async with eng:
            resps = await eng.complete(_samples(3))
    assert [r.error.kind if r.error else None for r in resps] == ["server"] * 3


def test_more_samples_than_slots_wait_for_a_slot() -> None:
    cfg = SimVLLMConfig(slots=2, prefill_s_per_token=0.0, decode_s_per_token=1.0, overhead_s=0.0)
    sim = SimVLLM(cfg, Clock())
    delay = sim.schedule(body("q", n=5), [answer("abcd")] * 5)  # 1 output token per sample = 1 s
    assert delay == 3.0 and sim.stats["sequences"] == 5  # 2 + 2 + 1 samples, one after another
    assert sim.stats["busy_slot_s"] == 5.0 and sim.stats["queue_wait_s"] == 0 + 0 + 1 + 1 + 2


def test_blocks_of_running_sequences_are_not_evicted() -> None:
    """KV memory is one pool: a sequence still decoding keeps its blocks, finished ones are evicted first."""
    cfg = SimVLLMConfig(slots=4, cache_blocks=12, overhead_s=0.0, prefill_s_per_token=0.001, decode_s_per_token=1.0)
    clock = Clock()
    sim = SimVLLM(cfg, clock)
    long_answer = answer("x" * 400)  # 100 tokens: decodes for 100 s
    sim.schedule(body(PROMPT), [long_answer])  # 8 prompt blocks held until t = 100
    clock.t = 1.0
    sim.schedule(body("Другой длинный запрос про рецепты борща и пельменей. " * 8), [answer("b")])  # finishes at ~2
    clock.t = 50.0  # the first is still decoding: an identical prompt finds its blocks
    sim.schedule(body(PROMPT), [answer("c")])
    p = sim.tokens(render_prompt(body(PROMPT)))
    assert sim.stats["prompt_tokens_cached"] == (p // cfg.block_tokens) * cfg.block_tokens
    assert sim.stats["evicted_blocks"] > 0  # the finished second prompt's blocks made room instead


def test_counters_by_role_and_demand() -> None:
    cfg = SimVLLMConfig(slots=1, prefill_s_per_token=0.0, decode_s_per_token=1.0, overhead_s=0.0, bucket_s=1.0)
    sim = SimVLLM(cfg, Clock())
    sim.schedule(body("q1"), [answer("abcd")], tag="fc.user")
    sim.schedule(body("q2"), [answer("abcd")], tag="fc.tool")  # queues behind the first: in the server 0-2 s
    snap = sim.snapshot()
    assert snap["by_tag"]["fc.user"]["requests"] == 1 and snap["by_tag"]["fc.tool"]["requests"] == 1
    assert snap["timeline"] == {"0": 1.0, "1": 1.0}  # one slot busy throughout
    assert snap["demand"] == {"0": 2.0, "1": 1.0}  # two requests in the server in the first second


async def test_routing_key_travels_as_a_header_into_the_log(tmp_path: Path) -> None:
    """The backend sends ``routing_key`` as ``x-fabrika-routing-key``; the simulated server logs each request
    with it (arrival, start, done), so an episode's chain can be rebuilt from the server side."""
    cfg = SimVLLMConfig(slots=1, time_scale=1000.0, overhead_s=0.0)
    with FakeOpenAIServer(vllm=cfg) as srv:
        eng = build_engine(http_config(srv), None)
        async with eng:
            resps = await eng.complete([ChatRequest(messages=({"role": "user", "content": f"{PROMPT} {i}"},),
                                                    routing_key="plan-7" if i else None, tag="fc.user")
                                        for i in range(3)])
        assert all(r.ok for r in resps)
        log = srv.sim_stats()["log"]
    assert sorted(k for k, *_ in log) == ["", "plan-7", "plan-7"]
    assert all(t == "fc.user" and a <= s < d for _k, t, a, s, d in log)
    # one slot: the three requests ran one after another, so two of them waited in the queue
    starts = sorted(s for *_x, s, _d in log)
    ends = sorted(d for *_x, d in log)
    assert all(s >= e - 1e-9 for s, e in zip(starts[1:], ends))
