"""``ctx.map_cpu`` on the Ray worker actors: the per-row CPU part of a driver-run stage (``executor: ray``).

A global stage (``filter.dedup``) runs in the driver because it needs every row at once, but its
per-row work (MinHash signatures) is a pure function of one row. :class:`RayCpuMapper` sends that
function, **by name** (:class:`fabrika.pipeline.cpu_map.CpuFunction`), with chunks of the items to
the run's worker pool (:class:`fabrika.ray.items.WorkerPool`, the actors the per-item stages use; no
second pool). Chunks are sized like item batches (:class:`fabrika.ray.items.BatchSizer`: from
``ray.batch_size`` grown to about ``ray.batch_seconds`` of worker time), ``ray.batches_in_flight``
per actor, each to the least busy actor. A chunk is a pure function of its items, so a worker that
dies mid-chunk is simply restarted by Ray and the chunk re-run (``ray.max_retries``); the results are
put back in input order. A function the worker cannot import fails the map with one line naming it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from fabrika.pipeline.cpu_map import CpuFunction, NotImportableError
from fabrika.pipeline.progress import phase
from fabrika.ray.items import BatchSizer

if TYPE_CHECKING:
    from fabrika.pipeline.sections import RaySettings
    from fabrika.ray.items import WorkerPool


class RayCpuMapper:
    """A context's ``cpu_mapper`` under ``executor: ray``.

    Args:
        pool: the run's worker pool and whether this call started it (:func:`fabrika.ray.items.worker_pool`).
        settings: ``ray:`` (chunk sizing, in-flight window).
        report: where the map's facts go (``cpu_map.<label>`` of the stage's report).
    """

    def __init__(self, pool: Callable[[], "tuple[WorkerPool, bool]"], settings: "RaySettings",
                 report: Callable[[str, dict[str, Any]], None]) -> None:
        self._pool = pool
        self.settings = settings
        self._report = report

    async def __call__(self, func: CpuFunction, items: Sequence[Any], label: str) -> list[Any]:
        started = time.monotonic()
        facts: dict[str, Any] = {"on": "ray workers", "items": len(items), "chunks": 0}
        if not items:
            self._report(label, facts)
            return []
        pool, created = self._pool()
        if created:
            t0 = time.monotonic()
            await asyncio.to_thread(pool.wait_ready)
            facts["ray_pool_start_s"] = round(time.monotonic() - t0, 2)
        sizer = BatchSizer(self.settings, pool.size, len(items))
        out: list[Any] = [None] * len(items)
        in_flight: dict[asyncio.Future, tuple[int, int, int]] = {}  # chunk -> (actor, start, end)
        pids: set[tuple[str, int]] = set()
        restarted: set[tuple[str, int]] = set()
        after_restart = 0
        worker_seconds = 0.0
        chunk_rows: list[int] = []
        nxt = done = 0
        try:
            while nxt < len(items) or in_flight:
                while nxt < len(items) and len(in_flight) < pool.size * self.settings.batches_in_flight:
                    end = min(len(items), nxt + sizer.size)
                    w = pool.least_busy()
                    pool.load[w] += 1
                    ref = pool.actors[w].map_chunk.remote(func, list(items[nxt:end]))
                    in_flight[asyncio.ensure_future(ref)] = (w, nxt, end)
                    chunk_rows.append(end - nxt)
                    nxt = end
                finished, _ = await asyncio.wait(list(in_flight), return_when=asyncio.FIRST_COMPLETED)
                for fut in finished:
                    w, start, end = in_flight.pop(fut)
                    pool.load[w] -= 1
                    result = fut.result()  # a chunk that failed past max_retries fails the stage
                    if "error" in result:
                        raise NotImportableError(result["error"])
                    out[start:end] = result["results"]
                    sizer.record(end - start, result["seconds"])
                    worker_seconds += result["seconds"]
                    proc = (result["node"], result["pid"])
                    pids.add(proc)
                    if result["restarted"] and (proc in restarted or proc not in pool.processes):
                        restarted.add(proc)  # Ray restarted a dead worker during this map; its chunks were re-run
                        after_restart += 1
                    pool.processes.add(proc)
                    done += end - start
                    phase(label, done, len(items))
        finally:
            for fut, (w, _s, _e) in in_flight.items():
                fut.cancel()
                pool.load[w] -= 1
        facts.update(chunks=len(chunk_rows), chunk_rows={"first": chunk_rows[0], "max": max(chunk_rows)},
                     worker_processes=len(pids), worker_restarts=len(restarted), chunks_after_restart=after_restart,
                     seconds=round(time.monotonic() - started, 3), worker_seconds=round(worker_seconds, 3))
        self._report(label, facts)
        return out


__all__ = ["RayCpuMapper"]
