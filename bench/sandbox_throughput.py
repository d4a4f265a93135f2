"""Verifier throughput: the sandbox pool vs unsafe in-process exec vs a fresh interpreter per call.

Run: ``.venv/bin/python bench/sandbox_throughput.py [--responses 20000] [--workers N]``

Modes, all on the same Russian IF-style verifier and responses:

* ``pool``        — fabrika.sandbox.SandboxPool (bwrap when available), default config:
                    a zygote per worker forks a fresh child per verifier batch; responses
                    sent as concurrent ``run`` calls of ``--batch`` responses each.
* ``batch cost``  — sequential one-response ``run`` calls on one worker: the price of a
                    verifier batch (round trip + fork + uid drop/rlimits + compile + module body).
* ``exec/call``   — unsafe: ``exec(code)`` then ``evaluate(r)`` in this process, per call
                    (what a naive pipeline does for each (verifier, response) pair).
* ``exec/once``   — unsafe: compiled and exec'd once, then only ``evaluate(r)`` per call
                    (the floor: a plain Python function call).
* ``fresh``       — a new ``python -c`` interpreter per call (no isolation, just a process).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

from fabrika.sandbox import SandboxConfig, SandboxPool

CODE = '''
import re

WORD = re.compile(r"[а-яёА-ЯЁa-zA-Z]+")

def evaluate(response):
    words = WORD.findall(response)
    return 5 <= len(words) <= 40 and "пожалуйста" not in response.lower()
'''

SAMPLES = [
    "Конечно! Вот краткий ответ на ваш вопрос о погоде в Москве.",
    "Нет.",
    "Пожалуйста, уточните, что именно вы хотите узнать о налогах.",
    "Список: первое, второе, третье, четвёртое и пятое.",
]


def responses(n: int) -> list[str]:
    return [f"{SAMPLES[i % len(SAMPLES)]} {i}" for i in range(n)]


def bench_exec_per_call(items: list[str]) -> tuple[float, list[bool]]:
    t0 = time.perf_counter()
    out = []
    for r in items:
        ns: dict = {}
        exec(CODE, ns)  # noqa: S102 - the unsafe baseline
        out.append(ns["evaluate"](r))
    return len(items) / (time.perf_counter() - t0), out


def bench_exec_once(items: list[str]) -> float:
    ns: dict = {}
    exec(CODE, ns)  # noqa: S102
    fn = ns["evaluate"]
    t0 = time.perf_counter()
    for r in items:
        fn(r)
    return len(items) / (time.perf_counter() - t0)


def bench_fresh(items: list[str]) -> float:
    t0 = time.perf_counter()
    for r in items:
        subprocess.run([sys.executable, "-c", CODE + f"\nprint(evaluate({r!r}))"], check=True, capture_output=True)
    return len(items) / (time.perf_counter() - t0)


async def bench_pool(items: list[str], workers: int, batch: int) -> tuple[float, list[bool | None], str, int]:
    config = SandboxConfig(workers=workers)
    async with SandboxPool(config) as pool:
        await pool.run(CODE, items[:workers])  # start the workers: steady-state throughput
        t0 = time.perf_counter()
        chunks = [items[i:i + batch] for i in range(0, len(items), batch)]
        results = await asyncio.gather(*(pool.run(CODE, chunk) for chunk in chunks))
        rate = len(items) / (time.perf_counter() - t0)
        return rate, [v.value for chunk in results for v in chunk], pool.isolation, pool.stats["spawned"]


def bench_batch_cost(n: int) -> tuple[float, float, float]:
    """Milliseconds per one-response batch back to back, with 20 ms of idle time between batches
    (when the zygote's spare child has warmed up), and per 256-response batch."""
    with SandboxPool(SandboxConfig(workers=1)) as pool:
        pool.run_sync(CODE, ["прогрев"])
        t0 = time.perf_counter()
        for i in range(n):
            pool.run_sync(CODE, [SAMPLES[i % len(SAMPLES)]])
        back_to_back = (time.perf_counter() - t0) / n * 1000
        spent = 0.0
        for i in range(n // 2):
            time.sleep(0.02)
            t0 = time.perf_counter()
            pool.run_sync(CODE, [SAMPLES[i % len(SAMPLES)]])
            spent += time.perf_counter() - t0
        idle = spent / (n // 2) * 1000
        items = responses(256)
        t0 = time.perf_counter()
        for _ in range(max(1, n // 10)):
            pool.run_sync(CODE, items)
        full = (time.perf_counter() - t0) / max(1, n // 10) * 1000
    return back_to_back, idle, full


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batch", type=int, default=256, help="responses per pool.run call")
    parser.add_argument("--fresh", type=int, default=30, help="calls measured for the fresh-interpreter mode")
    parser.add_argument("--batches", type=int, default=200, help="one-response batches timed for the batch cost")
    args = parser.parse_args()
    items = responses(args.responses)

    pool_rate, pool_out, isolation, spawned = asyncio.run(bench_pool(items, args.workers, args.batch))
    exec_rate, exec_out = bench_exec_per_call(items)
    once_rate = bench_exec_once(items)
    fresh_rate = bench_fresh(items[: args.fresh])
    one_ms, idle_ms, full_ms = bench_batch_cost(args.batches)
    assert pool_out == exec_out, "the pool and in-process exec disagree"

    print(f"responses={args.responses} workers={args.workers} batch={args.batch} cpus={os.cpu_count()} "
          f"isolation={isolation} worker_starts={spawned}")
    print(f"{'mode':<12}{'calls/s':>12}")
    for name, rate in [("pool", pool_rate), ("exec/call", exec_rate), ("exec/once", once_rate), ("fresh", fresh_rate)]:
        print(f"{name:<12}{rate:>12,.0f}")
    print(f"pool / exec-per-call     = {pool_rate / exec_rate:.2f}x   (goal >= 0.25x)")
    print(f"pool / exec-once         = {pool_rate / once_rate:.3f}x  (plain function call, no isolation)")
    print(f"pool / fresh interpreter = {pool_rate / fresh_rate:,.0f}x   (goal >= 100x)")
    print(f"cost per verifier batch  = {one_ms:.2f} ms back to back, {idle_ms:.2f} ms with 20 ms idle between "
          "(1 response: round trip + fork + uid/rlimits + compile, one worker)")
    print(f"256-response batch       = {full_ms:.2f} ms  ({full_ms / 256 * 1000:.0f} µs per response incl. its share of the fork)")


if __name__ == "__main__":
    main()
