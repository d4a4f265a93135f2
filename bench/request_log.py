"""What the per-item request log costs: CPU per request with it and without, side by side in one process.

An FC-like workload through the real engine (cache on, a backend that answers at once, so the
client's own work is all there is): items of 8 agent turns, each turn the whole history (a Russian
system prompt, growing user/assistant/tool messages) with 6 tool schemas, as `fc.dialogues` sends
them. Rounds alternate log on / log off (the same items, fresh caches, so every request is fresh);
each writes its rows through the runner's shard writer every 64 items — with the log that includes
the sidecar and the body store's flush. Reported: CPU seconds (`time.process_time`) per request and
the ratio, the median over rounds; the bytes the log added (sidecar + `requests.sqlite`).

    .venv/bin/python bench/request_log.py --items 300 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TURNS = 8
CHUNK = 64


def tools() -> tuple[dict, ...]:
    out = []
    for t in range(6):
        props = {f"param_{p}": {"type": "string", "description": f"Параметр {p} инструмента {t}: город, дата или имя"}
                 for p in range(5)}
        out.append({"type": "function", "function": {"name": f"tool_{t}", "description": "Ищет рейсы, отели и "
                    "погоду по запросу пользователя; возвращает список вариантов" * 2,
                    "parameters": {"type": "object", "properties": props, "required": ["param_0"]}}})
    return tuple(out)


class Instant:
    """A backend that answers every request at once (what is measured is the client)."""

    name = "bench"
    capacity = 256

    async def send(self, request):  # noqa: ANN001, ANN201
        from fabrika.llm.types import ChatResponse, Choice, Usage

        return ChatResponse(choices=(Choice(content="Хорошо, ищу варианты для вас. " * 6),),
                            usage=Usage(300, 40), model="m", backend=self.name)

    async def aclose(self) -> None:
        return None


async def one_round(work: Path, items: int, log: bool) -> tuple[float, int, int]:
    from fabrika.llm.cache import ResponseCache
    from fabrika.llm.engine import LLMEngine
    from fabrika.llm.types import ChatRequest
    from fabrika.pipeline.llm_wrap import ITEM_STATE, ItemState, LLMCounters, StageLLM
    from fabrika.pipeline.request_log import attach
    from fabrika.store.requests import RequestBodies
    from fabrika.store.shards import write_shard

    engine = LLMEngine(Instant(), cache=ResponseCache(work / "cache.sqlite"))  # type: ignore[arg-type]
    llm = StageLLM(engine, "fc.dialogues", LLMCounters())
    bodies = RequestBodies.for_run(work) if log else None
    tool_list = tools()
    system = {"role": "system", "content": "Ты — помощник туристического агентства. Отвечай по-русски, "
              "вежливо и кратко; вызывай инструменты, когда нужны данные. " * 4}
    requests = 0

    async def item(i: int) -> list[dict]:
        nonlocal requests
        state = ItemState()
        if bodies is not None:
            state.requests, state.bodies = [], bodies
        ITEM_STATE.set(state)
        history: list[dict] = [system]
        for turn in range(TURNS):
            history.append({"role": "user", "content": f"Эпизод {i}, ход {turn}: найди рейс из Москвы в Казань "
                            "на выходные и отель рядом с центром, бюджет до двадцати тысяч."})
            resp = await llm.complete_one(ChatRequest(messages=tuple(history), tools=tool_list, tag="fc.assistant",
                                                      routing_key=f"ep-{i}"))
            history.append({"role": "assistant", "content": resp.text})
            requests += 1
        rows = [{"id": f"dlg-{i:06d}", "input_id": f"plan-{i:06d}", "status": "ok", "turns": TURNS}]
        attach(rows, state)
        return rows

    stage_dir = work / "stages" / "fc.dialogues"
    t0 = time.process_time()
    pending: list[dict] = []
    for start in range(0, items, CHUNK):
        for rows in await asyncio.gather(*(item(i) for i in range(start, min(items, start + CHUNK)))):
            pending.extend(rows)
        if bodies is not None:
            bodies.flush()
        write_shard(stage_dir, pending)
        pending = []
    engine.flush()
    cpu = time.process_time() - t0
    if bodies is not None:
        bodies.release()
    await engine.aclose()
    added = sum(p.stat().st_size for p in (stage_dir / "requests").glob("*.parquet")) if log else 0
    added += sum(p.stat().st_size for p in work.glob("requests.sqlite*"))
    return cpu, requests, added


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4, help="Rounds per mode, alternated (log on, off, on, off…).")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fabrika-bench-reqlog-"))
    per: dict[bool, list[float]] = {True: [], False: []}
    size = 0
    try:
        for r in range(args.rounds):
            for log in (True, False):
                work = root / f"r{r}-{int(log)}"
                cpu, requests, added = asyncio.run(one_round(work, args.items, log))
                per[log].append(cpu / requests * 1000)
                size = max(size, added)
                print(f"round {r + 1}, log {'on ' if log else 'off'}: {cpu:.2f} s CPU for {requests} requests = "
                      f"{cpu / requests * 1000:.3f} ms/request")
                shutil.rmtree(work, ignore_errors=True)
        on, off = statistics.median(per[True]), statistics.median(per[False])
        print(f"median CPU per request: log on {on:.3f} ms, off {off:.3f} ms: +{on - off:.3f} ms "
              f"= {on / off:.2f}x; the log added {size / 1e6:.2f} MB for {args.items} items "
              f"({size / args.items / 1e3:.1f} KB per item of {TURNS} requests)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
