"""Capacity-aware balancing bench: two endpoints of different size, same latency.

Two fake OpenAI servers in SUBPROCESSES (``python -m fabrika.testing.fake_server``),
one behind ``max_concurrency`` 48 and one behind 8, both answering after
``--latency-ms``. The ideal throughput is the sum of what each can do when kept
full: ``(48 + 8) / latency``. The engine (aiohttp transport, cache and
accounting on) sends ``--requests`` distinct prompts; the bench prints the
measured rate, the ratio to the ideal sum, and the peak in-flight per
endpoint it observed (sampled from the backend every 5 ms); and, side by side,
bare aiohttp loops that split the requests by capacity by hand (what a perfect
balancer gets on this box).

Run::

    .venv/bin/python bench/llm_hetero.py                      # 2,000 requests, 200 ms
    .venv/bin/python bench/llm_hetero.py --requests 4000 --latency-ms 100

Goal: ≥ 0.9× the ideal sum, each endpoint reaching its limit.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from fabrika.llm import ChatRequest, LLMConfig, build_engine


def start_server(latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "fabrika.testing.fake_server", "--port", "0",
                             "--latency-ms", str(latency_ms)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}/v1"


async def run(urls: list[str], limits: list[int], n: int) -> tuple[float, list[int], list[int], int]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = LLMConfig(backend="openai", model="fake", probe=False,
                        endpoints=[{"base_url": u, "max_concurrency": c} for u, c in zip(urls, limits)])
        engine = build_engine(cfg, Path(tmp))
        reqs = [ChatRequest(messages=({"role": "user", "content": f"Вопрос {i}-{time.time_ns()}"},), tag="bench")
                for i in range(n)]
        peaks = [0] * len(urls)
        stop = asyncio.Event()

        async def sample() -> None:
            while not stop.is_set():
                for i, load in enumerate(engine.backend.endpoint_load()):
                    peaks[i] = max(peaks[i], load)
                await asyncio.sleep(0.005)

        async with engine:
            sampler = asyncio.create_task(sample())
            start = time.perf_counter()
            resps = await engine.complete(reqs)
            wall = time.perf_counter() - start
            stop.set()
            await sampler
            served = [h["served"] for h in engine.stats()["endpoints"]]
        return wall, peaks, served, sum(r.ok for r in resps)


async def run_raw(urls: list[str], limits: list[int], n: int) -> float:
    """Bare aiohttp loops, one per endpoint with its own concurrency, requests split by capacity
    (the best a perfect balancer could do on this box): seconds for ``n`` requests."""
    import aiohttp

    total = sum(limits)
    shares = [n * c // total for c in limits]
    shares[0] += n - sum(shares)

    async def loop(session: aiohttp.ClientSession, url: str, conc: int, count: int) -> None:
        it = iter(range(count))

        async def worker() -> None:
            for i in it:
                body = {"model": "fake", "messages": [{"role": "user", "content": f"raw {i}-{time.time_ns()}"}]}
                async with session.post(url + "/chat/completions", json=body) as resp:
                    await resp.read()

        await asyncio.gather(*[worker() for _ in range(conc)])

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=total, limit_per_host=0)) as session:
        start = time.perf_counter()
        await asyncio.gather(*[loop(session, u, c, k) for u, c, k in zip(urls, limits, shares)])
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--limits", type=int, nargs=2, default=[48, 8])
    args = ap.parse_args(argv)
    procs = [start_server(args.latency_ms) for _ in args.limits]
    try:
        print(f"host: {psutil.cpu_count()} CPUs, load {psutil.getloadavg()[0]:.2f}; {args.requests} requests, "
              f"latency {args.latency_ms:g} ms, max_concurrency {args.limits}")
        urls = [u for _, u in procs]
        raw_wall = asyncio.run(run_raw(urls, args.limits, args.requests))
        wall, peaks, served, ok = asyncio.run(run(urls, args.limits, args.requests))
    finally:
        for p, _ in procs:
            p.terminate()
            p.wait(5)
    rps = args.requests / wall
    ideal = sum(args.limits) / (args.latency_ms / 1000.0)
    raw = args.requests / raw_wall
    print(f"  fabrika ok={ok}  {rps:.1f} req/s  ideal {ideal:.1f} req/s  x ideal {rps / ideal:.2f}")
    print(f"  raw aiohttp, split by capacity by hand: {raw:.1f} req/s  x ideal {raw / ideal:.2f}; "
          f"fabrika x raw {rps / raw:.2f}")
    print(f"  peak in flight per endpoint {peaks} (limits {args.limits}); served {served}")


if __name__ == "__main__":
    main()
