"""An LLM-calling stage in ``llm_workers`` processes: the driver's side (``llm_workers: N``, ``--llm-workers``).

With ``llm_workers: 1`` (the default) every LLM-calling stage runs in the driver, one event loop on one
core, which caps a run's request rate whatever the fleet. With ``N > 1`` each per-item stage that
calls the LLM (``Stage.calls_llm``; global stages stay in the driver) is split into ``N`` partitions
by a stable hash of the item id (:mod:`fabrika.pipeline.partition`), and each partition runs in a
worker process (:mod:`fabrika.pipeline.llm_worker`): a local subprocess with ``executor: local``, a
Ray actor with ``executor: ray`` (the executor's ``llm_launcher``, :mod:`fabrika.ray.llm_workers`).
Every worker has its own engine client with the concurrency limits divided by ``N``, its own
journal (``journal-w<k>.jsonl``), and writes its shards atomically into the stage directory; the
stage's table is the union of the shards, keyed by id, so the dataset is byte-identical for any
``N`` and either launcher.

The driver, per stage:

1. recovers every journal a stopped run left (its own and any worker's, whatever ``N`` was then)
   into shards, exactly as a one-process stage does, so no worker ever reads another's journal;
2. gives each of the ``N`` workers its partition (local workers were started with the run, see
   :func:`start_llm_workers`; Ray actors are made per job) and follows their progress lines;
3. a worker that **dies** (``kill -9``, OOM, a lost node, an exception outside its items that is
   an infrastructure fault) is infrastructure: its journal is recovered, and its partition alone is
   retried, up to :data:`~fabrika.pipeline.execute.TRANSIENT_ROUNDS` times after the usual backoff;
   the retry skips every item that reached a shard or the journal, so nothing finished is lost or
   done twice. After the last round its unfinished items are *pending* (the next run does them);
4. a worker that stops on a **bug or configuration problem** (:class:`~fabrika.errors.StageFailure`)
   stops the stage: the other workers get SIGTERM (they save what they finished) and the run exits
   non-zero with that worker's one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from rich.console import Console

import fabrika.pipeline.execute as execute
from fabrika.errors import ConfigError, StageFailure
from fabrika.pipeline.execute import TRANSIENT_BACKOFF_S, TRANSIENT_ROUNDS, StageServices, item_total, new_items, prepare_resume
from fabrika.pipeline.executors import executor_class
from fabrika.pipeline.llm_worker import LINE_LIMIT, PREFIX, WorkerJob, WorkerOutcome, decode, encode
from fabrika.pipeline.outcome import StageStats
from fabrika.pipeline.partition import Partition, merge_stats, partition_of, worker_config
from fabrika.pipeline.stage import STAGES, Stage, StageConfig
from fabrika.pipeline.stopping import stop_received
from fabrika.store.journal import partition_journal

if TYPE_CHECKING:
    from fabrika.pipeline.config import PipelineConfig

console = Console(stderr=True)
#: The subprocess's program: ``main`` imported by its module name, so the outcome it pickles names
#: ``fabrika.pipeline.llm_worker`` classes (``python -m`` would make them ``__main__``'s).
WORKER_ENTRY = "import sys; from fabrika.pipeline.llm_worker import main; sys.exit(main(sys.argv[1:]))"
#: The run-wide resource (``PipelineRun.resources``) holding the run's launcher and its worker processes.
LLM_LAUNCHER = "llm-workers:launcher"
#: Seconds a worker gets to save what it finished after SIGTERM before it is killed.
STOP_WAIT_S = 30.0


@dataclass(frozen=True)
class Died:
    """A worker that ended without an outcome (killed, crashed, its actor lost)."""

    why: str


class LLMLauncher(Protocol):
    """Runs one :class:`WorkerJob` somewhere and returns its outcome, or :class:`Died`."""

    name: str

    async def run(self, job: WorkerJob, on_live: Callable[[dict[str, Any]], None]) -> WorkerOutcome | Died:
        ...


class _Process:
    """One worker subprocess and the jobs it is running (by job number)."""

    def __init__(self, index: int, proc: asyncio.subprocess.Process) -> None:
        self.index = index
        self.proc = proc
        self.jobs: dict[int, tuple[asyncio.Future[WorkerOutcome | Died], Callable[[dict[str, Any]], None]]] = {}
        self.reader = asyncio.create_task(self._read(), name=f"llm worker {index} reader")

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and not self.reader.done()

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(encode(message))

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    break
                if not line.startswith(PREFIX):
                    continue  # stage code printing to stdout: not ours
                kind, job_id, payload = decode(line[len(PREFIX):])
                entry = self.jobs.get(job_id)
                if entry is None:
                    continue
                if kind == "live":
                    entry[1](payload)
                elif kind in ("done", "cancelled"):
                    self.jobs.pop(job_id, None)
                    if not entry[0].done():
                        entry[0].set_result(payload if kind == "done" else Died("was cancelled"))
        finally:
            rc = await self.proc.wait()
            why = f"was killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
            for fut, _ in self.jobs.values():
                if not fut.done():
                    fut.set_result(Died(why))
            self.jobs.clear()


class SubprocessLauncher:
    """Workers as local subprocesses (:func:`fabrika.pipeline.llm_worker.main`), one per partition index,
    kept for the run (a run-wide resource, closed at its end), so a worker imports fabrika once, not once
    per stage. :func:`start_llm_workers` starts them when the run starts, before the driver's own
    start-up work and first stages, and each imports its ``preload`` modules (the run's plugins, every
    stage module, the engine) before it reads its first job: that start-up is off the first split
    stage's critical path. Jobs and outcomes travel as pickled lines on the child's stdin and stdout
    (a job sent while the worker still imports waits in the pipe); its stderr is the driver's. A child
    dies with the driver (``PR_SET_PDEATHSIG``); a cancelled job is stopped like Ctrl-C (it saves what
    it finished), and a worker that does not answer within :data:`STOP_WAIT_S` is killed. A dead worker
    (also one that died before its first job) is replaced by a fresh process for the next job of its
    index.
    """

    name = "local subprocesses"

    def __init__(self, preload: Sequence[str] = ()) -> None:
        self.workers: dict[int, _Process] = {}
        #: modules each worker imports as it starts (:func:`preload_modules`)
        self.preload = list(preload)
        self._jobs = 0
        self._lock = asyncio.Lock()

    async def start(self, count: int) -> None:
        """Start the workers of partitions ``0 .. count-1`` that are not running, without waiting for them."""
        for index in range(count):
            await self._worker(index)

    async def _worker(self, index: int) -> _Process:
        async with self._lock:
            worker = self.workers.get(index)
            if worker is None or not worker.alive:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", WORKER_ENTRY, str(os.getpid()), *self.preload,
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT)
                worker = self.workers[index] = _Process(index, proc)
            return worker

    async def run(self, job: WorkerJob, on_live: Callable[[dict[str, Any]], None]) -> WorkerOutcome | Died:
        worker = await self._worker(job.partition.index)
        self._jobs += 1
        job_id = self._jobs
        fut: asyncio.Future[WorkerOutcome | Died] = asyncio.get_running_loop().create_future()
        worker.jobs[job_id] = (fut, on_live)
        try:
            worker.send(("run", job_id, job))
        except (BrokenPipeError, ConnectionResetError) as exc:
            worker.jobs.pop(job_id, None)
            return Died(f"could not be reached ({type(exc).__name__})")
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:  # stop it like Ctrl-C, so it saves what it finished
            if worker.alive:
                try:
                    worker.send(("cancel", job_id))
                    if stop_received() is not None:  # a signal stops the run: SIGTERM stops a busy worker too
                        worker.proc.terminate()
                    await asyncio.wait_for(asyncio.shield(fut), STOP_WAIT_S)
                except (TimeoutError, BrokenPipeError, ConnectionResetError, ProcessLookupError):
                    with contextlib.suppress(ProcessLookupError):  # (it may have just exited)
                        worker.proc.kill()
            raise

    async def aclose(self) -> None:
        """End every worker process (run end)."""
        for worker in self.workers.values():
            if worker.alive:
                try:
                    worker.send(("exit",))
                    assert worker.proc.stdin is not None
                    worker.proc.stdin.close()
                except (BrokenPipeError, ConnectionResetError):
                    pass
        for worker in self.workers.values():
            try:
                await asyncio.wait_for(worker.proc.wait(), STOP_WAIT_S)
            except TimeoutError:
                worker.proc.kill()
                await worker.proc.wait()
            await asyncio.gather(worker.reader, return_exceptions=True)
        self.workers.clear()


def uses_llm_workers(config: "PipelineConfig", stage: Stage | type[Stage]) -> bool:
    """True when ``stage``'s items (a stage or its class) run in ``llm_workers`` processes (a per-item stage
    that calls the LLM)."""
    cls = stage if isinstance(stage, type) else type(stage)
    return config.llm_workers > 1 and not cls.global_stage and bool(getattr(cls, "calls_llm", False))


#: The engine module a worker imports before its first job, by ``llm.backend`` (vllm never runs split).
_BACKEND_MODULES = {"openai": "fabrika.llm.openai_compat", "sim": "fabrika.llm.sim"}


def preload_modules(config: "PipelineConfig") -> list[str]:
    """What a worker imports as it starts, before its first job: the run's plugins (then every fabrika
    stage module, as :func:`~fabrika.pipeline.llm_worker.run_partition` does), the engine and its backend."""
    backend = _BACKEND_MODULES.get(str(getattr(config.llm, "backend", "")))
    return [*config.plugins, "fabrika.llm.factory", *([backend] if backend else [])]


async def start_llm_workers(config: "PipelineConfig", stages: Sequence[StageConfig]) -> SubprocessLauncher | None:
    """The run's local LLM workers, started now (the run's start): when ``stages`` has a split stage and the
    executor brings no launcher of its own (Ray's actors are made per job). ``None`` otherwise: nothing to
    start. The caller puts it in the run's resources (:data:`LLM_LAUNCHER`), which close it at the run's end."""
    if config.llm_workers <= 1 or not any(s.kind in STAGES and uses_llm_workers(config, STAGES[s.kind]) for s in stages):
        return None
    if config.executor != "local" and callable(getattr(executor_class(config.executor), "llm_launcher", None)):
        return None
    launcher = SubprocessLauncher(preload_modules(config))
    try:
        await launcher.start(config.llm_workers)
    except BaseException:
        await launcher.aclose()
        raise
    return launcher


def _stop_error(out: WorkerOutcome) -> Exception | None:
    """The exception that stops the stage for this outcome (a bug or a configuration problem), if any."""
    if out.failure is not None:
        return StageFailure(*out.failure)
    if out.error is not None and out.error[0] == "config":
        return ConfigError(out.error[1])
    return None


async def _launch(launcher: LLMLauncher, jobs: Sequence[WorkerJob],
                  on_live: Callable[[int, dict[str, Any]], None]) -> list[WorkerOutcome | Died]:
    """Run ``jobs`` at once; the first that stops the stage cancels the others (which save their items)."""
    tasks = [asyncio.create_task(launcher.run(job, partial(on_live, job.partition.index)),
                                 name=f"llm worker {job.partition.index}") for job in jobs]
    try:
        waiting = set(tasks)
        while waiting:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for t in sorted(done, key=tasks.index):
                out = t.result()
                error = _stop_error(out) if isinstance(out, WorkerOutcome) else None
                if error is not None:
                    raise error
        return [t.result() for t in tasks]
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def unfinished(stage: Stage, store: Any, parts: Sequence[int], count: int) -> int:
    """Items of partitions ``parts`` (of ``count``) that have no row yet: what a dead worker left pending."""
    done = store.done_ids(stage.name)
    owned = set(parts)
    feed = iter(stage.input_rows())
    return sum(1 for _ in new_items(stage, feed, done, StageStats(), lambda: None,
                                    owns=lambda item_id: partition_of(item_id, count) in owned))


def _live_view(stats: StageStats, live: Mapping[int, Mapping[str, Any]]) -> StageStats:
    view = StageStats()
    merge_stats(view, stats)
    for counters in live.values():
        for key, value in counters.items():
            if key in ("requests", "cached"):
                setattr(view.llm, key, getattr(view.llm, key) + value)
            elif hasattr(view, key):
                setattr(view, key, getattr(view, key) + value)
    return view


async def run_llm_workers(services: StageServices, stage: Stage, stats: StageStats, launcher: LLMLauncher,
                          annotators: Mapping[str, Sequence[str]],
                          count_rows: Callable[[str], int] | None = None,
                          accounting: list[dict[str, Any]] | None = None) -> None:
    """Process every not-yet-written item of ``stage`` in ``llm_workers`` worker processes (see module docs).

    ``accounting`` collects each worker engine's accounting snapshot (the run's manifest adds them up).
    Raises :class:`~fabrika.errors.StageFailure` (or :class:`~fabrika.errors.ConfigError`) when a
    worker met a bug or a configuration problem.
    """
    pipeline = services.pipeline
    n = pipeline.llm_workers
    name = stage.name
    store = services.store
    prepare_resume(services, stage, stats)  # every journal of a stopped run, whatever its llm_workers was
    wcfg = worker_config(pipeline, n)
    if services.cache_only:
        wcfg = wcfg.model_copy(update={"llm": wcfg.llm.model_copy(update={"cache_only": True})})
    run_dir = str(Path(store.run_dir).resolve())
    progress = services.progress
    task = progress.add(name, item_total(stage, count_rows))
    live: dict[int, dict[str, Any]] = {}

    def on_live(index: int, counters: dict[str, Any]) -> None:
        live[index] = counters
        view = _live_view(stats, live)
        progress.advance(task, view)
        services.live(name, view)

    def job(index: int) -> WorkerJob:
        return WorkerJob(pipeline=wcfg, stage=name, partition=Partition(index, n), run_dir=run_dir,
                         backend_name=services.backend_name, annotators=dict(annotators), parent_pid=os.getpid())

    parts = list(range(n))
    deaths: list[str] = []
    pids: list[int] = []
    rounds = 0
    try:
        while True:
            outcomes = await _launch(launcher, [job(k) for k in parts], on_live)
            died: list[int] = []
            for k, out in zip(parts, outcomes):
                live.pop(k, None)
                if isinstance(out, WorkerOutcome) and out.error is None:
                    merge_stats(stats, out.stats)
                    pids.append(out.pid)
                    if accounting is not None and out.accounting:
                        accounting.append(out.accounting)
                    continue
                why = out.why if isinstance(out, Died) else f"met an infrastructure fault: {(out.error or ('', ''))[1]}"
                died.append(k)
                deaths.append(f"worker {k}: {why}")
                stats.transient += 1
                stats.last_transient = f"LLM worker {k} of {n} {why}"
            if not died:
                break
            recovered = store.recover_journal(name, store.done_ids(name), [partition_journal(k) for k in died])
            if rounds >= TRANSIENT_ROUNDS or stats.stopped_early:
                left = unfinished(stage, store, died, n)
                stats.pending += left
                console.print(f"[yellow]{name}:[/] LLM worker(s) {', '.join(map(str, died))} of {n} died "
                              f"({stats.last_transient}); {left} item(s) left pending for the next run")
                break
            wait = TRANSIENT_BACKOFF_S[min(rounds, len(TRANSIENT_BACKOFF_S) - 1)]
            console.print(f"[yellow]{name}:[/] LLM worker(s) {', '.join(map(str, died))} of {n} died "
                          f"({stats.last_transient}); {recovered} finished row(s) kept from the journal, retrying "
                          f"the partition(s) in {wait:g} s (round {rounds + 1} of {TRANSIENT_ROUNDS})")
            await (services.sleep or execute.transient_wait)(wait)
            rounds += 1
            parts = died
    finally:
        stats.report["llm_workers"] = {"workers": n, "where": launcher.name, "deaths": deaths[:10],
                                       "retried_rounds": rounds, "pids": sorted(pids)}
        progress.finish(task, stats)


def merge_accounting(snapshots: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Sum accounting snapshots (``{"rows": [...], "totals": {...}}``) row by row (stage, tag, model)."""
    rows: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for snap in snapshots:
        for row in snap.get("rows", []):
            key = (row.get("stage"), row.get("tag"), row.get("model"))
            into = rows.setdefault(key, {"stage": key[0], "tag": key[1], "model": key[2]})
            _add(into, row)
    totals: dict[str, Any] = {}
    for snap in snapshots:
        _add(totals, snap.get("totals", {}))
    return {"rows": [rows[k] for k in sorted(rows, key=lambda k: tuple(str(x) for x in k))], "totals": totals}


def _add(into: dict[str, Any], row: Mapping[str, Any]) -> None:
    for key, value in row.items():
        if key in ("stage", "tag", "model"):
            continue
        if isinstance(value, bool) or value is None:
            into.setdefault(key, value)
        elif isinstance(value, (int, float)):
            have = into.get(key)
            into[key] = value + (have if isinstance(have, (int, float)) else 0)
        elif isinstance(value, dict):
            sub = into.setdefault(key, {})
            for k, v in value.items():
                sub[k] = sub.get(k, 0) + v if isinstance(v, (int, float)) else v


__all__ = ["LLM_LAUNCHER", "Died", "LLMLauncher", "STOP_WAIT_S", "SubprocessLauncher", "merge_accounting",
           "preload_modules", "run_llm_workers", "start_llm_workers", "unfinished", "uses_llm_workers"]
