"""Fleet bench: the FC pipeline on a simulated vLLM fleet — least-loaded vs prefix-affinity routing,
K sample requests vs one n=K request, and stages one after another vs overlapping (``--overlap both``).

A child process serves ``--servers`` fake OpenAI servers in vLLM mode
(:mod:`fabrika.testing.sim_vllm`: ``--slots`` sequence slots each, prefix cache,
answer times from the cost model) that answer every FC role with the sim
responders. For each routing mode a fresh fleet (empty caches) serves the FC
pipeline through the real runner and engine (openai backend, aiohttp, LLM cache
off): fc.tools → fc.tools_dedup → fc.plans → fc.dialogues → fc.samples. Endpoint
``max_concurrency`` is four times the slots and the engine's ``max_in_flight``
half the endpoints' sum, so each server keeps a queue (as a vLLM server does), the
client's slot pool never fills, and the routing policy — not whichever slot freed
first — decides placement.

Then the *samples* scenario: ``--prompts`` prompts × ``--k`` samples each (as IF
verifiers or difficulty pass rates ask) through the engine, with
``llm.group_samples`` off (K requests) and on (n=K).

Per configuration it prints: makespan (simulated seconds, first arrival to last
answer across the fleet), ideal makespan (total slot-seconds of work ÷ all slots),
utilisation (busy slot-seconds ÷ slots × makespan per server: mean, min; and the
mean over the steady part, 10%–90% of the makespan), prompt tokens prefilled vs
served from the prefix cache, and the ratios; plus whether the datasets of the
two routing modes are equal.

    .venv/bin/python bench/fleet.py --servers 4 --slots 64 --topics 100
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NOUNS = ["Доставка", "Бронирование", "Ремонт", "Аренда", "Запись", "Оплата", "Обучение", "Страхование"]
FC_TAGS = ["fc.tools", "fc.planner", "fc.judge", "fc.user", "fc.tool", "fc.assistant"]


def serve(n: int, slots: int, time_scale: float) -> None:
    """Child: ``n`` vLLM-mode fake servers; FC roles answered by the sim responders."""
    from fabrika.generators.fc import sim_responders as sr
    from fabrika.llm.types import ChatRequest, Choice
    from fabrika.schemas.ids import derive_seed
    from fabrika.testing import FakeOpenAIServer, SimVLLMConfig

    def wrap(tag: str, fn):  # noqa: ANN001, ANN202
        def responder(req: dict) -> object:
            request = ChatRequest(messages=tuple(req["messages"]), tools=tuple(req.get("tools") or ()) or None,
                                  tag=tag, meta={"sim_error_rate": 0.1})
            out = fn(request, random.Random(derive_seed(tag, req["messages"], req.get("seed"))))
            if isinstance(out, Choice):
                if out.tool_calls:
                    return {"tool_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in out.tool_calls]}
                return out.content or ""
            return out
        return responder

    ports = []
    cfg = SimVLLMConfig(slots=slots, time_scale=time_scale)
    for _ in range(n):
        srv = FakeOpenAIServer(vllm=cfg)
        for tag in FC_TAGS:
            srv.script(tag=tag, responder=wrap(tag, sr.RESPONDERS[tag]))
        srv.app.record_limit = 0
        srv.start()
        ports.append(srv.port)
    print("READY " + " ".join(map(str, ports)), flush=True)
    threading.Event().wait()


class Fleet:
    """The server child: start, read its ports, fetch stats, stop."""

    def __init__(self, servers: int, slots: int, time_scale: float) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(servers), str(slots), str(time_scale)],
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("READY"):
            raise SystemExit(f"fleet did not start: {line!r}")
        self.urls = [f"http://127.0.0.1:{p}/v1" for p in line.split()[1:]]

    def stats(self) -> list[dict]:
        out = []
        for u in self.urls:
            with urllib.request.urlopen(u + "/stats", timeout=10) as resp:
                out.append(json.loads(resp.read()))
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def summarise(stats: list[dict]) -> dict:
    start = min(s["first_arrival"] for s in stats if s["first_arrival"] >= 0)
    end = max(s["last_done"] for s in stats)
    makespan = end - start
    slots = sum(s["slots"] for s in stats)
    work = sum(s["busy_slot_s"] for s in stats)
    util = [s["busy_slot_s"] / (s["slots"] * makespan) for s in stats]
    steady = []
    lo, hi = start + 0.1 * makespan, start + 0.9 * makespan
    for s in stats:  # whole buckets inside the window only
        b = s["bucket_s"]
        inside = [v for i, v in s["timeline"].items() if lo <= int(i) * b and (int(i) + 1) * b <= hi]
        first, last = int(-(-lo // b)), int(hi // b)  # buckets with no work count as idle
        steady.append(sum(inside) / (s["slots"] * b * max(1, last - first)))
    prefilled = sum(s["prompt_tokens_prefilled"] for s in stats)
    cached = sum(s["prompt_tokens_cached"] for s in stats)
    return {"makespan_s": makespan, "ideal_s": work / slots, "util_mean": sum(util) / len(util), "util_min": min(util),
            "steady_util_mean": sum(steady) / len(steady), "prefilled": prefilled, "cached": cached,
            "requests": sum(s["requests"] for s in stats), "sequences": sum(s["sequences"] for s in stats),
            "prompt_tokens": sum(s["prompt_tokens"] for s in stats)}


def fc_run(urls: list[str], routing: str, topics: int, plans: int, per_endpoint: int, workdir: Path,
           epsilon: float = 0.25, overlap: bool = False, chunk_size: int = 256) -> str:
    """The FC pipeline against ``urls``; returns a hash of the dataset's content (order-independent)."""

    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store.run import RunStore

    topics_file = workdir / "topics.jsonl"
    with topics_file.open("w", encoding="utf-8") as f:
        for i in range(topics):
            noun = NOUNS[i % len(NOUNS)]
            f.write(json.dumps({"id": f"topic-{i}", "topic": f"{noun} номер {i}", "lang": "ru",
                                "description": f"{noun}: услуги и заказы, раздел {i}",
                                "keywords": [f"{noun.lower()}{i}"]}, ensure_ascii=False) + "\n")
    total = per_endpoint * len(urls) // 2  # the pool never fills: the routing policy decides placement
    doc = {
        "name": "fleet", "seed": 1, "run_dir": str(workdir / "run"), "max_in_flight": total, "overlap": overlap,
        "plugins": ["fabrika.generators.fc.stages"],
        "llm": {"backend": "openai", "model": "fake", "max_in_flight": total, "max_retries": 2, "routing": routing,
                "routing_epsilon": epsilon,
                "timeout_s": 600.0, "probe": False,
                "endpoints": [{"base_url": u, "max_concurrency": per_endpoint} for u in urls],
                "cache": {"enabled": False}},
        "stages": [
            {"kind": "fc.tools", "topics_file": str(topics_file), "tools_per_topic": 3},
            {"kind": "fc.tools_dedup", "input": "fc.tools"},
            {"kind": "fc.plans", "input": "fc.tools_dedup", "plans_per_topic": plans, "chunk_size": chunk_size},
            {"kind": "fc.dialogues", "input": "fc.plans", "sim_error_rate": 0.1, "chunk_size": chunk_size},
            {"kind": "fc.samples", "input": "fc.dialogues", "chunk_size": chunk_size},
        ],
        "dataset": {"stages": ["fc.samples"]},
    }
    config, issues = validate_data(doc, "bench", workdir)
    if config is None:
        raise SystemExit("\n".join(str(i) for i in issues))
    result = run_pipeline(config, resume=True, progress=False)
    if not result.complete:
        raise SystemExit(f"FC run ({routing}) did not finish: {result.problems}")
    frame = RunStore(workdir / "run").scan_raw("fc.samples").collect()
    frame = frame.select(sorted(c for c in frame.columns if c not in ("created_at", "seconds"))).sort("id")
    return hashlib.sha256(frame.write_csv().encode("utf-8")).hexdigest()[:16]


async def samples_run(urls: list[str], group: bool, prompts: int, k: int, per_endpoint: int) -> None:
    from fabrika.llm import ChatRequest, LLMConfig, build_engine

    cfg = LLMConfig(backend="openai", model="fake", routing="affinity", group_samples=group, timeout_s=600.0,
                    max_in_flight=per_endpoint * len(urls) // 2, cache={"enabled": False},
                    endpoints=[{"base_url": u, "max_concurrency": per_endpoint} for u in urls])
    eng = build_engine(cfg, None)
    body = "Напиши функцию evaluate(response), которая проверяет, что ответ содержит ровно три абзаца. " * 6
    reqs = [ChatRequest(messages=({"role": "user", "content": f"Ограничение {p}. {body}"},), temperature=1.0,
                        seed=7, sample_index=i, tag="if.verifiers") for p in range(prompts) for i in range(k)]
    async with eng:
        resps = await eng.complete(reqs)
    bad = sum(1 for r in resps if not r.ok)
    if bad:
        raise SystemExit(f"samples run: {bad} failed requests")


def show(name: str, m: dict) -> None:
    print(f"{name:<26} makespan {m['makespan_s']:8.1f} s  ideal {m['ideal_s']:8.1f} s  "
          f"(x{m['makespan_s'] / m['ideal_s']:.2f})  util mean {m['util_mean']:.2f} min {m['util_min']:.2f} "
          f"steady {m['steady_util_mean']:.2f}  prompt tokens prefilled {m['prefilled']:>10,} cached "
          f"{m['cached']:>10,}  requests {m['requests']:,} sequences {m['sequences']:,}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--topics", type=int, default=100, help="FC topics (episodes = topics x plans)")
    ap.add_argument("--plans", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=256, help="samples scenario: distinct prompts")
    ap.add_argument("--k", type=int, default=8, help="samples scenario: samples per prompt")
    ap.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall second")
    ap.add_argument("--epsilon", type=float, default=0.25, help="affinity's load bound (llm.routing_epsilon)")
    ap.add_argument("--routings", nargs="+", default=["least_loaded", "affinity"],
                    choices=["least_loaded", "affinity"])
    ap.add_argument("--overlap", choices=["off", "on", "both"], default="off",
                    help="FC runs with stages one after another (off), overlapping (on), or both side by side")
    ap.add_argument("--chunk-size", type=int, default=256, help="FC stages' chunk_size (shard size: overlap's step)")
    ap.add_argument("--skip-samples", action="store_true", help="only the FC routing comparison")
    ap.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(int(args.serve[0]), int(args.serve[1]), float(args.serve[2]))
        return
    per_endpoint = 4 * args.slots
    results: dict[str, dict] = {}
    hashes: dict[str, str] = {}
    print(f"fleet: {args.servers} servers x {args.slots} slots, FC pipeline {args.topics} topics x {args.plans} "
          f"plans; endpoint max_concurrency {per_endpoint}; time scale {args.time_scale:g}", flush=True)
    overlaps = {"off": [False], "on": [True], "both": [False, True]}[args.overlap]
    for routing in args.routings:
        for overlap in overlaps:
            key = routing + (" +overlap" if overlap else "")
            fleet = Fleet(args.servers, args.slots, args.time_scale)
            try:
                t0 = time.perf_counter()
                with tempfile.TemporaryDirectory() as tmp:
                    hashes[key] = fc_run(fleet.urls, routing, args.topics, args.plans, per_endpoint, Path(tmp),
                                         args.epsilon, overlap, args.chunk_size)
                results[key] = summarise(fleet.stats())
                results[key]["wall_s"] = time.perf_counter() - t0
            finally:
                fleet.stop()
            show(f"FC {key}", results[key])
    for routing in args.routings:
        if routing in results and f"{routing} +overlap" in results:
            seq, ov = results[routing], results[f"{routing} +overlap"]
            print(f"{routing}: overlapping / sequential stages: makespan x{ov['makespan_s'] / seq['makespan_s']:.2f} "
                  f"(x{seq['makespan_s'] / seq['ideal_s']:.2f} -> x{ov['makespan_s'] / ov['ideal_s']:.2f} ideal), "
                  f"util mean {seq['util_mean']:.2f} -> {ov['util_mean']:.2f}; dataset equal: "
                  f"{hashes[routing] == hashes[routing + ' +overlap']} ({hashes[routing + ' +overlap']})", flush=True)
    if "least_loaded" in results and "affinity" in results:
        ll, af = results["least_loaded"], results["affinity"]
        print(f"affinity / least-loaded: cached prompt tokens x{af['cached'] / max(1, ll['cached']):.2f}, "
              f"prefilled x{af['prefilled'] / max(1, ll['prefilled']):.2f}, "
              f"makespan x{af['makespan_s'] / ll['makespan_s']:.2f}; "
              f"dataset equal: {hashes['least_loaded'] == hashes['affinity']} ({hashes['affinity']})", flush=True)
    for group in () if args.skip_samples else (False, True):
        fleet = Fleet(args.servers, args.slots, args.time_scale)
        try:
            asyncio.run(samples_run(fleet.urls, group, args.prompts, args.k, per_endpoint))
            m = summarise(fleet.stats())
        finally:
            fleet.stop()
        results[f"samples_n{'K' if group else '1'}"] = m
        show(f"samples {'n=K' if group else 'K requests'} (K={args.k})", m)
        per_prompt = m["prompt_tokens"] / m["requests"]
        print(f"  prompts prefilled per sample: {m['prefilled'] / per_prompt / m['sequences']:.3f}"
              f" (1/K = {1 / args.k:.3f})", flush=True)
    print("JSON " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
