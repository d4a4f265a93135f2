"""One LLM worker: the items of one partition of an LLM-calling stage, in a process of its own.

:func:`run_partition` is the whole job, the same in a local worker subprocess (:func:`main`:
one per partition index for the whole run, serving the jobs of every split stage; started by
:mod:`fabrika.pipeline.llm_workers`) and in
a Ray actor (:mod:`fabrika.ray.llm_workers`): load the stage modules, build this worker's own
engine (its own connections, retries and breakers; the run's sqlite cache, which is safe for
several processes: WAL and a busy timeout), set the stage up and run
:func:`fabrika.pipeline.execute.run_items` over the items the :class:`~fabrika.pipeline.partition.Partition`
owns, with the worker's own journal. Shards are written atomically into the stage directory
under names that carry a digest of their ids, so workers never overwrite each other's.

What comes back is a :class:`WorkerOutcome`: the stage counters, or the one-line
:class:`~fabrika.errors.StageFailure` of a bug or a configuration problem, or an error met
outside the items (``config``: the driver stops with it; ``transient``: like a worker that died,
the partition is retried). A worker whose process dies (``kill -9``, OOM) returns nothing: its
finished items are in its journal and shards, and the driver retries the partition.
"""

from __future__ import annotations

import asyncio
import base64
import os
import pickle
import signal
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from fabrika.errors import ConfigError, InputError, StageFailure, StoreError
from fabrika.pipeline.context import RunContext
from fabrika.pipeline.execute import StageServices, run_items
from fabrika.pipeline.lifecycle import build_engine_for, close_resources
from fabrika.pipeline.llm_wrap import StageLLM
from fabrika.pipeline.outcome import StageStats
from fabrika.pipeline.partition import Partition, live_counters
from fabrika.pipeline.progress import RunProgress
from fabrika.pipeline.stage import STAGES, Stage
from fabrika.pipeline.stopping import RunStopped, StopOnSignals, guard_default_executor
from fabrika.pipeline.taxonomy import classify, stage_failure
from fabrika.store.run import RunStore

if TYPE_CHECKING:
    from fabrika.pipeline.config import PipelineConfig

#: Prefix of the protocol lines a worker subprocess prints on stdout (anything else there is ignored).
PREFIX = b"fabrika-llm-worker "
#: Longest protocol line (an outcome with its reports).
LINE_LIMIT = 1 << 26
#: A worker reports its counters at most this often.
LIVE_EVERY_S = 0.5


@dataclass(frozen=True)
class WorkerJob:
    """What a worker needs: the pipeline as this worker sees it (limits divided), the stage, its partition."""

    pipeline: "PipelineConfig"
    stage: str
    partition: Partition
    run_dir: str
    backend_name: str
    #: per table, the annotating stages joined when it is read (the driver's ``RunContext.annotators``)
    annotators: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: the driver's pid: a subprocess worker dies with it (no orphan keeps writing into the run)
    parent_pid: int | None = None


@dataclass
class WorkerOutcome:
    """What a worker returns (see module docs)."""

    stats: StageStats
    #: ``(stage, item_id, kind, error, fix)`` of the StageFailure that stopped the stage
    failure: tuple[str, str | None, str, str, str] | None = None
    #: ``(kind, message)`` of an error outside items: ``config`` stops the stage, ``transient`` retries
    error: tuple[str, str] | None = None
    #: the worker engine's accounting totals
    accounting: dict[str, Any] = field(default_factory=dict)
    pid: int = 0


def _outcome_of(exc: BaseException, stage: Stage | None, stats: StageStats) -> WorkerOutcome:
    if isinstance(exc, StageFailure):
        return WorkerOutcome(stats, failure=(exc.stage, exc.item_id, exc.kind, exc.error, exc.fix), pid=os.getpid())
    if isinstance(exc, (ConfigError, InputError)) or (isinstance(exc, StoreError)
                                                      and getattr(exc, "exit_code", 2) != 3):
        return WorkerOutcome(stats, error=("config", str(exc)), pid=os.getpid())
    failure = stage_failure(exc, stage) if stage is not None else None
    if failure is not None:
        return WorkerOutcome(stats, failure=(failure.stage, failure.item_id, failure.kind, failure.error,
                                             failure.fix), pid=os.getpid())
    kind = classify(exc, stage).kind if stage is not None else "transient"
    return WorkerOutcome(stats, error=("transient" if kind == "transient" else "config", f"{type(exc).__name__}: "
                                       f"{exc}"), pid=os.getpid())


async def run_partition(job: WorkerJob, on_live: Callable[[dict[str, Any]], None] | None = None) -> WorkerOutcome:
    """Run the job's partition of its stage in this process (see module docs); never raises but on cancellation."""
    from fabrika.pipeline import registry

    registry.load_modules(list(job.pipeline.plugins))
    registry.load_modules()
    pipeline = job.pipeline
    run_dir = Path(job.run_dir)
    store = RunStore(run_dir)
    stats = StageStats()
    cfg = next(s for s in pipeline.stages if s.stage_name == job.stage)
    resources: dict[str, Any] = {}
    engine: Any = None
    stage: Stage | None = None
    last = [0.0]

    def live(_name: str, st: StageStats) -> None:
        now = time.monotonic()
        if on_live is not None and now - last[0] >= LIVE_EVERY_S:
            last[0] = now
            on_live(live_counters(st))

    try:
        engine = build_engine_for(pipeline, run_dir, pipeline.llm.cache_only)
        ctx = RunContext(job.stage, store=store, pipeline=pipeline, llm=StageLLM(engine, job.stage, stats.llm),
                         backend_name=job.backend_name, report=stats.report, resources=resources,
                         annotators=job.annotators)
        stage = STAGES[cfg.kind](cfg, ctx)
        fleet_down = getattr(engine, "fleet_down", None)
        services = StageServices(store=store, pipeline=pipeline, resume=True, progress=RunProgress(enabled=False),
                                 backend_name=job.backend_name, max_failure_rate=pipeline.llm.max_failure_rate,
                                 live=live, fleet_down=fleet_down if callable(fleet_down) else None)
        await stage.setup()
        try:
            await run_items(services, stage, stats, None, partition=job.partition)
        finally:
            await stage.teardown()
        outcome = WorkerOutcome(stats, pid=os.getpid())
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - classified for the driver, which stops or retries
        outcome = _outcome_of(exc, stage, stats)
    finally:
        await close_resources(resources)
        if engine is not None and hasattr(engine, "aclose"):
            await engine.aclose()
    totals = getattr(getattr(engine, "accounting", None), "totals", None)
    if callable(totals):
        outcome.accounting = dict(totals())
    return outcome


def _die_with_parent(parent: int | None) -> None:
    """Ask Linux to SIGKILL this process when the driver dies (what it finished is in its journal)."""
    if parent is None or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the driver died before the request took effect
        os._exit(1)


def encode(message: Any) -> bytes:
    """One protocol line: a pickled message, base64 (no newline inside)."""
    return base64.b64encode(pickle.dumps(message)) + b"\n"


def decode(line: bytes) -> Any:
    return pickle.loads(base64.b64decode(line))  # noqa: S301 - between this run's driver and its own workers


def _send(kind: str, job_id: int, payload: Any) -> None:
    sys.stdout.buffer.write(PREFIX + encode((kind, job_id, payload)))
    sys.stdout.buffer.flush()


def _forget(tasks: dict[int, Any], job_id: int, _task: Any) -> None:
    tasks.pop(job_id, None)


async def serve() -> None:
    """The worker's loop: ``("run", id, job)`` starts a job, ``("cancel", id)`` stops it (it saves what
    finished), ``("exit",)`` or the end of stdin ends the process. Replies on stdout, one line each:
    ``("live", id, counters)`` and ``("done", id, outcome)``, after :data:`PREFIX`."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the driver, which cancels its jobs here
    guard_default_executor(loop)
    # SIGTERM stops like the runner, whatever the job is doing: finished items are saved (stopping.py)
    with StopOnSignals(loop, main, signals=(signal.SIGTERM,),
                       hard_stop_line="finished items are in this worker's journal; the driver resumes it",
                       notice=False):
        await _serve(loop)


async def _serve(loop: asyncio.AbstractEventLoop) -> None:
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: dict[int, asyncio.Task[None]] = {}

    async def one(job_id: int, job: WorkerJob) -> None:
        try:
            outcome = await run_partition(job, lambda counters: _send("live", job_id, counters))
        except (asyncio.CancelledError, KeyboardInterrupt):  # cancelled, or stopped in the middle of a step
            _send("cancelled", job_id, None)
            raise
        _send("done", job_id, outcome)

    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            message = decode(line)
            if message[0] == "run":
                job_id = message[1]
                task = tasks[job_id] = asyncio.create_task(one(job_id, message[2]))
                task.add_done_callback(partial(_forget, tasks, job_id))
            elif message[0] == "cancel" and message[1] in tasks:
                tasks[message[1]].cancel()
            elif message[0] == "exit":
                break
    finally:
        for task in list(tasks.values()):
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


def preload(modules: Sequence[str]) -> None:
    """Import what the jobs will need before the first arrives (the driver starts its workers when the
    run starts, so this overlaps the driver's own work): ``modules`` (the run's plugins, then the
    engine's) and every fabrika stage module. A module that fails to import is left to the job, which
    meets it again and reports it as usual."""
    from fabrika.pipeline import registry

    registry.load_modules(list(modules))
    registry.load_modules()


def main(argv: list[str]) -> int:
    """The subprocess entry (argv: the driver's pid, then the modules to :func:`preload`): serve jobs until
    told to exit.

    Every job saved its items before it answered, so at the end the worker leaves with ``os._exit``
    once its output is flushed (the interpreter's teardown of the modules it loaded would take the
    driver's time: it waits for its workers before it materialises). Stopped by SIGTERM it exits 143
    with ``os._exit`` once its jobs saved what they finished, so a thread-pool thread still computing
    does not keep it alive."""
    _die_with_parent(int(argv[0]) if argv else None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the driver, which stops its workers
    try:
        preload(argv[1:])
        asyncio.run(serve())
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        code = exc.exit_code if isinstance(exc, RunStopped) else 128 + signal.SIGTERM
        sys.stdout.flush()
        os._exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
