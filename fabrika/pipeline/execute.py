"""Running one stage's work: a per-item stage's items, or a global stage's ``run_all``.

Per-item stages: input rows are pulled lazily, ids already written are skipped
(resume; a bounded :class:`~fabrika.store.done_ids.DoneIds` set), at most
``max_in_flight`` items are in ``process`` at once, every finished item is appended
to the stage's journal (fsynced about every ``DURABLE_SECONDS``) and a shard is
written every ``chunk_size`` finished items (or every ``FLUSH_SECONDS``), so a crash
loses only the items in flight and memory stays flat.

What happens to an item follows the one failure taxonomy (:mod:`fabrika.pipeline.taxonomy`):

* rows (``ok`` or rejections) are written; an empty answer becomes ``no_output``;
* an item left pending by the LLM (:mod:`fabrika.pipeline.llm_wrap`: the engine already
  retried its requests) writes nothing; the next run asks again. When an item goes pending
  while every endpoint's circuit is open (``fleet_down``) the stage stops feeding items at
  once, and when the share of recently finished items that failed for LLM reasons passes
  ``llm.max_failure_rate`` it stops too (``stats.stopped_early``);
* an item whose stage code met an infrastructure fault (sandbox worker death, framing,
  timeout, disk) is re-queued up to :data:`TRANSIENT_ROUNDS` times within the run, after a
  backoff (``StageServices.sleep``, injectable), then left pending; it never becomes a row;
* an item whose stage code raised anything else (a bug, a configuration problem, a schema
  mismatch) stops the stage at once with :class:`fabrika.errors.StageFailure`: finished items
  are saved, in-flight ones cancelled, nothing is written for the failing item.

:func:`process_item` is the one definition of "run ``process`` on one item" (the local loop
here and the Ray workers, :mod:`fabrika.ray.items`, both use it): the rows get
``input_id``/``status``/``llm_backend``, and an exception is classified, never a row.
Rows a run of an older fabrika wrote as ``internal_error`` are not results: a stage that has
them is redone on resume (:func:`drop_legacy_internal_errors`; cached answers are reused).

Which stage runs when, and what the run's outcome is, is the scheduler's job
(:mod:`fabrika.pipeline.runner`); what the manifest says is the store's
(:class:`fabrika.store.manifest.RunManifest`). This module gets what it needs in a
:class:`StageServices` and reports through :class:`~fabrika.pipeline.outcome.StageStats`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator

from rich.console import Console

from fabrika.pipeline.config import inputs_of
from fabrika.pipeline.llm_wrap import ITEM_LAST_ANSWER, ITEM_STATE, ItemState
from fabrika.pipeline.outcome import MIN_ITEMS_FOR_RATE, StageStats
from fabrika.pipeline.partition import Partition
from fabrika.pipeline.request_log import REQUEST_SCOPE, GlobalRequestLog, attach
from fabrika.pipeline.stage import Row, Stage, is_rejection, rejected
from fabrika.pipeline.taxonomy import Failure, InputRow, classify, stop
from fabrika.store.done_ids import DoneIds
from fabrika.store.journal import JOURNAL, StageJournal
from fabrika.store.shards import flatten_row

if TYPE_CHECKING:
    from fabrika.pipeline.config import PipelineConfig
    from fabrika.pipeline.progress import RunProgress
    from fabrika.store.run import RunStore

#: What an input feed yields when no row is ready yet but more will come (an upstream still
#: writing, :mod:`fabrika.pipeline.overlap`): the item loop waits a little and asks again.
STARVED: Any = object()
#: A starved loop with nothing in flight waits this long before it asks its feed again.
STARVED_WAIT = 0.1
FLUSH_SECONDS = 30.0
#: Finished items reach the disk (the stage journal, fsynced) within about this long.
DURABLE_SECONDS = 1.0
#: Rounds an item that met an infrastructure fault in stage code is re-queued within the run.
TRANSIENT_ROUNDS = 2
#: Wait before each of those rounds (seconds; the last value repeats).
TRANSIENT_BACKOFF_S = (2.0, 8.0)
#: At most this many items wait for a transient retry at once (more are left to the next run).
TRANSIENT_QUEUE = 4096
#: Reason prefix of the rows older runs wrote for an exception in stage code (never written now).
LEGACY_INTERNAL_ERROR = "internal_error"
console = Console(stderr=True)


def finish_rows(out: Any, item_id: str | None, backend_name: str, backends: set[str] | None = None) -> list[Row]:
    """Fill the runner's columns of ``process``/``run_all`` output (see :mod:`fabrika.pipeline.stage`)."""
    if not isinstance(out, list) or not all(isinstance(r, dict) and r.get("id") for r in out):
        raise TypeError(f"process() must return a list of row dicts with an 'id', got {type(out).__name__}")
    # labelled by the backends whose answers the item used (a cached answer keeps its origin)
    label = "+".join(sorted(backends)) if backends else backend_name
    rows = []
    for r in out:
        row = dict(r)
        row.setdefault("status", "ok")
        row.setdefault("reason", None)
        row["input_id"] = item_id if item_id is not None else row.get("input_id")
        row.setdefault("llm_backend", label)
        rows.append(row)
    return rows


def new_items(stage: Stage, rows: Iterator[Any], done: Any, stats: StageStats,
              on_skip: Callable[[], None], owns: Callable[[str], bool] | None = None) -> Iterator[Any]:
    """``(item_id, row)`` for each input item not yet written, up to the stage's ``max_items``.

    Counts ``seen`` and ``skipped`` in ``stats`` and adds each yielded id to ``done``, so
    a resumed stage never processes an id twice (contract 1); ``on_skip`` is called for
    each already written item (the progress line). :data:`STARVED` from ``rows`` is passed on.
    ``owns``: only the items it accepts (an LLM worker's partition); ``max_items`` still counts
    every input row, so the worker takes its share of the same first ``max_items`` items.
    """
    max_items = stage.config.max_items
    read = 0
    while max_items is None or read < max_items:
        row = next(rows, None)
        if row is None:
            return
        if row is STARVED:
            yield STARVED
            continue
        read += 1
        item_id = stage.item_id(row)
        if owns is not None and not owns(item_id):
            continue
        stats.seen += 1
        if item_id in done:
            stats.skipped += 1
            on_skip()
            continue
        done.add(item_id)
        yield item_id, row


@dataclass
class ItemResult:
    """One processed item: its rows (``None`` = nothing to write) and what happened.

    ``rows is None`` means pending (an LLM outage, or ``transient``: an infrastructure fault in
    stage code), or ``failure``: a bug or configuration problem that stops the stage
    (:mod:`fabrika.pipeline.taxonomy`); ``exception`` is what stage code raised.
    """

    item_id: str
    rows: list[Row] | None
    state: ItemState
    failure: Failure | None = None
    transient: Failure | None = None
    exception: BaseException | None = field(default=None, repr=False)

    @property
    def internal_error(self) -> bool:
        """Always ``False``: an exception in stage code is never a row (kept for older callers)."""
        return False


async def process_item(stage: Stage, row: Row, item_id: str, backend_name: str, bodies: Any = None) -> ItemResult:
    """Run ``stage.process`` on one item; never raises except on cancellation (see module docs).

    ``bodies`` (a :class:`~fabrika.store.requests.RequestBodies`): record the item's LLM requests — the
    entries ride on its first row into the stage's request-log sidecar, the bodies go there."""
    state = ItemState()
    if bodies is not None:
        state.requests, state.bodies = [], bodies
    ITEM_STATE.set(state)
    answer: list[Any] = [None, 0, 0]  # excerpt, calls started, start number of the excerpt's call
    ITEM_LAST_ANSWER.set(answer)
    if type(row) is dict:  # a missing column then raises MissingColumn: a schema mismatch, not a bug
        row = InputRow(row)
    try:
        out = finish_rows(await stage.process(row), item_id, backend_name, state.backends)
        if not out:
            out = finish_rows([rejected(item_id, "no_output: process returned no rows")], item_id, backend_name)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - classified: pending, or the stage stops (never a row)
        if state.pending is not None:  # a failure caused by the outage itself: still pending
            return ItemResult(item_id, None, state)
        failure = classify(exc, stage, row)
        if failure.kind == "transient":
            return ItemResult(item_id, None, state, transient=failure, exception=exc)
        return ItemResult(item_id, None, state, failure=failure, exception=exc)
    if answer[0] is not None:  # the reason next to the raw answer that caused it (the report's sample browser)
        for r in out:
            if r["status"] != "ok" and is_rejection(r.get("reason")) and not r.get("raw_excerpt"):
                r["raw_excerpt"] = answer[0]
    if state.pending is not None:
        return ItemResult(item_id, None, state)
    attach(out, state)
    return ItemResult(item_id, out, state)


def request_bodies(store: "RunStore", stage: Stage) -> Any:
    """Where the stage's request bodies go (:class:`~fabrika.store.requests.RequestBodies` of the run), or
    ``None`` for a stage that declares it never calls the LLM."""
    if not getattr(type(stage), "calls_llm", True):
        return None
    from fabrika.store.requests import RequestBodies

    return RequestBodies.for_run(store.run_dir)


def drop_legacy_internal_errors(store: "RunStore", name: str) -> int:
    """Rows an older fabrika wrote for an exception in stage code (``internal_error: ...``) are not
    results: when the stage has any, its output is dropped so that resume redoes it (answers come
    from the cache). Returns how many such rows there were."""
    import polars as pl

    lf = store.scan_raw(name)
    if lf is None or "reason" not in lf.collect_schema().names():
        return 0
    legacy = int(lf.select(pl.col("reason").cast(pl.Utf8).str.starts_with(LEGACY_INTERNAL_ERROR).sum())
                 .collect().item() or 0)
    if legacy:
        had_epoch = store.epoch(name) is not None
        store.drop_stage(name)
        if had_epoch:
            store.epoch(name, create=True)  # its streaming consumers see that what they read is gone
    return legacy


@dataclass
class StageServices:
    """What running a stage's work needs from its run, handed over by the scheduler."""

    store: "RunStore"
    pipeline: "PipelineConfig"
    resume: bool
    progress: "RunProgress"
    backend_name: str
    #: ``llm.max_failure_rate``: past it (over the recent items) a stage stops feeding items
    max_failure_rate: float
    #: refreshes the manifest entry of a running stage (throttled by the manifest)
    live: Callable[[str, StageStats], None]
    #: True while every LLM endpoint's circuit is open (the engine's ``fleet_down``); None: never
    fleet_down: Callable[[], bool] | None = None
    #: the wait before a transient round; None: :func:`transient_wait` (tests inject a clock here)
    sleep: Callable[[float], Awaitable[None]] | None = None
    #: ``--cache-only``: engines built for this run's LLM workers answer from the cache only
    cache_only: bool = False


def item_total(stage: Stage, count_rows: Callable[[str], int] | None) -> int | None:
    """The progress total of a per-item stage: its input's gated rows, capped by ``max_items``."""
    cfg = stage.config
    total = None
    if cfg.input is not None and count_rows is not None:
        total = sum(count_rows(src) for src in inputs_of(cfg))
    if cfg.max_items is not None:
        total = cfg.max_items if total is None else min(total, cfg.max_items)
    return total


class FailureWindow:
    """LLM failures among the last items: a server that dies late in a long run stops the stage
    within a window, instead of after a fifth of everything that came before."""

    def __init__(self, size: int, max_rate: float) -> None:
        self.window: deque[bool] = deque(maxlen=max(MIN_ITEMS_FOR_RATE, size))
        self.failed = 0
        self.max_rate = max_rate

    def observe(self, failed: bool) -> None:
        if len(self.window) == self.window.maxlen:
            self.failed -= self.window[0]
        self.window.append(failed)
        self.failed += failed

    def too_many(self) -> bool:
        return len(self.window) >= MIN_ITEMS_FOR_RATE and self.failed > self.max_rate * len(self.window)


def count_item(stats: StageStats, out: list[Row] | None, state: ItemState, window: FailureWindow) -> None:
    """Add one finished item (``out is None``: left pending) to the stage's counters."""
    if out is None:
        stats.pending += 1
        miss = state.pending is not None and state.pending.kind == "cache_miss"
        stats.cache_miss += miss
        if not miss:
            window.observe(True)
        return
    stats.processed += 1
    ok_rows = sum(r["status"] == "ok" for r in out)
    stats.ok_rows += ok_rows
    stats.rejected += sum(r["status"] != "ok" and is_rejection(r.get("reason")) for r in out)
    stats.passed_over += sum(r["status"] != "ok" and not is_rejection(r.get("reason")) for r in out)
    llm_failed = state.terminal is not None and not ok_rows
    stats.llm_failed += llm_failed
    window.observe(llm_failed)


async def transient_wait(seconds: float) -> None:
    """The backoff before a transient round (a module function so tests can replace the clock)."""
    await asyncio.sleep(seconds)


def fleet_outage(state: ItemState) -> bool:
    """An item left pending by an endpoint that is down (not by ``--cache-only``, not by a 4xx)."""
    return state.pending is not None and state.pending.kind in ("timeout", "connection", "server", "unavailable")


def prepare_resume(services: StageServices, stage: Stage, stats: StageStats) -> DoneIds:
    """The ids already written, after whole items left in the stage's journals (its own and its LLM
    workers') became a shard, and rows of an older fabrika that recorded exceptions were dropped."""
    store = services.store
    name = stage.name
    done = store.done_ids(name) if services.resume else DoneIds()
    stats.recovered = store.recover_journal(name, done)
    if stats.recovered:
        console.print(f"{name}: recovered {stats.recovered} finished row(s) from the journal of a stopped run")
    legacy = drop_legacy_internal_errors(store, name) if services.resume else 0
    if legacy:
        console.print(f"[yellow]{name}:[/] {legacy} row(s) of an older run record an exception as "
                      "internal_error; re-processing the stage (answers to unchanged requests come from the cache)")
        stats.reprocessed.append(f"{legacy} legacy internal_error row(s)")
        stats.recovered = 0
        done = DoneIds()
    return done


async def run_items(services: StageServices, stage: Stage, stats: StageStats,
                    count_rows: Callable[[str], int] | None = None, rows: Iterator[Any] | None = None,
                    partition: Partition | None = None) -> None:
    """Process every not-yet-written item of a per-item stage in this process (see module docs).

    ``rows`` replaces ``stage.input_rows()`` (an upstream followed as it grows; it may yield
    :data:`STARVED`); ``count_rows`` gives the progress total (``None``: unknown). ``partition``:
    this process is one of the stage's LLM workers (:mod:`fabrika.pipeline.llm_workers`): only the
    items it owns, its own journal, and no journal recovery (the driver did that before starting
    the workers). Raises :class:`~fabrika.errors.StageFailure` when an item hits a bug or a
    configuration problem.
    """
    cfg = stage.config
    name = stage.name
    store = services.store
    progress = services.progress
    limit = cfg.max_in_flight or services.pipeline.max_in_flight
    done = prepare_resume(services, stage, stats) if partition is None else store.done_ids(name)
    task = progress.add(name, item_total(stage, count_rows))
    feed = iter(stage.input_rows()) if rows is None else rows
    items = new_items(stage, feed, done, stats, lambda: progress.advance(task, stats),
                      owns=None if partition is None else partition.owns)
    pending: list[list[Row]] = []  # finished items' rows, flattened, not yet in a shard (they are in the journal)
    journal = StageJournal(store.stage_dir(name), DURABLE_SECONDS / 2,  # + the wait below: <= ~1 s
                           JOURNAL if partition is None else partition.journal)
    last_flush = time.monotonic()
    in_flight: dict[asyncio.Task, tuple[str, Row]] = {}
    exhausted = False
    window = FailureWindow(2 * limit, services.max_failure_rate)
    #: items that met an infrastructure fault, re-queued for the next transient round
    again: list[tuple[str, Row]] = []
    rounds = 0

    def flush(all_items: bool) -> None:
        nonlocal pending, last_flush
        wrote = False
        while len(pending) >= cfg.chunk_size or (all_items and pending):
            rows = [r for item in pending[: cfg.chunk_size] for r in item]
            if bodies is not None:
                bodies.flush()
            store.write(name, rows, flat=True)
            pending = pending[cfg.chunk_size :]  # only once written: a failed write keeps them (and the journal)
            stats.shards += 1
            stats.rows_written += len(rows)
            wrote = True
        if wrote:
            journal.rewrite((r for item in pending for r in item), flat=True)
        last_flush = time.monotonic()
        services.live(name, stats)

    def stop_feeding(why: str) -> None:
        nonlocal exhausted
        exhausted = True  # let what is in flight finish, then report
        stats.stopped_early = True
        again.clear()
        console.print(f"[bold red]{name}: {why}; stopping the stage")

    def finished_item(result: ItemResult, item: tuple[str, Row]) -> None:
        if result.failure is not None:  # a bug or a configuration problem: the stage stops here
            raise stop(name, result.item_id, result.failure) from result.exception
        if result.transient is not None:
            stats.transient += 1
            if rounds < TRANSIENT_ROUNDS and len(again) < TRANSIENT_QUEUE and not stats.stopped_early:
                again.append(item)  # retried in the next round, counted once it is final
                return
        count_item(stats, result.rows, result.state, window)
        if result.rows is not None:
            flat = [flatten_row(r) for r in result.rows]  # once, for the journal and for the shard
            journal.append(flat, flat=True)
            pending.append(flat)
        elif (not exhausted and fleet_outage(result.state) and services.fleet_down is not None
              and services.fleet_down()):
            stop_feeding("every LLM endpoint's circuit is open (the fleet is down or hung)")
        progress.advance(task, stats)

    saved = False
    bodies = request_bodies(store, stage)
    try:
        while True:
            starved = False
            while not exhausted and len(in_flight) < limit:
                item = next(items, None)
                if item is None:
                    exhausted = True
                    break
                if item is STARVED:
                    starved = True
                    break
                in_flight[asyncio.create_task(process_item(stage, item[1], item[0], services.backend_name,
                                                           bodies))] = item
            if not in_flight:
                if not starved:
                    if again and exhausted and not stats.stopped_early:  # a bounded transient round
                        wait = TRANSIENT_BACKOFF_S[min(rounds, len(TRANSIENT_BACKOFF_S) - 1)]
                        console.print(f"[yellow]{name}:[/] {len(again)} item(s) met an infrastructure fault "
                                      f"({stats.last_transient}); retrying them in {wait:g} s "
                                      f"(round {rounds + 1} of {TRANSIENT_ROUNDS})")
                        journal.maybe_sync()
                        await (services.sleep or transient_wait)(wait)
                        rounds += 1
                        items, again = iter(list(again)), []
                        exhausted = False
                        continue
                    break
                await asyncio.sleep(STARVED_WAIT)
                journal.maybe_sync()
                if pending and time.monotonic() - last_flush > FLUSH_SECONDS:
                    flush(all_items=True)
                continue
            finished, _ = await asyncio.wait(in_flight, timeout=DURABLE_SECONDS / 2,
                                             return_when=asyncio.FIRST_COMPLETED)
            if finished and bodies is not None:
                bodies.flush()  # the bodies of what is journaled next are on disk first
            for t in sorted(finished, key=lambda t: in_flight[t][0]):  # one order however they finished
                item = in_flight.pop(t)
                result = t.result()
                if result.transient is not None:
                    stats.last_transient = result.transient.error
                finished_item(result, item)
            journal.maybe_sync()
            if not exhausted and window.too_many():
                stop_feeding(f"{window.failed} of the last {len(window.window)} items failed "
                             f"(llm.max_failure_rate={services.max_failure_rate:g})")
            if len(pending) >= cfg.chunk_size:
                flush(all_items=False)
            elif pending and time.monotonic() - last_flush > FLUSH_SECONDS:
                flush(all_items=True)
        flush(all_items=True)
        saved = True
    except BaseException:
        # interrupted (Ctrl-C, SIGTERM) or stopped: keep what already finished, lose only what was in flight
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
        if bodies is not None:
            bodies.release()
        progress.finish(task, stats)


async def run_global(services: StageServices, stage: Stage, stats: StageStats) -> None:
    """A global stage from scratch: ``run_all`` over its whole input, each yielded chunk one shard.

    Its LLM requests are logged in a :class:`~fabrika.pipeline.request_log.GlobalRequestLog`: each chunk is
    written when the next one comes (or ``run_all`` ends), with the entries of the rows it holds and the
    stage's shared ones so far; the last shard takes every entry not written yet. An unfinished global stage
    is redone from scratch, so its shards and their logs never mix two runs."""
    name = stage.name
    store = services.store
    task = services.progress.add(name, None)
    store.drop_stage(name)
    seen = 0
    bodies = request_bodies(store, stage)
    log = GlobalRequestLog(bodies) if bodies is not None else None
    token = REQUEST_SCOPE.set(log.shared) if log is not None else None

    def counted() -> Iterator[Row]:
        nonlocal seen
        for row in stage.input_rows():
            seen += 1
            yield row

    def write(rows: list[Row], final: bool) -> None:
        if log is not None:
            log.take(rows, final)
            bodies.flush()  # the bodies of a shard's requests are on disk before it
        store.write(name, rows)
        stats.shards += 1
        stats.rows_written += len(rows)

    held: list[Row] | None = None
    try:
        async for chunk in stage.run_all(counted()):
            if chunk:
                rows = finish_rows(list(chunk), None, services.backend_name)
                stats.ok_rows += sum(r["status"] == "ok" for r in rows)
                if held is not None:
                    write(held, False)
                held = rows
                stats.processed = seen
                stats.seen = seen
                services.progress.advance(task, stats)
        if held is not None:
            write(held, True)
            held = None
        elif log is not None and log.sent():  # no row to carry them: the bodies are kept, the count is said
            stats.report["requests_without_rows"] = log.sent()
    except Exception:
        if held is not None:  # what was made stays written, as before (the stage is redone anyway)
            write(held, True)
        raise
    finally:
        if token is not None:
            REQUEST_SCOPE.reset(token)
        if bodies is not None:
            bodies.release()
        stats.seen = stats.processed = seen
        services.progress.finish(task, stats)


def skip_global(services: StageServices, stage: Stage, stats: StageStats) -> None:
    """A global stage done in an earlier invocation on the same input: count it, write nothing."""
    task = services.progress.add(stage.name, None)
    services.progress.finish(task, stats)


__all__ = ["DURABLE_SECONDS", "FLUSH_SECONDS", "LEGACY_INTERNAL_ERROR", "STARVED", "TRANSIENT_BACKOFF_S",
           "TRANSIENT_QUEUE", "TRANSIENT_ROUNDS", "ItemResult", "StageServices", "drop_legacy_internal_errors",
           "finish_rows", "fleet_outage", "item_total", "new_items", "prepare_resume", "process_item", "run_global",
           "run_items", "skip_global", "transient_wait"]
