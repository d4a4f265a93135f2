"""Running one stage's work: a per-item stage's items, or a global stage's ``run_all``.

Per-item stages: input rows are pulled lazily, ids already written are skipped
(resume; a bounded :class:`~fabrika.store.done_ids.DoneIds` set), at most
``max_in_flight`` items are in ``process`` at once, every finished item is appended
to the stage's journal (fsynced about every ``DURABLE_SECONDS``) and a shard is
written every ``chunk_size`` finished items (or every ``FLUSH_SECONDS``), so a crash
loses only the items in flight and memory stays flat. An item left pending by an
outage (:mod:`fabrika.pipeline.llm_wrap`) writes nothing; the next run asks again.
When the share of recently finished items that failed for LLM reasons passes
``llm.max_failure_rate`` the stage stops feeding items (``stats.stopped_early``).

:func:`process_item` is the one definition of "run ``process`` on one item" (the local loop
here and the Ray workers, :mod:`fabrika.ray.items`, both use it): the rows get
``input_id``/``status``/``llm_backend``, an empty answer becomes ``no_output``, an
exception becomes ``internal_error`` and an outage leaves the item pending.

Which stage runs when, and what the run's outcome is, is the scheduler's job
(:mod:`fabrika.pipeline.runner`); what the manifest says is the store's
(:class:`fabrika.store.manifest.RunManifest`). This module gets what it needs in a
:class:`StageServices` and reports through :class:`~fabrika.pipeline.outcome.StageStats`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

from rich.console import Console

from fabrika.pipeline.config import inputs_of
from fabrika.pipeline.llm_wrap import ITEM_LAST_ANSWER, ITEM_STATE, ItemState
from fabrika.pipeline.outcome import MIN_ITEMS_FOR_RATE, StageStats
from fabrika.pipeline.stage import Row, Stage, is_rejection, rejected
from fabrika.store.done_ids import DoneIds
from fabrika.store.journal import StageJournal

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
              on_skip: Callable[[], None]) -> Iterator[Any]:
    """``(item_id, row)`` for each input item not yet written, up to the stage's ``max_items``.

    Counts ``seen`` and ``skipped`` in ``stats`` and adds each yielded id to ``done``, so
    a resumed stage never processes an id twice (contract 1); ``on_skip`` is called for
    each already written item (the progress line). :data:`STARVED` from ``rows`` is passed on.
    """
    max_items = stage.config.max_items
    while max_items is None or stats.seen < max_items:
        row = next(rows, None)
        if row is None:
            return
        if row is STARVED:
            yield STARVED
            continue
        stats.seen += 1
        item_id = stage.item_id(row)
        if item_id in done:
            stats.skipped += 1
            on_skip()
            continue
        done.add(item_id)
        yield item_id, row


@dataclass
class ItemResult:
    """One processed item: its rows (``None`` = pending, nothing to write) and what happened."""

    item_id: str
    rows: list[Row] | None
    state: ItemState
    internal_error: bool = False


async def process_item(stage: Stage, row: Row, item_id: str, backend_name: str) -> ItemResult:
    """Run ``stage.process`` on one item; never raises except on cancellation."""
    state = ItemState()
    ITEM_STATE.set(state)
    answer: list[Any] = [None, 0, 0]  # excerpt, calls started, start number of the excerpt's call
    ITEM_LAST_ANSWER.set(answer)
    internal = False
    try:
        out = finish_rows(await stage.process(row), item_id, backend_name, state.backends)
        if not out:
            out = finish_rows([rejected(item_id, "no_output: process returned no rows")], item_id, backend_name)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded as data, counted loudly
        if state.pending is not None:  # a failure caused by the outage itself: still pending
            return ItemResult(item_id, None, state)
        internal = True
        msg = str(exc).replace("\n", " ")[:500]
        out = finish_rows([rejected(item_id, f"internal_error: {type(exc).__name__}: {msg}")], item_id, backend_name)
    if answer[0] is not None:  # the reason next to the raw answer that caused it (the report's sample browser)
        for r in out:
            if r["status"] != "ok" and is_rejection(r.get("reason")) and not r.get("raw_excerpt"):
                r["raw_excerpt"] = answer[0]
    return ItemResult(item_id, None if state.pending is not None else out, state, internal)


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


async def run_items(services: StageServices, stage: Stage, stats: StageStats,
                    count_rows: Callable[[str], int] | None = None, rows: Iterator[Any] | None = None) -> None:
    """Process every not-yet-written item of a per-item stage in this process (see module docs).

    ``rows`` replaces ``stage.input_rows()`` (an upstream followed as it grows; it may yield
    :data:`STARVED`); ``count_rows`` gives the progress total (``None``: unknown).
    """
    cfg = stage.config
    name = stage.name
    store = services.store
    progress = services.progress
    limit = cfg.max_in_flight or services.pipeline.max_in_flight
    done = store.done_ids(name) if services.resume else DoneIds()
    stats.recovered = store.recover_journal(name, done)
    if stats.recovered:
        console.print(f"{name}: recovered {stats.recovered} finished row(s) from the journal of a stopped run")
    task = progress.add(name, item_total(stage, count_rows))
    feed = iter(stage.input_rows()) if rows is None else rows
    items = new_items(stage, feed, done, stats, lambda: progress.advance(task, stats))
    pending: list[list[Row]] = []  # finished items' rows, not yet in a shard (they are in the journal)
    journal = StageJournal(store.stage_dir(name), DURABLE_SECONDS / 2)  # + the wait below: <= ~1 s
    last_flush = time.monotonic()
    in_flight: set[asyncio.Task] = set()
    exhausted = False
    window = FailureWindow(2 * limit, services.max_failure_rate)

    def flush(all_items: bool) -> None:
        nonlocal pending, last_flush
        wrote = False
        while len(pending) >= cfg.chunk_size or (all_items and pending):
            rows = [r for item in pending[: cfg.chunk_size] for r in item]
            store.write(name, rows)
            pending = pending[cfg.chunk_size :]  # only once written: a failed write keeps them (and the journal)
            stats.shards += 1
            stats.rows_written += len(rows)
            wrote = True
        if wrote:
            journal.rewrite(r for item in pending for r in item)
        last_flush = time.monotonic()
        services.live(name, stats)

    async def one(item_id: str, row: Row) -> tuple[list[Row] | None, ItemState]:
        result = await process_item(stage, row, item_id, services.backend_name)
        stats.internal_errors += result.internal_error
        return result.rows, result.state

    saved = False
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
                in_flight.add(asyncio.create_task(one(*item)))
            if not in_flight:
                if not starved:
                    break
                await asyncio.sleep(STARVED_WAIT)
                journal.maybe_sync()
                if pending and time.monotonic() - last_flush > FLUSH_SECONDS:
                    flush(all_items=True)
                continue
            finished, in_flight = await asyncio.wait(in_flight, timeout=DURABLE_SECONDS / 2,
                                                     return_when=asyncio.FIRST_COMPLETED)
            for t in finished:
                out, state = t.result()
                count_item(stats, out, state, window)
                if out is not None:
                    journal.append(out)
                    pending.append(out)
                progress.advance(task, stats)
            journal.maybe_sync()
            if not exhausted and window.too_many():
                exhausted = True  # stop feeding: let what is in flight finish, then report
                stats.stopped_early = True
                console.print(f"[bold red]{name}: {window.failed} of the last {len(window.window)} items failed "
                              f"(llm.max_failure_rate={services.max_failure_rate:g}); stopping the stage")
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
        progress.finish(task, stats)


async def run_global(services: StageServices, stage: Stage, stats: StageStats) -> None:
    """A global stage from scratch: ``run_all`` over its whole input, each yielded chunk one shard."""
    name = stage.name
    store = services.store
    task = services.progress.add(name, None)
    store.drop_stage(name)
    seen = 0

    def counted() -> Iterator[Row]:
        nonlocal seen
        for row in stage.input_rows():
            seen += 1
            yield row

    try:
        async for chunk in stage.run_all(counted()):
            if chunk:
                rows = finish_rows(list(chunk), None, services.backend_name)
                stats.ok_rows += sum(r["status"] == "ok" for r in rows)
                store.write(name, rows)
                stats.shards += 1
                stats.rows_written += len(rows)
                stats.processed = seen
                stats.seen = seen
                services.progress.advance(task, stats)
    finally:
        stats.seen = stats.processed = seen
        services.progress.finish(task, stats)


def skip_global(services: StageServices, stage: Stage, stats: StageStats) -> None:
    """A global stage done in an earlier invocation on the same input: count it, write nothing."""
    task = services.progress.add(stage.name, None)
    services.progress.finish(task, stats)


__all__ = ["DURABLE_SECONDS", "FLUSH_SECONDS", "STARVED", "ItemResult", "StageServices", "finish_rows", "item_total", "new_items",
           "process_item", "run_global", "run_items", "skip_global"]
