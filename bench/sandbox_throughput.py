"""Verifier throughput: the sandbox pool vs unsafe in-process exec vs a fresh interpreter per call.

Run: ``.venv/bin/python bench/sandbox_throughput.py [--responses 20000] [--workers N] [--sizes 1,3,10,30]
[--mix] [--tmp-venv]``

``--tmp-venv`` first creates a venv under /tmp (its site-packages linked to this one's by a
``.pth`` file) and re-runs the bench with that interpreter: the sandbox must work with the
Python installation under /tmp (each child mounts a fresh /tmp of its own).

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
* ``sizes``       — per batch size B (one verifier, B responses: one isolated call): calls/s
                    (responses/s) of the pool (concurrent calls on all workers) against unsafe
                    exec per batch (exec once, B calls), and the fixed cost of one isolated
                    batch (intercept of ms per batch over B, one worker, back to back).
* ``mix``         — the IF demo's real mix of sandbox calls (recorded from an in-process run of
                    configs/if_demo.yaml), replayed as the pipeline issues them (concurrently)
                    against unsafe exec per call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def bench_exec_batches(items: list[str], size: int) -> float:
    """Unsafe: per batch of ``size`` responses, exec the verifier once and call it ``size`` times."""
    t0 = time.perf_counter()
    for i in range(0, len(items), size):
        ns: dict = {}
        exec(CODE, ns)  # noqa: S102 - the unsafe baseline
        for r in items[i:i + size]:
            ns["evaluate"](r)
    return len(items) / (time.perf_counter() - t0)


async def bench_pool_sizes(sizes: list[int], workers: int, n_calls: int) -> dict[int, float]:
    """Responses per second of the pool with ``n_calls`` concurrent calls of each batch size."""
    out = {}
    async with SandboxPool(SandboxConfig(workers=workers)) as pool:
        await asyncio.gather(*(pool.run(CODE, ["прогрев"]) for _ in range(workers)))
        for size in sizes:
            items = responses(size * n_calls)
            t0 = time.perf_counter()
            await asyncio.gather(*(pool.run(CODE, items[i:i + size]) for i in range(0, len(items), size)))
            out[size] = len(items) / (time.perf_counter() - t0)
    return out


def fixed_cost(sizes: list[int], n: int) -> dict[int, float]:
    """Milliseconds per isolated batch of each size, one worker, back to back (median of ``n``)."""
    out = {}
    with SandboxPool(SandboxConfig(workers=1)) as pool:
        pool.run_sync(CODE, ["прогрев"])
        for size in sizes:
            items = responses(size)
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                pool.run_sync(CODE, items)
                times.append(time.perf_counter() - t0)
            out[size] = sorted(times)[len(times) // 2] * 1000
    return out


def record_mix(config: Path) -> list[tuple[str, list]]:
    """Every ``(code, responses)`` the pipeline's sandbox pools ran during an in-process run of ``config``."""
    from fabrika.pipeline.config import load_config
    from fabrika.pipeline.runner import run_pipeline

    calls: list[tuple[str, list]] = []
    real_run = SandboxPool.run

    async def recording_run(self, code, resp):  # type: ignore[no-untyped-def]
        calls.append((code, list(resp)))
        return await real_run(self, code, resp)

    SandboxPool.run = recording_run  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory(prefix="fabrika-mix-") as tmp:
            cfg = load_config(config, [f"run_dir={tmp}/run"])
            run_pipeline(cfg, resume=False, progress=False)
    finally:
        SandboxPool.run = real_run  # type: ignore[method-assign]
    return calls


async def replay_pool(calls: list[tuple[str, list]], workers: int) -> float:
    async with SandboxPool(SandboxConfig(workers=workers)) as pool:
        await asyncio.gather(*(pool.run(CODE, ["прогрев"]) for _ in range(workers)))
        t0 = time.perf_counter()
        await asyncio.gather(*(pool.run(code, resp) for code, resp in calls))
        return sum(len(r) for _, r in calls) / (time.perf_counter() - t0)


def replay_exec(calls: list[tuple[str, list]]) -> float:
    """Unsafe: exec each call's verifier once, then evaluate its responses (exceptions swallowed)."""
    t0 = time.perf_counter()
    for code, resp in calls:
        ns: dict = {}
        try:
            exec(code, ns)  # noqa: S102 - the unsafe baseline
        except Exception:  # noqa: BLE001
            continue
        for r in resp:
            try:
                ns["evaluate"](r)
            except Exception:  # noqa: BLE001
                pass
    return sum(len(r) for _, r in calls) / (time.perf_counter() - t0)


def tmp_venv_python() -> str:
    """A venv under /tmp with this interpreter's site-packages linked in (``.pth``)."""
    root = Path(tempfile.mkdtemp(prefix="fabrika-bench-venv-", dir="/tmp")) / ".venv"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(root)], check=True)
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (root / "lib" / pyver / "site-packages" / "parent_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return str(root / "bin" / "python")


def main() -> None:
    if "--tmp-venv" in sys.argv:
        python = tmp_venv_python()
        argv = [a for a in sys.argv if a != "--tmp-venv"]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        print(f"re-running under {python} (sys.prefix under /tmp)", flush=True)
        sys.exit(subprocess.run([python, *argv], env=env, check=False).returncode)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tmp-venv", action="store_true", help="run under a venv created under /tmp")
    parser.add_argument("--sizes", default="1,3,10,30", help="batch sizes for the sizes table")
    parser.add_argument("--size-calls", type=int, default=300, help="concurrent calls per batch size")
    parser.add_argument("--mix", action="store_true", help="also replay the IF demo's real mix of sandbox calls")
    parser.add_argument("--mix-config", type=Path,
                        default=Path(__file__).resolve().parents[1] / "configs" / "if_demo.yaml")
    parser.add_argument("--responses", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batch", type=int, default=256, help="responses per pool.run call")
    parser.add_argument("--fresh", type=int, default=30, help="calls measured for the fresh-interpreter mode")
    parser.add_argument("--batches", type=int, default=200, help="one-response batches timed for the batch cost")
    args = parser.parse_args()
    items = responses(args.responses)
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"python={sys.executable} prefix={sys.prefix}")

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

    pool_by_size = asyncio.run(bench_pool_sizes(sizes, args.workers, args.size_calls))
    ms_by_size = fixed_cost(sizes, max(20, args.batches // 4))
    lo, hi = min(sizes), max(sizes)
    per_response = (ms_by_size[hi] - ms_by_size[lo]) / (hi - lo) if hi > lo else 0.0
    fixed = ms_by_size[lo] - per_response * lo
    print(f"\n{'batch':>6}{'pool calls/s':>14}{'exec calls/s':>14}{'pool/exec':>11}{'ms/batch (1 worker)':>21}")
    for size in sizes:
        ex = bench_exec_batches(responses(size * args.size_calls), size)
        print(f"{size:>6}{pool_by_size[size]:>14,.0f}{ex:>14,.0f}{pool_by_size[size] / ex:>10.3f}x{ms_by_size[size]:>21.2f}")
    print(f"fixed cost of one isolated batch = {fixed:.2f} ms (intercept over sizes {lo}..{hi}; goal <= 3 ms), "
          f"{per_response * 1000:.0f} µs per response")

    if args.mix:
        calls = record_mix(args.mix_config)
        sizes_seen = sorted(len(r) for _, r in calls)
        pool_rate = asyncio.run(replay_pool(calls, args.workers))
        exec_rate = replay_exec(calls)
        print(f"\nreal mix ({args.mix_config.name}): {len(calls)} sandbox calls, {sum(sizes_seen)} responses, "
              f"median batch {sizes_seen[len(sizes_seen) // 2]}, max {sizes_seen[-1]}")
        print(f"pool {pool_rate:,.0f} calls/s, exec {exec_rate:,.0f} calls/s, pool/exec = {pool_rate / exec_rate:.3f}x")


if __name__ == "__main__":
    main()
