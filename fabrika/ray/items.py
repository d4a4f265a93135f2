"""Per-item CPU stages on Ray worker actors (``executor: ray``).

The driver streams the stage's input rows, skips ids already written (the same
:meth:`RunStore.done_ids` resume as a local run), groups the rest into batches of
``ray.batch_size`` and sends each batch to the least busy :class:`ItemWorker`. A
worker builds the stage once (its own sandbox pool, under the same fail-closed
rule, checked on its own node), runs ``process`` on the batch's items concurrently
and writes their rows as ONE shard, atomically, into the run directory (a path every
node must see). The shard's name is fixed by the driver before the batch is sent
(``part-<seq>-<digest of ids>``), so a batch retried after its worker died rewrites
the same file instead of adding a second copy of its rows. Only counters travel back.

A worker that dies (OOM, node lost, ``kill -9``) is restarted by Ray and its unfinished
batches are retried (``ray.max_retries``). A driver that dies takes its actors with it
(they are owned by the driver); the next ``fabrika run`` skips every id whose shard is on
disk and redoes the rest. So that an actor of a dead driver, still finishing a batch, cannot
add rows the new driver is already redoing, each driver writes a fresh token to
``stages/<stage>/.executor-owner`` before it reads what is done, and a worker writes its
shard only while the token is still its driver's.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NoReturn, Sequence

from fabrika.errors import ConfigError
from fabrika.pipeline.context import SharedContextParts
from fabrika.pipeline.execute import item_total, new_items, process_item
from fabrika.pipeline.stage import STAGES, Row, Stage, StageConfig
from fabrika.store.done_ids import DoneIds
from fabrika.store.shards import atomic_write_bytes, next_seq, write_shard

OWNER_FILE = ".executor-owner"


class StaleDriver(RuntimeError):
    """A worker's driver was replaced (it died and a new ``fabrika run`` took the stage over)."""

if TYPE_CHECKING:
    from fabrika.llm.base import LLMClient
    from fabrika.llm.types import ChatRequest, ChatResponse
    from fabrika.pipeline.config import PipelineConfig
    from fabrika.pipeline.execute import StageServices
    from fabrika.pipeline.outcome import StageStats
    from fabrika.pipeline.sections import RaySettings


class _NoLLM:
    """``ctx.llm`` on a worker: a stage that declares ``calls_llm = False`` must not reach for it."""

    def __init__(self, stage: str) -> None:
        self._stage = stage

    def _refuse(self, name: str) -> NoReturn:
        raise RuntimeError(f"stage {self._stage!r} declares calls_llm = False but used ctx.llm.{name}; "
                           "set calls_llm = True (it then runs in the driver)")

    def __getattr__(self, name: str) -> Any:
        self._refuse(name)

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self._refuse("complete")

    async def complete_one(self, request: ChatRequest) -> ChatResponse:
        self._refuse("complete_one")


class WorkerContext(SharedContextParts):
    """The :class:`~fabrika.pipeline.context.StageContext` of a stage running on a worker actor."""

    def __init__(self, pipeline: "PipelineConfig", stage: StageConfig, run_dir: Path, backend_name: str) -> None:
        self._stage = self.stage_name = stage.stage_name
        self.llm: LLMClient = _NoLLM(self._stage)
        self.seed = pipeline.seed
        self.run_dir = run_dir
        self.pipeline = pipeline
        self.backend_name = backend_name
        self.resources: dict[str, Any] = {}
        self.reported: dict[str, Any] = {}

    def iter_rows(self, stage_name: str, *, gated: bool = True, columns: list[str] | None = None) -> Iterator[Row]:
        raise RuntimeError(f"stage {self._stage!r}: a worker gets its rows from the driver; reading "
                           f"{stage_name!r} is only possible in the driver")



class ItemWorker:
    """One worker actor: a stage instance (and its sandbox pool) that processes batches of items."""

    def __init__(self, pipeline: "PipelineConfig", stage: StageConfig, run_dir: str, backend_name: str,
                 max_in_flight: int, owner: str) -> None:
        self.owner = owner
        from fabrika.pipeline import registry

        registry.load_modules(list(pipeline.plugins))
        registry.load_modules()
        self.backend_name = backend_name
        self.ctx = WorkerContext(pipeline, stage, Path(run_dir), backend_name)
        self.stage: Stage = STAGES[stage.kind](stage, self.ctx)
        self.max_in_flight = max_in_flight
        self._ready: asyncio.Task | None = None
        self.restarted = _actor_was_restarted()

    async def _setup(self) -> None:
        if getattr(type(self.stage), "uses_sandbox", False):
            from fabrika.sandbox.policy import isolation_problem

            problem = isolation_problem(self.ctx.pipeline.sandbox, self.backend_name)  # bwrap on THIS node
            if problem:
                raise ConfigError(f"ray worker on {os.uname().nodename}: {problem}")
        await self.stage.setup()

    def pid(self) -> int:
        return os.getpid()

    async def process_batch(self, seq: int, items: list[tuple[str, Row]]) -> dict[str, Any]:
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._setup())
        await asyncio.shield(self._ready)
        limit = asyncio.Semaphore(self.max_in_flight)

        async def one(item_id: str, row: Row) -> Any:
            async with limit:
                return await process_item(self.stage, row, item_id, self.backend_name)

        results = await asyncio.gather(*(one(i, r) for i, r in items))
        rows = [r for res in results if res.rows for r in res.rows]
        if rows:
            stage_dir = self.ctx.stage_dir(self.stage.name)
            current = (stage_dir / OWNER_FILE).read_text(encoding="utf-8") if (stage_dir / OWNER_FILE).exists() else ""
            if current != self.owner:
                raise StaleDriver(f"stage {self.stage.name!r} was taken over by another driver; batch {seq} dropped")
            # temp file + fsync + rename, off the event loop: the other batch keeps feeding the sandbox meanwhile
            await asyncio.to_thread(write_shard, stage_dir, rows, seq=seq)
        items_out = []
        for res in results:
            if res.rows is None:
                items_out.append((res.item_id, None, 0, res.state.pending is not None
                                  and res.state.pending.kind == "cache_miss", False))
            else:
                ok = sum(r["status"] == "ok" for r in res.rows)
                items_out.append((res.item_id, ok, len(res.rows) - ok, False, res.internal_error))
        return {"items": items_out, "rows": len(rows), "shard": bool(rows), "report": dict(self.ctx.reported),
                "pid": os.getpid(), "node": os.uname().nodename, "restarted": self.restarted}

    async def close(self) -> None:
        from fabrika.pipeline.lifecycle import close_resources

        if self._ready is not None and self._ready.done() and not self._ready.exception():
            await self.stage.teardown()
        await close_resources(self.ctx.resources)


def _actor_was_restarted() -> bool:
    """True inside a worker actor that Ray restarted after its process died (False outside an actor)."""
    try:
        import ray
    except ImportError:
        return False
    if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
        return False
    return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def _worker_count(ray: Any, settings: "RaySettings") -> int:
    if settings.workers is not None:
        return settings.workers
    cpus = float(ray.cluster_resources().get("CPU", 1))
    return max(1, int(cpus // settings.num_cpus))


async def run_items_on_ray(run: "StageServices", stage: Stage, stats: "StageStats", settings: "RaySettings") -> None:
    """Process the stage's unwritten items on worker actors; see the module docstring."""
    from fabrika.ray import connect

    ray = connect(settings)
    cfg = stage.config
    name = stage.name
    store = run.store
    owner = uuid.uuid4().hex  # before reading what is done: workers of an earlier driver stop writing
    store.stage_dir(name).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(store.stage_dir(name) / OWNER_FILE, owner.encode())
    done = store.done_ids(name) if run.resume else DoneIds()
    stats.recovered = store.recover_journal(name, done)  # a crashed local run's journal becomes a shard first
    task = run.progress.add(name, item_total(stage, getattr(stage.ctx, "count_rows", None)))
    seq = next_seq(store.stage_dir(name))
    n_workers = _worker_count(ray, settings)
    Worker = ray.remote(num_cpus=settings.num_cpus, max_restarts=settings.max_retries,
                        max_task_retries=settings.max_retries)(ItemWorker)
    limit = cfg.max_in_flight or run.pipeline.max_in_flight
    run_dir = str(store.run_dir.resolve())
    actors = [Worker.remote(run.pipeline, cfg, run_dir, run.backend_name, limit, owner) for _ in range(n_workers)]
    load = [0] * n_workers
    in_flight: dict[asyncio.Future, int] = {}
    items = new_items(stage, iter(stage.input_rows()), done, stats, lambda: run.progress.advance(task, stats))
    exhausted = False
    stats.report["executor"] = f"ray ({n_workers} worker(s))"
    pids: set[tuple[str, int]] = set()  # (node, pid) of every worker process that returned a batch
    restarted: set[tuple[str, int]] = set()  # ... of those that run a restarted actor (its first process died)

    def next_batch() -> list[tuple[str, Row]]:
        nonlocal exhausted
        batch: list[tuple[str, Row]] = []
        while not exhausted and len(batch) < settings.batch_size:
            item = next(items, None)
            if item is None:
                exhausted = True
                break
            batch.append(item)
        return batch

    try:
        while True:
            while not exhausted and len(in_flight) < n_workers * settings.batches_in_flight:
                batch = next_batch()
                if not batch:
                    break
                w = min(range(n_workers), key=load.__getitem__)
                load[w] += 1
                ref = actors[w].process_batch.remote(seq, batch)
                seq += 1
                in_flight[asyncio.ensure_future(ref)] = w  # an ObjectRef is awaitable
            if not in_flight:
                break
            finished, _ = await asyncio.wait(list(in_flight), return_when=asyncio.FIRST_COMPLETED)
            for fut in finished:
                load[in_flight.pop(fut)] -= 1
                result = fut.result()  # a batch that failed past max_retries fails the stage (rows written stay)
                stats.report.update(result["report"])
                pids.add((result["node"], result["pid"]))
                stats.report["ray_worker_processes"] = len(pids)
                if result["restarted"]:  # Ray restarted a dead worker; its unfinished batches were retried there
                    restarted.add((result["node"], result["pid"]))
                    stats.report["ray_worker_restarts"] = len(restarted)
                    stats.report["ray_batches_after_restart"] = stats.report.get("ray_batches_after_restart", 0) + 1
                stats.shards += result["shard"]
                stats.rows_written += result["rows"]
                for _item_id, ok, rej, miss, internal in result["items"]:
                    if ok is None:
                        stats.pending += 1
                        stats.cache_miss += miss
                    else:
                        stats.processed += 1
                        stats.ok_rows += ok
                        stats.rejected += rej
                        stats.internal_errors += internal
                    run.progress.advance(task, stats)
            run.live(name, stats)
    finally:
        for fut in in_flight:
            fut.cancel()
        closing = [a.close.remote() for a in actors]
        try:
            await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), timeout=30)
        except (TimeoutError, Exception):  # noqa: BLE001 - a dead actor has nothing to close
            pass
        for a in actors:
            ray.kill(a, no_restart=True)
        store.clean_temp(name)  # a killed worker's half-written temp file (never part of the table)
        run.progress.finish(task, stats)


__all__ = ["ItemWorker", "WorkerContext", "run_items_on_ray"]
