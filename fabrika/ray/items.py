"""Per-item CPU stages on Ray worker actors (``executor: ray``).

One pool of :class:`ItemWorker` actors serves the whole run (``ray.workers`` of them, each
reserving ``ray.num_cpus``): it is created at the first stage that runs on workers, kept as a
run-wide resource, and stopped when the run ends. Stages that run at once share it, so two of
them never wait for each other's actors, and an actor's start-up (a process that imports
fabrika) is paid once per run, not once per stage.

For each stage the driver streams the input rows, skips ids already written (the same
:meth:`RunStore.done_ids` resume as a local run), groups the rest into batches of
``ray.batch_size`` and sends each batch to the least busy worker. A worker builds the stage
the first time it sees it (its setup reads config, resources and, through
:class:`WorkerContext`, the finished upstream tables; the sandbox pool under the same
fail-closed rule, checked on its own node), runs ``process`` on the batch's items concurrently
and writes their rows as ONE shard, atomically, into the run directory (a path every node must
see). The shard's name is fixed by the driver before the batch is sent
(``part-<seq>-<digest of ids>``), so a batch retried after its worker died rewrites the same
file instead of adding a second copy of its rows. Only counters travel back.

A worker that dies (OOM, node lost, ``kill -9``) is restarted by Ray and its unfinished
batches are retried (``ray.max_retries``); the restarted actor builds its stages again. A
driver that dies takes its actors with it (they are owned by the driver); the next ``fabrika
run`` skips every id whose shard is on disk and redoes the rest. So that an actor of a dead
driver, still finishing a batch, cannot add rows the new driver is already redoing, each
driver writes a fresh token to ``stages/<stage>/.executor-owner`` before it reads what is
done, and a worker writes its shard only while the token is still its driver's.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, NoReturn, Sequence

from rich.console import Console

import fabrika.pipeline.execute as execute
from fabrika.errors import ConfigError, StageFailure
from fabrika.pipeline.config import stage_dependencies
from fabrika.pipeline.context import RunContext
from fabrika.pipeline.execute import (
    TRANSIENT_BACKOFF_S,
    TRANSIENT_QUEUE,
    TRANSIENT_ROUNDS,
    drop_legacy_internal_errors,
    item_total,
    new_items,
    process_item,
)
from fabrika.pipeline.stage import STAGES, Row, Stage, StageConfig
from fabrika.store.done_ids import DoneIds
from fabrika.store.run import RunStore
from fabrika.store.shards import atomic_write_bytes, next_seq, write_shard

console = Console(stderr=True)
OWNER_FILE = ".executor-owner"
#: The run-wide resource (``ctx.resource``) holding the driver's :class:`WorkerPool`.
POOL_RESOURCE = "ray:item-workers"


class StaleDriver(RuntimeError):
    """A worker's driver was replaced (it died and a new ``fabrika run`` took the stage over)."""


if TYPE_CHECKING:
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


@dataclass(frozen=True)
class StageJob:
    """What a worker needs to build a stage: sent with each batch (a restarted actor rebuilds from it)."""

    config: StageConfig
    owner: str  # the driver's token in ``stages/<stage>/.executor-owner``
    max_in_flight: int
    #: per table, the annotating stages joined when it is read (the driver's ``RunContext.annotators``)
    annotators: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: the stages this one may read: everything it depends on, finished before it started
    readable: frozenset[str] = frozenset()


class WorkerContext(RunContext):
    """The stage context on a worker actor: the driver's read semantics over the shared run directory
    (same tables, gates and annotator joins, so the same ids), limited to finished upstream stages,
    and no LLM."""

    def __init__(self, pipeline: "PipelineConfig", job: StageJob, run_dir: Path, backend_name: str,
                 resources: dict[str, Any]) -> None:
        name = job.config.stage_name
        super().__init__(name, store=RunStore(run_dir), pipeline=pipeline, llm=_NoLLM(name),
                         backend_name=backend_name, report={}, resources=resources, annotators=job.annotators)
        self.readable = job.readable

    def _check_readable(self, stage_name: str) -> None:
        if stage_name not in self.readable:
            raise RuntimeError(f"stage {self.stage_name!r} on a ray worker read {stage_name!r}, which is not one of "
                               f"the finished stages it depends on ({', '.join(sorted(self.readable)) or 'none'}); "
                               "make it an input of the stage")

    def iter_rows(self, stage_name: str, *, gated: bool = True, columns: list[str] | None = None) -> Iterator[Row]:
        self._check_readable(stage_name)
        return super().iter_rows(stage_name, gated=gated, columns=columns)

    def count_rows(self, stage_name: str, gated: bool = True) -> int:
        self._check_readable(stage_name)
        return super().count_rows(stage_name, gated)


@dataclass
class _Hosted:
    stage: Stage
    ctx: WorkerContext
    ready: asyncio.Task


class ItemWorker:
    """One worker actor of the run: hosts the stages sent to it (built on first use) and their batches."""

    def __init__(self, pipeline: "PipelineConfig", run_dir: str, backend_name: str) -> None:
        from fabrika.pipeline import registry

        registry.load_modules(list(pipeline.plugins))
        registry.load_modules()
        self.pipeline = pipeline
        self.run_dir = Path(run_dir)
        self.backend_name = backend_name
        self.resources: dict[str, Any] = {}  # run-wide on this worker (sandbox pool, tokenizer, index)
        self.hosted: dict[str, _Hosted] = {}
        self.restarted = _actor_was_restarted()
        self._cpu_thread: Any = None  # runs map_chunk's function, one chunk at a time

    def pid(self) -> int:
        return os.getpid()

    def _host(self, job: StageJob) -> _Hosted:
        name = job.config.stage_name
        hosted = self.hosted.get(name)
        if hosted is None:
            ctx = WorkerContext(self.pipeline, job, self.run_dir, self.backend_name, self.resources)
            stage: Stage = STAGES[job.config.kind](job.config, ctx)
            hosted = self.hosted[name] = _Hosted(stage, ctx, asyncio.ensure_future(self._setup(stage)))
        return hosted

    async def _setup(self, stage: Stage) -> None:
        if getattr(type(stage), "uses_sandbox", False):
            from fabrika.sandbox.policy import isolation_problem

            problem = isolation_problem(self.pipeline.sandbox, self.backend_name)  # bwrap on THIS node
            if problem:
                raise ConfigError(f"ray worker on {os.uname().nodename}: {problem}")
        await stage.setup()

    async def process_batch(self, job: StageJob, seq: int, items: list[tuple[str, Row]]) -> dict[str, Any]:
        hosted = self._host(job)
        await asyncio.shield(hosted.ready)
        stage = hosted.stage
        limit = asyncio.Semaphore(job.max_in_flight)

        async def one(item_id: str, row: Row) -> Any:
            async with limit:
                return await process_item(stage, row, item_id, self.backend_name)

        started = time.monotonic()
        results = await asyncio.gather(*(one(i, r) for i, r in items))
        seconds = time.monotonic() - started  # the items' own time (the batch sizer's measure)
        failed = sorted((res for res in results if res.failure is not None), key=lambda res: res.item_id)
        if failed:  # a bug or a configuration problem: nothing of this batch is written, the driver stops the stage
            first = failed[0]
            assert first.failure is not None
            return {"failure": (first.item_id, first.failure.kind, first.failure.error, first.failure.fix),
                    "items": [], "rows": 0, "shard": False, "report": dict(hosted.ctx.reported),
                    "seconds": seconds, "pid": os.getpid(), "node": os.uname().nodename,
                    "restarted": self.restarted}
        rows = [r for res in results if res.rows for r in res.rows]
        if rows:
            stage_dir = hosted.ctx.stage_dir(stage.name)
            owner_file = stage_dir / OWNER_FILE
            current = owner_file.read_text(encoding="utf-8") if owner_file.exists() else None
            if current != job.owner:  # say which: a missing file is a removed run dir, not a second driver
                why = (f"its owner file {owner_file} is gone (the run directory was removed or reset under the run)"
                       if current is None else f"was taken over by another driver (token {current[:8]} in "
                       f"{owner_file}, this batch's driver {job.owner[:8]})")
                raise StaleDriver(f"stage {stage.name!r} {why}; batch {seq} dropped")
            # temp file + fsync + rename, off the event loop: the other batch keeps feeding the sandbox meanwhile
            await asyncio.to_thread(write_shard, stage_dir, rows, seq=seq)
        items_out = []
        for res in results:  # (id, ok rows or None: pending, rejected rows, cache miss, internal, transient fault)
            if res.rows is None:
                items_out.append((res.item_id, None, 0, res.state.pending is not None
                                  and res.state.pending.kind == "cache_miss", False,
                                  None if res.transient is None else res.transient.error))
            else:
                ok = sum(r["status"] == "ok" for r in res.rows)
                items_out.append((res.item_id, ok, len(res.rows) - ok, False, False, None))
        return {"items": items_out, "rows": len(rows), "shard": bool(rows), "report": dict(hosted.ctx.reported),
                "seconds": seconds,
                "pid": os.getpid(), "node": os.uname().nodename, "restarted": self.restarted}

    def _sandbox(self, config: Any) -> Any:
        """This actor's sandbox pool for ``config`` (a run-wide resource here), under the node's fail-closed check."""
        key = f"sandbox:{config.model_dump_json()}"
        if key not in self.resources:
            from fabrika.sandbox import SandboxPool
            from fabrika.sandbox.policy import isolation_problem

            problem = isolation_problem(self.pipeline.sandbox, self.backend_name)  # bwrap on THIS node
            if problem:
                raise ConfigError(f"ray worker on {os.uname().nodename}: {problem}")
            self.resources[key] = SandboxPool(config)
        return self.resources[key]

    def sandbox_isolation(self, config: Any) -> str:
        return str(self._sandbox(config).isolation)

    async def sandbox_run(self, config: Any, code: str, responses: list[Any]) -> list[Any]:
        """Verdicts of one verifier on ``responses``, for a stage that runs in the driver (it calls the LLM)
        but sends its LLM-written code here (:class:`fabrika.ray.sandbox.RemoteSandboxPool`)."""
        return await self._sandbox(config).run(code, responses)

    async def map_chunk(self, func: Any, items: list[Any]) -> dict[str, Any]:
        """``func`` over one chunk of a driver-run stage's ``ctx.map_cpu`` (:mod:`fabrika.ray.cpu_map`), off the
        event loop (in one thread) so this actor's other batches keep going; a function this node cannot
        import is an ``error``."""
        from fabrika.pipeline.cpu_map import NotImportableError

        try:
            fn = func.load()
        except NotImportableError as exc:
            return {"error": f"ray worker on {os.uname().nodename}: {exc}"}
        def run() -> tuple[list[Any], float]:
            started = time.monotonic()
            return [fn(x) for x in items], time.monotonic() - started

        if self._cpu_thread is None:
            from concurrent.futures import ThreadPoolExecutor

            self._cpu_thread = ThreadPoolExecutor(1, thread_name_prefix="map_cpu")
        # one thread: the chunks queued here (batches_in_flight) run one after another instead of
        # contending for the GIL; the seconds are the chunk's own (the sizer's measure), not its wait
        results, seconds = await asyncio.get_running_loop().run_in_executor(self._cpu_thread, run)
        return {"results": results, "seconds": seconds, "pid": os.getpid(),
                "node": os.uname().nodename, "restarted": self.restarted}

    async def end_stage(self, name: str) -> None:
        """The stage is done: tear it down here (its run-wide resources stay until :meth:`close`)."""
        hosted = self.hosted.pop(name, None)
        if hosted is not None and hosted.ready.done() and not hosted.ready.cancelled() and not hosted.ready.exception():
            await hosted.stage.teardown()

    async def close(self) -> None:
        from fabrika.pipeline.lifecycle import close_resources

        for name in list(self.hosted):
            await self.end_stage(name)
        await close_resources(self.resources)
        if self._cpu_thread is not None:
            self._cpu_thread.shutdown(wait=False, cancel_futures=True)


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


class WorkerPool:
    """The driver's handle on the run's worker actors: their load, and the processes that answered."""

    def __init__(self, ray: Any, settings: "RaySettings", pipeline: "PipelineConfig", run_dir: str,
                 backend_name: str) -> None:
        self.ray = ray
        self.size = _worker_count(ray, settings)
        Worker = ray.remote(num_cpus=settings.num_cpus, max_restarts=settings.max_retries,
                            max_task_retries=settings.max_retries)(ItemWorker)
        self.actors = [Worker.remote(pipeline, run_dir, backend_name) for _ in range(self.size)]
        self.load = [0] * self.size  # batches in flight per actor, over every stage running now
        self.processes: set[tuple[str, int]] = set()  # (node, pid) of every process that returned a batch

    def wait_ready(self) -> None:
        """Block until every actor answers (its process is up, fabrika imported): the pool's start-up cost."""
        self.ray.get([a.pid.remote() for a in self.actors])

    def least_busy(self) -> int:
        return min(range(self.size), key=self.load.__getitem__)

    async def end_stage(self, name: str) -> None:
        await _quietly([a.end_stage.remote(name) for a in self.actors])

    async def aclose(self) -> None:
        """Close every actor (its stages and resources), then stop it; the run's resource closer calls this."""
        await _quietly([a.close.remote() for a in self.actors])
        for a in self.actors:
            self.ray.kill(a, no_restart=True)


def worker_pool(ctx: Any, ray: Any, settings: "RaySettings", pipeline: "PipelineConfig", run_dir: str,
                backend_name: str) -> tuple[WorkerPool, bool]:
    """The run's worker pool (a run-wide resource of the driver's stage contexts) and whether this call made it."""
    created: list[WorkerPool] = []

    def build() -> WorkerPool:
        created.append(WorkerPool(ray, settings, pipeline, run_dir, backend_name))
        return created[0]

    pool: WorkerPool = ctx.resource(POOL_RESOURCE, build)
    return pool, bool(created)


async def _quietly(refs: list[Any]) -> None:
    try:
        await asyncio.wait_for(asyncio.gather(*refs, return_exceptions=True), timeout=30)
    except (TimeoutError, Exception):  # noqa: BLE001 - a dead actor has nothing to close
        pass


class BatchSizer:
    """Rows per batch for one stage: ``ray.batch_size`` at first, then grown until a batch takes about
    ``ray.batch_seconds`` of worker time (the mean item time of the batches returned so far), never above
    ``ray.max_batch_size`` nor above a share of the stage's known item count that keeps every worker busy."""

    def __init__(self, settings: "RaySettings", workers: int, total: int | None) -> None:
        self.settings = settings
        self.floor = settings.batch_size
        cap = settings.max_batch_size
        if total is not None:  # at least batches_in_flight batches per worker while the stage's items last
            cap = min(cap, max(self.floor, total // (workers * settings.batches_in_flight)))
        self.cap = max(self.floor, cap)
        self.items = 0
        self.seconds = 0.0

    def record(self, items: int, seconds: float) -> None:
        self.items += items
        self.seconds += seconds

    @property
    def size(self) -> int:
        target = self.settings.batch_seconds
        if target is None or self.items == 0 or self.seconds <= 0:
            return self.floor
        return max(self.floor, min(self.cap, int(target * self.items / self.seconds)))


def readable_stages(config: "PipelineConfig", name: str) -> frozenset[str]:
    """Every stage ``name`` depends on, directly or not: all finished before it starts."""
    deps = stage_dependencies(config)
    seen: set[str] = set()
    todo = list(deps.get(name, ()))
    while todo:
        dep = todo.pop()
        if dep not in seen:
            seen.add(dep)
            todo.extend(deps.get(dep, ()))
    return frozenset(seen)


async def run_items_on_ray(run: "StageServices", stage: Stage, stats: "StageStats", settings: "RaySettings") -> None:
    """Process the stage's unwritten items on the run's worker actors; see the module docstring."""
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
    if run.resume and drop_legacy_internal_errors(store, name):  # an older run's exception rows: redo the stage
        stats.reprocessed.append("legacy internal_error rows")
        stats.recovered = 0
        done = DoneIds()
        store.stage_dir(name).mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(store.stage_dir(name) / OWNER_FILE, owner.encode())
    total = item_total(stage, getattr(stage.ctx, "count_rows", None))
    task = run.progress.add(name, total)
    seq = next_seq(store.stage_dir(name))
    run_dir = str(store.run_dir.resolve())
    pool: WorkerPool | None = None  # started at the first batch: a stage with nothing left to do starts no actor

    async def start_pool() -> WorkerPool:
        started, created = worker_pool(stage.ctx, ray, settings, run.pipeline, run_dir, run.backend_name)
        if created:  # this stage starts the run's pool: its start-up is in this stage's time, said so
            t0 = time.monotonic()
            await asyncio.to_thread(started.wait_ready)
            stats.report["ray_pool_start_s"] = round(time.monotonic() - t0, 2)
        return started

    job = StageJob(cfg, owner, cfg.max_in_flight or run.pipeline.max_in_flight,
                   annotators=dict(getattr(stage.ctx, "annotators", {}) or {}),
                   readable=readable_stages(run.pipeline, name))
    in_flight: dict[asyncio.Future, int] = {}
    sent: dict[asyncio.Future, dict[str, tuple[str, Row]]] = {}  # each batch's items, for a transient round
    items: Iterator[Any] = new_items(stage, iter(stage.input_rows()), done, stats,
                                     lambda: run.progress.advance(task, stats))
    exhausted = False
    #: items that met an infrastructure fault on a worker, re-sent in the next transient round (as locally)
    again: list[tuple[str, Row]] = []
    rounds = 0
    stats.report["executor"] = f"ray ({_worker_count(ray, settings)} worker(s))"
    pids: set[tuple[str, int]] = set()  # (node, pid) of every worker process that returned this stage's batches
    restarted: set[tuple[str, int]] = set()  # ... of those, restarted actors first seen during this stage

    sizer = BatchSizer(settings, _worker_count(ray, settings), None if total is None else max(0, total - len(done)))
    sizes: list[int] = []

    def next_batch() -> list[tuple[str, Row]]:
        nonlocal exhausted
        batch: list[tuple[str, Row]] = []
        want = sizer.size
        while not exhausted and len(batch) < want:
            item = next(items, None)
            if item is None:
                exhausted = True
                break
            batch.append(item)
        if batch:
            sizes.append(len(batch))
            stats.report["ray_batch_rows"] = {"first": sizes[0], "max": max(sizes), "batches": len(sizes)}
        return batch

    try:
        while True:
            while not exhausted and len(in_flight) < (pool.size if pool else 1) * settings.batches_in_flight:
                batch = next_batch()
                if not batch:
                    break
                if pool is None:
                    pool = await start_pool()
                w = pool.least_busy()
                pool.load[w] += 1
                ref = pool.actors[w].process_batch.remote(job, seq, batch)
                seq += 1
                fut = asyncio.ensure_future(ref)  # an ObjectRef is awaitable
                in_flight[fut] = w
                sent[fut] = {item[0]: item for item in batch}
            if not in_flight:
                if again:  # a bounded transient round, as a local run does (fabrika.pipeline.execute)
                    wait = TRANSIENT_BACKOFF_S[min(rounds, len(TRANSIENT_BACKOFF_S) - 1)]
                    console.print(f"[yellow]{name}:[/] {len(again)} item(s) met an infrastructure fault on a "
                                  f"worker ({stats.last_transient}); retrying them in {wait:g} s "
                                  f"(round {rounds + 1} of {TRANSIENT_ROUNDS})")
                    await (run.sleep or execute.transient_wait)(wait)
                    rounds += 1
                    items, again = iter(list(again)), []
                    exhausted = False
                    continue
                break
            finished, _ = await asyncio.wait(list(in_flight), return_when=asyncio.FIRST_COMPLETED)
            assert pool is not None  # batches are in flight only once it is up
            for fut in finished:
                pool.load[in_flight.pop(fut)] -= 1
                batch_items = sent.pop(fut)
                result = fut.result()  # a batch that failed past max_retries fails the stage (rows written stay)
                if result.get("failure"):  # the same stop as a local run (fabrika.pipeline.taxonomy)
                    item_id, kind, error, fix = result["failure"]
                    raise StageFailure(name, item_id, kind, error, fix)
                sizer.record(len(result["items"]), result["seconds"])
                stats.report.update(result["report"])
                proc = (result["node"], result["pid"])
                pids.add(proc)
                stats.report["ray_worker_processes"] = len(pids)
                if result["restarted"] and (proc in restarted or proc not in pool.processes):
                    # Ray restarted a dead worker during this stage; its unfinished batches were retried there
                    restarted.add(proc)
                    stats.report["ray_worker_restarts"] = len(restarted)
                    stats.report["ray_batches_after_restart"] = stats.report.get("ray_batches_after_restart", 0) + 1
                pool.processes.add(proc)
                stats.shards += result["shard"]
                stats.rows_written += result["rows"]
                for item_id, ok, rej, miss, internal, transient in result["items"]:
                    if transient is not None:
                        stats.transient += 1
                        stats.last_transient = transient
                        if rounds < TRANSIENT_ROUNDS and len(again) < TRANSIENT_QUEUE:
                            again.append(batch_items[item_id])  # counted once it is final
                            continue
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
        if pool is not None:
            for fut, w in in_flight.items():
                fut.cancel()
                pool.load[w] -= 1
            await pool.end_stage(name)
        store.clean_temp(name)  # a killed worker's half-written temp file (never part of the table)
        run.progress.finish(task, stats)


__all__ = ["BatchSizer", "ItemWorker", "StageJob", "WorkerContext", "WorkerPool", "readable_stages",
           "run_items_on_ray", "worker_pool"]
