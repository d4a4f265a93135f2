"""Runs a pipeline: stages in dependency order, resumable, concurrent, streaming.

This module schedules: which stage runs when (a stage starts once the stages it
depends on are done, ``max_parallel_stages`` at a time, so independent branches
overlap; with ``overlap: true`` a stage that :mod:`fabrika.pipeline.overlap` allows
starts on its upstream's committed shards instead), whether a stage's rows
still hold (its config fingerprint — its own settings, the LLM settings that
change answers, the seed and its inputs' fingerprints — against the manifest's;
a changed one redoes the stage with answers to unchanged requests from the
cache) and what the run's outcome is. Running a stage's items is
:mod:`fabrika.pipeline.execute` (resume by id, bounded concurrency, journal and
atomic shards); the manifest is :class:`fabrika.store.manifest.RunManifest`.
Global stages run ``run_all`` and are redone from scratch unless they completed
on the same input.

An item whose LLM answer failed for a reason outside the item (outage, rate
limit, open breaker, wrong key or model, ``--cache-only`` miss —
:mod:`fabrika.pipeline.llm_wrap`) is left *pending*: nothing is written and the
next run asks again. A run that ends with pending items, or with a stage whose
LLM failure rate passed ``llm.max_failure_rate`` (such a stage stops early, and
stages not started yet are skipped), is *incomplete*: :attr:`RunResult.problems`
says why in one line per stage, the manifest says ``incomplete`` and no version
is materialised unless ``allow_partial``. An exception escaping stage code — in an item,
``setup`` or ``run_all`` — that is a bug or a configuration problem stops the run with
:class:`fabrika.errors.StageFailure` (one line: stage, item, exception, fix; see
:mod:`fabrika.pipeline.taxonomy`); nothing is written for that item, and the same
command after the fix completes the run. One process at a time writes a run
directory (:func:`fabrika.store.lock.hold_run_dir`). SIGTERM and SIGINT stop a run in
any step (:mod:`fabrika.pipeline.stopping`): finished items are saved, the manifest says
``interrupted`` and :class:`~fabrika.pipeline.stopping.RunStopped` is raised. Shard content is sorted by
id; the union of shards does not depend on the order in which items completed
(DESIGN contract 7).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rich.console import Console

from fabrika.errors import ConfigError, InputError, StageFailure, StoreError
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
from fabrika.pipeline.context import RunContext
from fabrika.pipeline.execute import StageServices, run_global, run_items, skip_global
from fabrika.pipeline.executors import executor_for
from fabrika.pipeline.fingerprint import changed_fields, stage_fingerprints
from fabrika.pipeline.lifecycle import backend_of, build_engine_for, close_resources, first_error, probe_llm
from fabrika.pipeline.lineage import row_readers
from fabrika.pipeline.llm_workers import (
    LLM_LAUNCHER,
    LLMLauncher,
    SubprocessLauncher,
    merge_accounting,
    run_llm_workers,
    start_llm_workers,
    uses_llm_workers,
)
from fabrika.pipeline.llm_wrap import StageLLM
from fabrika.pipeline.outcome import StageStats, run_problems, run_warnings
from fabrika.pipeline.overlap import ReadRecord, UpstreamTail, load_record, streaming_inputs, verify_read
from fabrika.pipeline.progress import RunProgress
from fabrika.pipeline.stage import STAGES, Stage, StageConfig
from fabrika.pipeline.stopping import StopOnSignals, stoppable_with
from fabrika.pipeline.taxonomy import classify, stage_failure
from fabrika.schemas.ids import stable_id
from fabrika.store.lock import hold_run_dir
from fabrika.store.manifest import RunManifest, base_manifest
from fabrika.store.run import RunStore
from fabrika.store.versions import VersionInfo, materialise

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


class PipelineRun:
    """One invocation of a pipeline: which stage runs when, and what the run's outcome is.

    A stage's items run in :mod:`fabrika.pipeline.execute` (or on the executor's workers);
    the manifest is kept by :class:`~fabrika.store.manifest.RunManifest`.
    """

    def __init__(self, config: PipelineConfig, engine: Any, resume: bool, progress: bool,
                 until: Sequence[str] | None = None, log_every: float = 30.0, cache_only: bool = False) -> None:
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
        #: run-wide shared objects (sandbox pools, embedders), closed after the last stage
        self.resources: dict[str, Any] = {}
        self.stats: dict[str, StageStats] = {}
        snapshot = getattr(getattr(engine, "accounting", None), "snapshot", None)
        #: accounting snapshots of the LLM worker processes' engines (``llm_workers``), added to the driver's
        self.worker_accounting: list[dict[str, Any]] = []
        accounting = self._accounting(snapshot) if callable(snapshot) else None
        self.progress = RunProgress(enabled=progress, log_every=log_every, expected_stages=len(self.stages),
                                    accounting=accounting)
        self.manifest = RunManifest(self.store, accounting)
        self.fingerprints = stage_fingerprints(config)
        self.max_failure_rate = config.llm.max_failure_rate
        #: where per-item stages run (``executor: local | ray``, :mod:`fabrika.pipeline.executors`)
        self.executor = executor_for(config)
        #: ``{stage: upstream}``: stages that start on their upstream's committed shards (``overlap: true``)
        self.streams = streaming_inputs(config, self.stages)
        self.streamed = set(self.streams.values())
        self.finished: dict[str, asyncio.Event] = {}
        fleet_down = getattr(engine, "fleet_down", None)
        self.services = StageServices(store=self.store, pipeline=config, resume=resume, progress=self.progress,
                                      backend_name=self.backend_name, max_failure_rate=self.max_failure_rate,
                                      live=self.live, fleet_down=fleet_down if callable(fleet_down) else None,
                                      cache_only=cache_only)

    def _accounting(self, snapshot: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        def combined() -> dict[str, Any]:
            if not self.worker_accounting:
                return snapshot()
            return merge_accounting([snapshot(), *self.worker_accounting])
        return combined

    def llm_launcher(self) -> LLMLauncher:
        """Where LLM workers run: the executor's launcher (Ray actors), else local subprocesses."""
        launcher: LLMLauncher | None = self.resources.get(LLM_LAUNCHER)
        if launcher is None:  # one per run: its worker processes serve every split stage, closed at the end
            make = getattr(self.executor, "llm_launcher", None)
            launcher = self.resources[LLM_LAUNCHER] = make() if callable(make) else SubprocessLauncher()
        return launcher

    @property
    def halted(self) -> str | None:
        """The stage that stopped early (stages not started yet are then skipped), if any."""
        return next((name for name, st in self.stats.items() if st.stopped_early), None)

    # -- manifest facts -------------------------------------------------------------
    def save(self, status: str) -> None:
        """Write the manifest with ``status`` (the sandbox modes the stages reported go with it)."""
        self.manifest.isolation = {str(s.report["sandbox_isolation"]) for s in self.stats.values()
                                   if "sandbox_isolation" in s.report}
        self.manifest.write(status)

    def live(self, name: str, stats: StageStats) -> None:
        self.manifest.stage_live(name, stats.live_facts())

    # -- running ------------------------------------------------------------------
    async def run(self) -> None:
        previous = self.store.read_manifest() if self.resume else {}
        cfg = self.config
        fresh = base_manifest(cfg.name, cfg.model_dump(mode="json"), cfg.source, config_hash(cfg), self.backend_name,
                              stage_layout(cfg), [s.stage_name for s in self.stages])
        self.manifest.start(fresh, previous, self.resume)
        with self.progress:
            if uses_sandbox(self.config):
                from fabrika.sandbox.policy import header_line

                self.progress.note(header_line(self.config.sandbox, self.backend_name))
            await self._schedule(previous.get("stages", {}))
        self.save("incomplete" if self.problems() else "done")

    def problems(self) -> list[str]:
        """One line per stage that did not finish (see module docstring)."""
        skipped = [c.stage_name for c in self.stages if c.stage_name not in self.stats]
        return run_problems(self.stats, self.max_failure_rate, self.halted, skipped)

    def warnings(self) -> list[str]:
        return run_warnings(self.stats, self.manifest.doc, self.store.run_dir)

    async def _schedule(self, before: dict[str, Any]) -> None:
        """Start each stage once the stages it depends on are done, at most ``max_parallel_stages`` at once.

        Independent branches overlap; outputs do not depend on the interleaving (each stage reads
        only finished tables). The first failure cancels the others (they save finished items).
        """
        deps = stage_dependencies(self.config)
        finished = self.finished = {name: asyncio.Event() for name in self.order}
        #: set once a stage's output is past its resume checks (what a streaming consumer waits for)
        ready = {name: asyncio.Event() for name in self.order}
        for name in set(self.order) - {cfg.stage_name for cfg in self.stages}:
            finished[name].set()  # not part of this invocation (--until)
            ready[name].set()
        slots = asyncio.Semaphore(self.config.max_parallel_stages)

        async def one(cfg: StageConfig) -> None:
            name = cfg.stage_name
            for dep in sorted(deps[name]):
                await (ready if self.streams.get(name) == dep else finished)[dep].wait()
            try:
                async with slots:
                    if self.halted is None:
                        await self._run_stage(cfg, before.get(name, {}), ready[name])
            finally:
                ready[name].set()
                finished[name].set()

        try:
            async with asyncio.TaskGroup() as group:
                for cfg in self.stages:
                    group.create_task(one(cfg), name=f"stage {cfg.stage_name}")
        except BaseExceptionGroup as eg:
            raise first_error(eg) from None

    def context(self, cfg: StageConfig, stats: StageStats) -> RunContext:
        """The stage's context: the annotations of each table that are final before this stage runs."""
        name = cfg.stage_name
        before = set(self.order[: self.order.index(name)] if name in self.order else self.order)
        annotators = {table: [a for a in anns if a in before] for table, anns in self.annotators.items()}
        llm = StageLLM(self.engine, name, stats.llm) if self.engine is not None else None
        return RunContext(name, store=self.store, pipeline=self.config, llm=llm,
                          backend_name=self.backend_name, report=stats.report, resources=self.resources,
                          annotators=annotators)

    async def _run_stage(self, cfg: StageConfig, before: dict[str, Any], ready: asyncio.Event) -> None:
        stats = self.stats[cfg.stage_name] = StageStats()
        stage = STAGES[cfg.kind](cfg, self.context(cfg, stats))
        try:
            await self._run_stage_work(stage, before, ready)
        except Exception as exc:
            failure = stage_failure(exc, stage)  # setup, run_all or teardown raised: the stage's bug or config
            if failure is None:
                raise
            raise failure from exc

    async def _run_stage_work(self, stage: Stage, before: dict[str, Any], ready: asyncio.Event) -> None:
        cfg = stage.config
        name = cfg.stage_name
        stats = self.stats[name]
        ctx = stage.ctx
        assert isinstance(ctx, RunContext)
        self.store.clean_temp(name)
        if not stage.global_stage:
            self._check_fingerprint(cfg, stats, before)
            if name in self.streamed:
                self.store.epoch(name, create=True)
        else:  # recorded for `fabrika status`; whether it reruns is its input fingerprint's call
            self.manifest.stage_settings(name, self.fingerprints[name][0], redact(self.fingerprints[name][1]))
        ready.set()  # from here on its shards are only appended: a streaming consumer may read them
        started = time.monotonic()
        split = uses_llm_workers(self.config, stage)  # in llm_workers processes, which set the stage up themselves
        remote = split or self.executor.takes(stage)  # its items run on workers, which set the stage up themselves
        if not remote:
            await stage.setup()
        try:
            if stage.global_stage:
                stats.fingerprint = self._input_fingerprint(cfg)
                if (self.resume and before.get("complete") and self.store.has_rows(name)
                        and before.get("input_fingerprint") == stats.fingerprint):
                    stats.seen = stats.skipped = int(before.get("seen", 0))  # done in an earlier invocation
                    skip_global(self.services, stage, stats)
                else:
                    await self._run_global(stage, stats)
            elif split:
                if name in self.streams:
                    await self.finished[self.streams[name]].wait()  # workers read finished tables only
                await run_llm_workers(self.services, stage, stats, self.llm_launcher(), ctx.annotators,
                                      ctx.count_rows, self.worker_accounting)
            elif remote:
                if name in self.streams:
                    await self.finished[self.streams[name]].wait()  # workers read finished tables only
                await self.executor.run_items(self.services, stage, stats)
            else:
                await self._run_items(stage, ctx, stats)
        finally:
            if not remote:
                await stage.teardown()
            stats.seconds = time.monotonic() - started
        complete = stats.pending == 0 and not stats.stopped_early and not (stage.global_stage and stats.llm.pending)
        dups = self.manifest.stage_finished(name, stats.manifest_facts(), complete)
        if dups:
            console.print(f"[bold red]{name}: {dups} output id(s) written more than once — ids must be unique per stage "
                          "(derive them from the inputs that make the item distinct)")

    async def _run_global(self, stage: Stage, stats: StageStats) -> None:
        """``run_all`` from scratch; an infrastructure fault escaping it (a sandbox worker death, a
        timeout, an outage the stage did not record) leaves the stage *pending* like any other: the
        stage counts as not finished, stages not started yet are skipped (they would read a partial
        table), the run exits 3 and the next run redoes it (:mod:`fabrika.pipeline.taxonomy`)."""
        try:
            await run_global(self.services, stage, stats)
        except Exception as exc:
            if isinstance(exc, (StageFailure, StoreError, ConfigError, InputError)):
                raise
            failure = classify(exc, stage)
            if failure.kind != "transient":
                raise
            stats.transient += 1
            stats.last_transient = failure.error
            stats.pending = max(1, stats.seen)
            stats.stopped_early = True
            console.print(f"[bold yellow]{stage.name}:[/] an infrastructure fault stopped run_all ({failure.error}); "
                          "the stage is left pending and redone by the next run")

    async def _run_items(self, stage: Stage, ctx: RunContext, stats: StageStats) -> None:
        """A per-item stage in this process; with overlap it follows its upstream as it grows."""
        name = stage.name
        store = self.store
        up = self.streams.get(name)
        if up is None or self.finished[up].is_set():  # its input is final
            earlier = load_record(store, name)  # rows an earlier (killed) overlapping run read early
            if earlier is not None:
                self._redo_if_unverified(stage, ctx, stats, up or str(earlier.get("upstream")))
            await run_items(self.services, stage, stats, ctx.count_rows)
            return
        record = ReadRecord(store, name, up)
        if record.doc.get("epoch") not in (None, store.epoch(up)):
            self._redo(stage, stats, f"{up}'s rows were rewritten since {name} read them")
            record = ReadRecord(store, name, up)
        tail = UpstreamTail(store, up, record, ctx.where(True), self.finished[up])
        await run_items(self.services, stage, stats, None, tail.rows())
        stats.report["overlap"] = {"upstream": up, "rows_read_early": tail.rows_early}
        if self._redo_if_unverified(stage, ctx, stats, up):
            await run_items(self.services, stage, stats, ctx.count_rows)

    def _redo_if_unverified(self, stage: Stage, ctx: RunContext, stats: StageStats, upstream: str) -> bool:
        problem, added = verify_read(self.store, stage.name, upstream, ctx.where(True))
        if added:
            stats.report["overlap_columns_added_later"] = added
        if problem is not None:
            self._redo(stage, stats, problem)
        return problem is not None

    def _redo(self, stage: Stage, stats: StageStats, why: str) -> None:
        """Drop a stage's rows and count from zero: they were made from rows its input no longer has."""
        name = stage.name
        console.print(f"[bold yellow]{name}:[/] {why}; re-processing the stage over the final table "
                      "(answers to unchanged requests come from the cache)")
        self.store.drop_stage(name)
        if name in self.streamed:
            self.store.epoch(name, create=True)  # its consumers see that what they read is gone
        stats.restart_items()
        stats.report["overlap_redone"] = why

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
        self.manifest.stage_settings(name, fp, fields)

    def _input_fingerprint(self, cfg: StageConfig) -> str:
        """What a global stage's output depends on: its config, the thresholds and its input shards
        (shard names carry a content hash; shards are immutable), so a grown input redoes the stage."""
        parts: list[Any] = [cfg.model_dump(mode="json"), self.config.filters, self.fingerprints[cfg.stage_name][0]]
        for src in inputs_of(cfg):
            for table in [src, *self.annotators.get(src, [])]:
                if table != cfg.stage_name:
                    parts.append([table, [p.name for p in self.store.shards(table)]])
        return stable_id(parts)


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
    """Async :func:`run_pipeline`. ``engine`` injects an LLM client (tests); otherwise one is built and closed.

    SIGTERM and SIGINT stop it whatever the step is doing (:mod:`fabrika.pipeline.stopping`): finished
    items are saved, the manifest says ``interrupted``, and :class:`~fabrika.pipeline.stopping.RunStopped`
    is raised (also when the signal came too late to interrupt anything: the command was asked to stop)."""
    return await stoppable_with(lambda stop: _arun_pipeline(config, resume, cache_only, progress, engine, version,
                                                            until, allow_partial, log_every, stop))


async def _arun_pipeline(config: PipelineConfig, resume: bool, cache_only: bool, progress: bool, engine: Any,
                         version: str | None, until: Sequence[str] | None, allow_partial: bool, log_every: float,
                         stop: StopOnSignals) -> RunResult:
    run_dir = config.resolved_run_dir
    if engine is None and (problem := sandbox_problem(config)):  # fail closed before any LLM call or write
        raise ConfigError(problem)
    with hold_run_dir(run_dir, f"fabrika run {config.source}"):
        launcher = None
        if config.llm_workers > 1:  # local LLM workers start now: their start-up overlaps the driver's work
            chosen = stages_until(config, until) if until else None
            launcher = await start_llm_workers(config, [s for s in config.stages if chosen is None or s.stage_name in chosen])
        try:
            own_engine = engine is None
            if own_engine and not cache_only:
                await probe_llm(config)  # an unreachable endpoint or an unknown model stops here, before any work
            if own_engine:  # its limits are one share when its LLM stages may run next to llm_workers' (partition.py)
                from fabrika.pipeline.partition import driver_config

                engine = build_engine_for(driver_config(config), run_dir, cache_only)
            return await _run_locked(config, run_dir, resume, progress, engine, own_engine, version, until,
                                     allow_partial, log_every, cache_only, stop, launcher)
        finally:
            if launcher is not None:  # (the run closed it with its resources, unless it stopped before)
                await launcher.aclose()


async def _run_locked(config: PipelineConfig, run_dir: Path, resume: bool, progress: bool, engine: Any,
                      own_engine: bool, version: str | None, until: Sequence[str] | None,
                      allow_partial: bool, log_every: float, cache_only: bool = False,
                      stop: StopOnSignals | None = None, launcher: LLMLauncher | None = None) -> RunResult:
    store = RunStore(run_dir)
    if not resume:
        store.reset()
    run_dir.mkdir(parents=True, exist_ok=True)
    run = PipelineRun(config, engine, resume, progress, until, log_every, cache_only)
    if launcher is not None:  # started with the run (start_llm_workers): its workers serve every split stage
        run.resources[LLM_LAUNCHER] = launcher
    try:  # a stop (SIGTERM, SIGINT) cancels this task or raises RunStopped here: finished items are saved
        await run.run()
    except BaseException as exc:
        interrupted = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
        try:
            run.save("interrupted" if interrupted else "failed")
        except StoreError:
            pass
        raise
    finally:
        await close_resources(run.resources)
        if own_engine and hasattr(engine, "aclose"):
            await engine.aclose()
    problems, warnings = run.problems(), run.warnings()
    for w in warnings:
        console.print(f"[bold red]{w}")
    info = None
    ran_all = len(run.stages) == len(config.stages)  # --until: a partial pipeline is not a dataset
    if stop is not None and stop.stopped is not None:  # asked to stop after the last stage: no version now
        raise stop.stopped
    if config.dataset.stages and ran_all and (not problems or allow_partial):
        info = materialise(run_dir, name=version or config.dataset.version, traceable=row_readers(stage_layout(config)))
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
