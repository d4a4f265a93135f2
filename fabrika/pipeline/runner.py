"""Runs a pipeline: stages in dependency order, resumable, concurrent, streaming.

Per-item stages: the runner pulls ``input_rows()`` lazily, skips ids already
written (resume; a bounded :class:`~fabrika.store.done_ids.DoneIds` set), keeps
at most ``max_in_flight`` items in ``process`` at once, appends every finished
item to the stage's journal (fsynced about every ``DURABLE_SECONDS``) and writes
a shard every ``chunk_size`` finished items (or every ``FLUSH_SECONDS``), so a
crash loses only the items in flight and memory stays flat.
An exception escaping ``process`` is recorded as a rejection
``internal_error: <type>: <msg>`` and counted loudly. Global stages run
``run_all`` and are redone from scratch unless they completed.

An item whose LLM answer failed for a reason outside the item (outage, rate
limit, open breaker, wrong key or model, ``--cache-only`` miss —
:mod:`fabrika.pipeline.llm_wrap`) is left *pending*: nothing is written and the
next run asks again. A run that ends with pending items, or with a stage whose
LLM failure rate passed ``llm.max_failure_rate`` (such a stage stops early), is
*incomplete*: :attr:`RunResult.problems` says why in one line per stage, the
manifest says ``incomplete`` and no version is materialised unless
``allow_partial``.

Each per-item stage's config fingerprint (its own settings, the LLM settings
that change answers, the seed and its inputs' fingerprints) is kept in the
manifest; when it changed, the stage is re-processed (answers to unchanged
requests come from the cache). One process at a time writes a run directory
(:func:`fabrika.store.lock.hold_run_dir`).
Shard content is sorted by id; the union of shards does not depend on the
order in which items completed (DESIGN contract 7). Stages whose inputs are
ready run at the same time (``max_parallel_stages``), so independent branches
overlap; each stage only ever reads finished tables.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from rich.console import Console

from fabrika.errors import ConfigError, StoreError
from fabrika.llm.redact import redact
from fabrika.pipeline.config import (
    PipelineConfig,
    config_hash,
    execution_order,
    inputs_of,
    sandbox_problem,
    stage_dependencies,
    stage_layout,
    uses_sandbox,
)
from fabrika.pipeline.executors import executor_for, finish_rows, new_items, process_item
from fabrika.pipeline.fingerprint import changed_fields, stage_fingerprints
from fabrika.pipeline.lifecycle import _first_error, backend_of, build_engine_for, close_resources, probe_llm
from fabrika.pipeline.llm_wrap import ItemState
from fabrika.pipeline.outcome import MIN_ITEMS_FOR_RATE, StageStats, run_problems, run_warnings
from fabrika.pipeline.progress import RunProgress
from fabrika.pipeline.run_context import RunContext
from fabrika.pipeline.stage import STAGES, Row, Stage, StageConfig, is_rejection
from fabrika.schemas.ids import stable_id
from fabrika.store.done_ids import DoneIds
from fabrika.store.journal import StageJournal
from fabrika.store.lock import hold_run_dir
from fabrika.store.manifest import base_manifest, now
from fabrika.store.run import RunStore
from fabrika.store.versions import VersionInfo, materialise

FLUSH_SECONDS = 30.0
#: Finished items reach the disk (the stage journal, fsynced) within about this long.
DURABLE_SECONDS = 1.0
#: A running stage refreshes its manifest entry at most this often (``fabrika status`` on a live run).
MANIFEST_SECONDS = 5.0
console = Console(stderr=True)


@dataclass
class RunResult:
    run_dir: Path
    manifest: dict[str, Any]
    version: VersionInfo | None
    stats: dict[str, StageStats]
    #: one line per stage that did not finish (pending items, failure rate past llm.max_failure_rate)
    problems: list[str] = field(default_factory=list)
    #: loud but not blocking (a stage that rejected every item)
    warnings: list[str] = field(default_factory=list)

    @property
    def internal_errors(self) -> int:
        return sum(s.internal_errors for s in self.stats.values())

    @property
    def pending(self) -> int:
        return sum(s.pending for s in self.stats.values())

    @property
    def complete(self) -> bool:
        return not self.problems


def stages_until(config: PipelineConfig, targets: Sequence[str]) -> set[str]:
    """The named stages and everything they depend on (``fabrika run --until``)."""
    deps = stage_dependencies(config)
    unknown = [t for t in targets if t not in deps]
    if unknown:
        raise ConfigError(f"--until {unknown[0]!r}: no such stage; stages: {', '.join(deps)}")
    selected: set[str] = set()
    todo = list(targets)
    while todo:
        name = todo.pop()
        if name not in selected:
            selected.add(name)
            todo.extend(deps[name])
    return selected


class _Run:
    def __init__(self, config: PipelineConfig, engine: Any, resume: bool, progress: bool,
                 until: Sequence[str] | None = None, log_every: float = 30.0) -> None:
        self.config = config
        self.engine = engine
        self.resume = resume
        self.store = RunStore(config.resolved_run_dir)
        self.backend_name = backend_of(config, engine)
        self.stages = execution_order(config)
        self.order = [s.stage_name for s in self.stages]
        if until:
            chosen = stages_until(config, until)
            self.stages = [s for s in self.stages if s.stage_name in chosen]
        self.annotators: dict[str, list[str]] = {}
        for s in config.stages:
            if STAGES[s.kind].annotates:
                for src in inputs_of(s):
                    self.annotators.setdefault(src, []).append(s.stage_name)
        self.resources: dict[str, Any] = {}
        self.stats: dict[str, StageStats] = {}
        snapshot = getattr(getattr(engine, "accounting", None), "snapshot", None)
        self.progress = RunProgress(enabled=progress, log_every=log_every, expected_stages=len(self.stages),
                                    accounting=snapshot if callable(snapshot) else None)
        self.manifest: dict[str, Any] = {}
        self._invocation: dict[str, Any] = {}
        self._last_manifest = time.monotonic()
        self.fingerprints = stage_fingerprints(config)
        self.max_failure_rate = config.llm.max_failure_rate
        #: set when a stage stopped early: stages not started yet are skipped
        self.halted: str | None = None
        #: where per-item stages run (``executor: local | ray``, :mod:`fabrika.pipeline.executors`)
        self.executor = executor_for(config)

    # -- manifest -----------------------------------------------------------------
    def _write_manifest(self, status: str) -> None:
        m = self.manifest
        m["status"] = status
        m["updated_at"] = now()
        snap = getattr(getattr(self.engine, "accounting", None), "snapshot", None)
        if callable(snap):
            try:
                m["accounting"] = snap()
            except Exception as exc:  # noqa: BLE001 - accounting must not kill a run
                m["accounting"] = {"error": f"{type(exc).__name__}: {exc}"}
        # one record per `fabrika run` of this directory: a resumed run's cost is the sum of these
        self._invocation.update(status=status, updated_at=m["updated_at"],
                                llm_totals=m.get("accounting", {}).get("totals"))
        isolation = {s.report["sandbox_isolation"] for s in self.stats.values() if "sandbox_isolation" in s.report}
        if isolation:
            m["sandbox_isolation"] = sorted(isolation)[0] if len(isolation) == 1 else sorted(isolation)
        self.store.write_manifest(m)

    def _stage_entry(self, name: str, stats: StageStats, complete: bool) -> None:
        entry = self.manifest.setdefault("stages", {}).setdefault(name, {})
        entry.update(self.store.counts(name))
        entry.update(
            complete=complete,
            seen=stats.seen,
            processed=stats.processed,
            skipped=stats.skipped,
            cache_miss=stats.cache_miss,
            internal_errors=stats.internal_errors,
            seconds=round(stats.seconds, 3),
            llm=stats.llm.as_dict(),
            report=stats.report,
        )
        if stats.fingerprint is not None:
            entry["input_fingerprint"] = stats.fingerprint
        entry.update(pending=stats.pending, recovered_from_journal=stats.recovered,
                     stopped_early=stats.stopped_early, failure_rate=round(stats.failure_rate(), 4))
        if stats.reprocessed:
            entry["reprocessed_because"] = stats.reprocessed

    def _live_entry(self, name: str, stats: StageStats) -> None:
        """Progress of a running stage in the manifest, from counters only (no pass over the store)."""
        t = time.monotonic()
        if t - self._last_manifest < MANIFEST_SECONDS:
            return
        self._last_manifest = t
        entry = self.manifest.setdefault("stages", {}).setdefault(name, {})
        entry.update(complete=False, seen=stats.seen, processed=stats.processed, skipped=stats.skipped,
                     rows_written_this_run=stats.rows_written, internal_errors=stats.internal_errors,
                     llm=stats.llm.as_dict())
        self._write_manifest("running")

    # -- running ------------------------------------------------------------------
    async def run(self) -> None:
        previous = self.store.read_manifest() if self.resume else {}
        self.manifest = base_manifest(self.config, config_hash(self.config), self.backend_name, self.stages,
                                      stage_layout(self.config))
        if previous:
            self.manifest["started_at"] = previous.get("started_at", self.manifest["started_at"])
            self.manifest["versions"] = previous.get("versions", {})
            self.manifest["stages"] = previous.get("stages", {})
            if previous.get("latest_version"):
                self.manifest["latest_version"] = previous["latest_version"]
            if previous.get("config_hash") != self.manifest["config_hash"]:
                self.manifest["config_changed_on_resume"] = True  # stages whose settings changed are redone
        self._invocation = {"started_at": now(), "resume": self.resume, "pid": os.getpid(), "host": socket.gethostname()}
        self.manifest["invocations"] = [*previous.get("invocations", []), self._invocation]
        self._write_manifest("running")
        with self.progress:
            if uses_sandbox(self.config):
                from fabrika.sandbox.policy import header_line

                self.progress.note(header_line(self.config.sandbox, self.backend_name))
            await self._schedule(previous.get("stages", {}))
        self._write_manifest("incomplete" if self.problems() else "done")

    def problems(self) -> list[str]:
        """One line per stage that did not finish (see module docstring)."""
        skipped = [c.stage_name for c in self.stages if c.stage_name not in self.stats]
        return run_problems(self.stats, self.max_failure_rate, self.halted, skipped)

    def warnings(self) -> list[str]:
        return run_warnings(self.stats, self.manifest, self.store.run_dir)

    async def _schedule(self, before: dict[str, Any]) -> None:
        """Start each stage once the stages it depends on are done, at most ``max_parallel_stages`` at once.

        Independent branches overlap; outputs do not depend on the interleaving (each stage reads
        only finished tables). The first failure cancels the others (they save finished items).
        """
        deps = stage_dependencies(self.config)
        finished = {name: asyncio.Event() for name in self.order}
        for name in set(self.order) - {cfg.stage_name for cfg in self.stages}:
            finished[name].set()  # not part of this invocation (--until)
        slots = asyncio.Semaphore(self.config.max_parallel_stages)

        async def one(cfg: StageConfig) -> None:
            for dep in sorted(deps[cfg.stage_name]):
                await finished[dep].wait()
            async with slots:
                if self.halted is None:
                    await self._run_stage(cfg, before.get(cfg.stage_name, {}))
            finished[cfg.stage_name].set()

        try:
            async with asyncio.TaskGroup() as group:
                for cfg in self.stages:
                    group.create_task(one(cfg), name=f"stage {cfg.stage_name}")
        except BaseExceptionGroup as eg:
            raise _first_error(eg) from None

    async def _run_stage(self, cfg: StageConfig, before: dict[str, Any]) -> None:
        name = cfg.stage_name
        stats = self.stats[name] = StageStats()
        ctx = RunContext(self, cfg, stats)
        stage = STAGES[cfg.kind](cfg, ctx)
        self.store.clean_temp(name)
        if not stage.global_stage:
            self._check_fingerprint(cfg, stats, before)
        started = time.monotonic()
        remote = self.executor.takes(stage)  # its items run on workers, which set the stage up themselves
        if not remote:
            await stage.setup()
        try:
            if stage.global_stage:
                await self._run_global(stage, ctx, stats, before)
            elif remote:
                await self.executor.run_items(self, stage, stats)
            else:
                await self._run_items(stage, ctx, stats)
        finally:
            if not remote:
                await stage.teardown()
            stats.seconds = time.monotonic() - started
        if stats.internal_errors:
            console.print(f"[bold red]{name}: {stats.internal_errors} item(s) failed with internal_error (a bug in the stage; see reasons)")
        self._stage_entry(name, stats, complete=stats.pending == 0 and not stats.stopped_early
                          and not (stage.global_stage and stats.llm.pending))
        dups = self.manifest["stages"][name].get("duplicate_ids", 0)
        if dups:
            console.print(f"[bold red]{name}: {dups} output id(s) written more than once — ids must be unique per stage "
                          "(derive them from the inputs that make the item distinct)")
        self._write_manifest("running")

    def _check_fingerprint(self, cfg: StageConfig, stats: StageStats, before: dict[str, Any]) -> None:
        """Redo a per-item stage whose config fingerprint changed since its rows were written."""
        name = cfg.stage_name
        fp, fields = self.fingerprints[name]
        fields = redact(fields)  # stored in the manifest: no secrets (the fingerprint itself is a hash)
        old = before.get("config_fingerprint")
        has_output = self.store.has_rows(name) or self.store.journal_rows(name) > 0
        if self.resume and old is not None and old != fp and has_output:
            stats.reprocessed = changed_fields(before.get("config_fields") or {}, fields)
            console.print(f"[yellow]{name}:[/] {', '.join(stats.reprocessed)} changed since its rows were written; "
                          "re-processing the stage (answers to unchanged requests come from the cache)")
            self.store.drop_stage(name)
        entry = self.manifest.setdefault("stages", {}).setdefault(name, {})
        entry.update(config_fingerprint=fp, config_fields=fields)
        self._write_manifest("running")

    def _input_fingerprint(self, cfg: StageConfig) -> str:
        """What a global stage's output depends on: its config, the thresholds and its input shards
        (shard names carry a content hash; shards are immutable), so a grown input redoes the stage."""
        parts: list[Any] = [cfg.model_dump(mode="json"), self.config.filters]
        for src in inputs_of(cfg):
            for table in [src, *self.annotators.get(src, [])]:
                if table != cfg.stage_name:
                    parts.append([table, [p.name for p in self.store.shards(table)]])
        return stable_id(parts)

    def _finish_rows(self, out: Any, item_id: str | None, backends: set[str] | None = None) -> list[Row]:
        return finish_rows(out, item_id, self.backend_name, backends)

    async def _one(self, stage: Stage, row: Row, item_id: str,
                   stats: StageStats) -> tuple[str, list[Row] | None, ItemState]:
        result = await process_item(stage, row, item_id, self.backend_name)
        stats.internal_errors += result.internal_error
        return item_id, result.rows, result.state

    async def _run_items(self, stage: Stage, ctx: RunContext, stats: StageStats) -> None:
        cfg = stage.config
        name = stage.name
        limit = cfg.max_in_flight or self.config.max_in_flight
        done = self.store.done_ids(name) if self.resume else DoneIds()
        stats.recovered = self.store.recover_journal(name, done)
        if stats.recovered:
            console.print(f"{name}: recovered {stats.recovered} finished row(s) from the journal of a stopped run")
        total = None
        if cfg.input is not None:
            total = sum(ctx.count_rows(src) for src in inputs_of(cfg))
        if cfg.max_items is not None:
            total = cfg.max_items if total is None else min(total, cfg.max_items)
        task = self.progress.add(name, total)
        items = new_items(stage, iter(stage.input_rows()), done, stats, lambda: self.progress.advance(task, stats))
        pending: list[list[Row]] = []  # finished items' rows, not yet in a shard (they are in the journal)
        journal = StageJournal(self.store.stage_dir(name), DURABLE_SECONDS / 2)  # + the wait below: <= ~1 s
        last_flush = time.monotonic()
        in_flight: set[asyncio.Task] = set()
        exhausted = False

        def flush(all_items: bool) -> None:
            nonlocal pending, last_flush
            wrote = False
            while len(pending) >= cfg.chunk_size or (all_items and pending):
                chunk, pending = pending[: cfg.chunk_size], pending[cfg.chunk_size :]
                rows = [r for item in chunk for r in item]
                self.store.write(name, rows)
                stats.shards += 1
                stats.rows_written += len(rows)
                wrote = True
            if wrote:
                journal.rewrite(r for item in pending for r in item)
            last_flush = time.monotonic()
            self._live_entry(name, stats)

        # the early stop looks at the last items only: a server that dies late in a long run stops the
        # stage within a window, instead of after a fifth of everything that came before
        window: deque[bool] = deque(maxlen=max(MIN_ITEMS_FOR_RATE, 2 * limit))
        failed_in_window = 0

        def observe(failed: bool) -> None:
            nonlocal failed_in_window
            if len(window) == window.maxlen:
                failed_in_window -= window[0]
            window.append(failed)
            failed_in_window += failed

        def too_many_failures() -> bool:
            return len(window) >= MIN_ITEMS_FOR_RATE and failed_in_window > self.max_failure_rate * len(window)

        saved = False
        try:
            while True:
                while not exhausted and len(in_flight) < limit:
                    item = next(items, None)
                    if item is None:
                        exhausted = True
                        break
                    item_id, row = item
                    in_flight.add(asyncio.create_task(self._one(stage, row, item_id, stats)))
                if not in_flight:
                    break
                finished, in_flight = await asyncio.wait(in_flight, timeout=DURABLE_SECONDS / 2,
                                                         return_when=asyncio.FIRST_COMPLETED)
                for t in finished:
                    _, out, state = t.result()
                    if out is None:
                        stats.pending += 1
                        miss = state.pending is not None and state.pending.kind == "cache_miss"
                        stats.cache_miss += miss
                        if not miss:
                            observe(True)
                    else:
                        stats.processed += 1
                        ok_rows = sum(r["status"] == "ok" for r in out)
                        stats.ok_rows += ok_rows
                        stats.rejected += sum(r["status"] != "ok" and is_rejection(r.get("reason")) for r in out)
                        stats.passed_over += sum(r["status"] != "ok" and not is_rejection(r.get("reason")) for r in out)
                        llm_failed = state.terminal is not None and not ok_rows
                        stats.llm_failed += llm_failed
                        observe(llm_failed)
                        journal.append(r for r in out)
                        pending.append(out)
                    self.progress.advance(task, stats)
                journal.maybe_sync()
                if not exhausted and too_many_failures():
                    exhausted = True  # stop feeding: let what is in flight finish, then report
                    stats.stopped_early = True
                    self.halted = self.halted or name
                    console.print(f"[bold red]{name}: {failed_in_window} of the last {len(window)} items failed "
                                  f"(llm.max_failure_rate={self.max_failure_rate:g}); stopping the stage")
                if len(pending) >= cfg.chunk_size:
                    flush(all_items=False)
                elif pending and time.monotonic() - last_flush > FLUSH_SECONDS:
                    flush(all_items=True)
            flush(all_items=True)
            saved = True
        except BaseException:
            # interrupted (Ctrl-C, SIGTERM) or failed: keep what already finished, lose only what was in flight
            try:
                flush(all_items=True)
                saved = True
            except Exception as exc:  # noqa: BLE001 - the original error matters more
                console.print(f"[red]{name}: could not save finished items while stopping: {exc}; "
                              "they stay in the stage journal and are recovered by the next run")
            raise
        finally:
            for t in in_flight:
                t.cancel()
            journal.close(remove=saved)
            self.progress.finish(task, stats)

    async def _run_global(self, stage: Stage, ctx: RunContext, stats: StageStats, before: dict[str, Any]) -> None:
        name = stage.name
        task = self.progress.add(name, None)
        stats.fingerprint = self._input_fingerprint(stage.config)
        if (self.resume and before.get("complete") and self.store.has_rows(name)
                and before.get("input_fingerprint") == stats.fingerprint):
            stats.seen = stats.skipped = int(before.get("seen", 0))  # done in an earlier invocation
            self.progress.finish(task, stats)
            return
        self.store.drop_stage(name)
        seen = 0

        def counted() -> Iterator[Row]:
            nonlocal seen
            for row in stage.input_rows():
                seen += 1
                yield row

        try:
            async for chunk in stage.run_all(counted()):
                if chunk:
                    rows = self._finish_rows(list(chunk), None)
                    stats.ok_rows += sum(r["status"] == "ok" for r in rows)
                    self.store.write(name, rows)
                    stats.shards += 1
                    stats.rows_written += len(rows)
                    stats.processed = seen
                    stats.seen = seen
                    self.progress.advance(task, stats)
        finally:
            stats.seen = stats.processed = seen
            self.progress.finish(task, stats)


async def arun_pipeline(
    config: PipelineConfig,
    resume: bool = True,
    cache_only: bool = False,
    progress: bool = True,
    engine: Any = None,
    version: str | None = None,
    until: Sequence[str] | None = None,
    allow_partial: bool = False,
    log_every: float = 30.0,
) -> RunResult:
    """Async :func:`run_pipeline`. ``engine`` injects an LLM client (tests); otherwise one is built and closed."""
    run_dir = config.resolved_run_dir
    if engine is None and (problem := sandbox_problem(config)):  # fail closed before any LLM call or write
        raise ConfigError(problem)
    with hold_run_dir(run_dir, f"fabrika run {config.source}"):
        own_engine = engine is None
        if own_engine and not cache_only:
            await probe_llm(config)  # an unreachable endpoint or an unknown model stops here, before any work
        if own_engine:
            engine = build_engine_for(config, run_dir, cache_only)
        return await _run_locked(config, run_dir, resume, progress, engine, own_engine, version, until,
                                 allow_partial, log_every)


async def _run_locked(config: PipelineConfig, run_dir: Path, resume: bool, progress: bool, engine: Any,
                      own_engine: bool, version: str | None, until: Sequence[str] | None,
                      allow_partial: bool, log_every: float) -> RunResult:
    store = RunStore(run_dir)
    if not resume:
        store.reset()
    run_dir.mkdir(parents=True, exist_ok=True)
    run = _Run(config, engine, resume, progress, until, log_every)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None  # a coroutine awaited by asyncio.run always runs in a task
    try:  # SIGTERM stops like Ctrl-C: finished items are written, the manifest says "interrupted"
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
        handling = True
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / platform without it
        handling = False
    try:
        await run.run()
    except BaseException as exc:
        interrupted = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
        try:
            run._write_manifest("interrupted" if interrupted else "failed")
        except StoreError:
            pass
        raise
    finally:
        if handling:
            loop.remove_signal_handler(signal.SIGTERM)
        await close_resources(run.resources)
        if own_engine and hasattr(engine, "aclose"):
            await engine.aclose()
    problems, warnings = run.problems(), run.warnings()
    for w in warnings:
        console.print(f"[bold red]{w}")
    info = None
    ran_all = len(run.stages) == len(config.stages)  # --until: a partial pipeline is not a dataset
    if config.dataset.stages and ran_all and (not problems or allow_partial):
        info = materialise(run_dir, name=version or config.dataset.version)
    return RunResult(run_dir=run_dir, manifest=store.read_manifest(), version=info, stats=run.stats,
                     problems=problems, warnings=warnings)


def run_pipeline(
    config: PipelineConfig,
    resume: bool = True,
    cache_only: bool = False,
    progress: bool = True,
    engine: Any = None,
    version: str | None = None,
    until: Sequence[str] | None = None,
    allow_partial: bool = False,
    log_every: float = 30.0,
) -> RunResult:
    """Run ``config`` and materialise ``dataset.version``; see module docs.

    ``until`` runs only the named stages and what they depend on; no version is materialised
    then (scorers that did not run would leave their gates out). A run that did not finish
    (:attr:`RunResult.problems`) materialises nothing unless ``allow_partial``. ``log_every``: seconds
    between plain progress lines when stdout is not a terminal (:mod:`fabrika.pipeline.progress`).
    """
    return asyncio.run(arun_pipeline(config, resume, cache_only, progress, engine, version, until, allow_partial,
                                     log_every))
