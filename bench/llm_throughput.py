"""LLM throughput bench: fabrika's engine against raw clients, one run, side by side.

Clients, each sending the same chat-completion JSON (distinct prompts) to the
fake OpenAI server running in a SUBPROCESS (so its CPU is measured apart):

* ``fabrika``          — ``LLMEngine`` (aiohttp transport) with cache (temp dir) and accounting ON;
* ``fabrika-sdk``      — the same engine on the ``openai_sdk`` transport;
* ``raw-aiohttp``      — a bare ``aiohttp`` loop: POST, read JSON;
* ``openai-httpx``     — bare ``openai.AsyncOpenAI`` with its default httpx transport;
* ``openai-aiohttp``   — bare ``openai.AsyncOpenAI`` with ``DefaultAioHttpClient``.

Run::

    .venv/bin/python bench/llm_throughput.py                 # 2,000 requests, c=64/256, latency 0/200 ms
    .venv/bin/python bench/llm_throughput.py --requests 500 --concurrency 256 --latency-ms 200

Ratios printed: fabrika / raw-aiohttp and fabrika / 430 req/s (the fastest
existing framework's figure at concurrency 256, 200 ms latency).
Goal at 256 / 200 ms: ≥ 0.7× raw aiohttp and ≥ 1.5× 430.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import openai
import psutil

import fabrika.llm  # noqa: F401 - imported up front so import time is not billed to the first cell

REFERENCE_RPS = 430.0


def start_server(latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "fabrika.testing.fake_server", "--port", "0",
                             "--latency-ms", str(latency_ms)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}/v1"


def bodies(n: int, salt: str) -> list[dict[str, Any]]:
    return [{"model": "fake", "messages": [{"role": "user", "content": f"Вопрос {salt}-{i}: как дела?"}]}
            for i in range(n)]


async def _pool(concurrency: int, items: list[Any], fn: Callable[[Any], Awaitable[bool]]) -> int:
    it = iter(items)
    ok = 0

    async def worker() -> None:
        nonlocal ok
        for item in it:
            good = await fn(item)  # await first: `ok += await ...` would read ok before awaiting
            ok += good

    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return ok


async def run_raw_aiohttp(base_url: str, concurrency: int, payloads: list[dict[str, Any]]) -> int:
    import aiohttp

    url = base_url + "/chat/completions"
    headers = {"Authorization": "Bearer x", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(body: dict[str, Any]) -> bool:
            async with session.post(url, data=json.dumps(body, ensure_ascii=False).encode(), headers=headers) as r:
                data = await r.json()
                return r.status == 200 and bool(data["choices"])

        return await _pool(concurrency, payloads, one)


async def run_openai(base_url: str, concurrency: int, payloads: list[dict[str, Any]], aio: bool) -> int:
    kwargs: dict[str, Any] = {"http_client": openai.DefaultAioHttpClient()} if aio else {}
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, **kwargs)

    async def one(body: dict[str, Any]) -> bool:
        r = await client.chat.completions.create(**body)
        return bool(r.choices)

    try:
        return await _pool(concurrency, payloads, one)
    finally:
        await client.close()


async def run_fabrika(base_url: str, concurrency: int, payloads: list[dict[str, Any]], transport: str) -> int:
    from fabrika.llm import ChatRequest, LLMConfig, build_engine

    with tempfile.TemporaryDirectory() as tmp:
        cfg = LLMConfig(backend="openai", model="fake", transport=transport,
                        endpoints=[{"base_url": base_url, "api_key": "x", "max_concurrency": concurrency}],
                        cache={"enabled": True})
        engine = build_engine(cfg, Path(tmp))
        requests = [ChatRequest(messages=tuple(b["messages"]), tag="bench", meta={"stage": "bench"}) for b in payloads]
        async with engine:
            responses = await engine.complete(requests)
        totals = engine.accounting.totals()
        assert totals["requests"] == len(payloads), totals
        return sum(1 for r in responses if r.ok)


CLIENTS: dict[str, Callable[[str, int, list[dict[str, Any]]], Awaitable[int]]] = {
    "fabrika": lambda u, c, p: run_fabrika(u, c, p, "aiohttp"),
    "fabrika-sdk": lambda u, c, p: run_fabrika(u, c, p, "openai_sdk"),
    "raw-aiohttp": run_raw_aiohttp,
    "openai-httpx": lambda u, c, p: run_openai(u, c, p, aio=False),
    "openai-aiohttp": lambda u, c, p: run_openai(u, c, p, aio=True),
}


def measure(name: str, base_url: str, concurrency: int, n: int, server: psutil.Process) -> dict[str, Any]:
    payloads = bodies(n, f"{name}-{concurrency}-{time.time_ns()}")
    srv_before = sum(server.cpu_times()[:2])
    cpu_before = time.process_time()
    start = time.perf_counter()
    ok = asyncio.run(CLIENTS[name](base_url, concurrency, payloads))
    wall = time.perf_counter() - start
    return {"client": name, "concurrency": concurrency, "ok": ok, "wall_s": round(wall, 3),
            "rps": round(n / wall, 1), "client_cpu_s": round(time.process_time() - cpu_before, 2),
            "server_cpu_s": round(sum(server.cpu_times()[:2]) - srv_before, 2)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 200.0])
    ap.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=list(CLIENTS))
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally: stop the server
    try:
        rows = run_cells(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def run_cells(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    print(f"host: {psutil.cpu_count()} CPUs, load {psutil.getloadavg()[0]:.2f}; {args.requests} requests per cell")
    for latency in args.latency_ms:
        proc, base_url = start_server(latency)
        server = psutil.Process(proc.pid)
        try:
            asyncio.run(run_raw_aiohttp(base_url, 8, bodies(50, "warmup")))
            for c in args.concurrency:
                for name in args.clients:
                    row = measure(name, base_url, c, args.requests, server)
                    row["latency_ms"] = latency
                    rows.append(row)
                    print(f"  latency {latency:5.0f} ms  c={c:<4d} {name:15s} {row['rps']:8.1f} req/s  "
                          f"ok={row['ok']:<5d} client cpu {row['client_cpu_s']:6.2f}s  "
                          f"server cpu {row['server_cpu_s']:5.2f}s  wall {row['wall_s']:.2f}s", flush=True)
        finally:
            proc.terminate()
            proc.wait(5)

    print("\nratios (fabrika / raw-aiohttp, fabrika / 430 req/s):")
    for latency in args.latency_ms:
        for c in args.concurrency:
            cell = {r["client"]: r for r in rows if r["latency_ms"] == latency and r["concurrency"] == c}
            if "fabrika" in cell and "raw-aiohttp" in cell:
                fab = cell["fabrika"]["rps"]
                print(f"  latency {latency:5.0f} ms  c={c:<4d} fabrika {fab:8.1f}  "
                      f"x raw-aiohttp {fab / cell['raw-aiohttp']['rps']:.2f}  x 430 {fab / REFERENCE_RPS:.2f}")
    return rows


if __name__ == "__main__":
    main()
