"""Wall time of a stage as a fixed part plus a part per item, measured in the estimate's pilot.

A stage's time in a small pilot is mostly what it pays once: loading an embedding model or a
language detector, starting the sandbox pool, building an index. Scaling all of it by the
pilot's scale (5x for a 20% pilot) predicted 2-4x the real time on the shipped configs. So
while the pilot runs, each stage class is wrapped (:func:`clocked`) to record

* when the stage started (``setup`` is its first call),
* when its *first item* finished — the first item runs alone, the others wait for it, so
  everything paid once (the setup, the resources, what a first call loads lazily) falls before
  that moment, plus one item's own work;

and the stage's time at full size is ``fixed + (pilot seconds - fixed) · scale`` with
``fixed = first item's end - one item's share of the rest`` (:func:`full_seconds`). The order
of items never changes an output (DESIGN contract 7), so letting the first item go alone
changes only timing.

What a stage loads lazily may not be loaded by its first item (the language detector loads a
language's model when a text first needs it: 7 s of a 7-second pilot stage, scaled 5x). So a
stage that never calls the LLM (a scorer, the sandbox) re-runs up to :data:`WARM_ITEMS` of its
items (rows, for a global scorer) once it is done, warm, output discarded: the fixed part is
then its time less the warm rate times its items. A global stage that is not a scorer has
only its ``setup`` as fixed.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, cast

from fabrika.pipeline.stage import STAGES, Row, Stage

#: Items (or rows, for a global scorer) an LLM-free stage re-runs warm after the pilot's own run.
WARM_ITEMS = 8
#: Kinds never re-run: they act on something outside the run (``fc.live_calls`` calls the user's server).
NO_RERUN = frozenset({"fc.live_calls"})


@dataclass
class StageClock:
    """Timestamps (``time.monotonic``) of one stage in the pilot."""

    start: float | None = None
    setup_end: float | None = None
    first_end: float | None = None
    items: int = 0
    #: an LLM-free stage's warm re-run: seconds over ``warm_items`` items (``None``: not re-run)
    warm: float | None = None
    warm_items: int = 0
    #: this process's CPU seconds (``time.process_time``: every thread, no child process) at the start and at
    #: the end of the stage's own run (before a warm re-run): recorded for the time model, see :attr:`cpu`
    cpu_start: float | None = None
    cpu_end: float | None = None
    _first: asyncio.Event | None = field(default=None, repr=False)
    _taken: bool = False
    _kept: list[Row] = field(default_factory=list, repr=False)

    @property
    def fixed(self) -> float:
        """Seconds from the start to the first item's end (to the setup's end without items)."""
        if self.start is None:
            return 0.0
        end = self.first_end if self.first_end is not None else self.setup_end
        return max(0.0, (end or self.start) - self.start)

    @property
    def cpu(self) -> float | None:
        """CPU seconds this process (all its threads) spent while the stage ran (``None``: not recorded). Far below
        the stage's seconds, the stage waited (sandbox workers, an endpoint) or the box was loaded."""
        if self.cpu_start is None or self.cpu_end is None:
            return None
        return max(0.0, self.cpu_end - self.cpu_start)


Clocks = dict[str, StageClock]


def _clocked(base: type[Stage[Any]], clocks: Clocks, now: Callable[[], float],
             cpu: Callable[[], float] = time.process_time) -> type[Stage[Any]]:
    warm_rerun = getattr(base, "kind", "") not in NO_RERUN and ((not base.global_stage and not base.calls_llm)
                                                or (base.global_stage and base.annotates))

    def clock_of(stage: Stage[Any]) -> StageClock:
        clock = clocks.get(stage.name)
        if clock is None:  # processed without setup (a harness): start the clock at the first item
            clock = clocks[stage.name] = StageClock(start=now(), cpu_start=cpu())
        return clock

    async def setup(self: Stage[Any]) -> None:
        clocks[self.name] = clock = StageClock(start=now(), cpu_start=cpu())
        await base.setup(self)
        clock.setup_end = now()

    async def teardown(self: Stage[Any]) -> None:
        clock = clock_of(self)
        clock.cpu_end = cpu()
        if warm_rerun and clock._kept:
            await _warm(self, clock)
        await base.teardown(self)

    async def _warm(self: Stage[Any], clock: StageClock) -> None:
        """The kept items again, now that everything paid once is paid: their seconds are the part per item.
        Outputs are discarded, the LLM is withheld (a global scorer that needs it is not re-run), the
        stage's report is restored."""
        ctx: Any = self.ctx
        report = getattr(ctx, "report", None)
        saved = dict(report) if isinstance(report, dict) else None
        llm = getattr(ctx, "llm", None)
        rows, clock._kept = clock._kept, []
        t = now()
        try:
            ctx.llm = None
            if base.global_stage:
                async for _ in base.run_all(self, iter(rows)):
                    pass
            else:
                for row in rows:
                    await base.process(self, row)
            clock.warm, clock.warm_items = now() - t, len(rows)
        except Exception:  # noqa: BLE001 - it needs what was withheld: no warm figure, the first item's stands
            clock.warm = None
        finally:
            ctx.llm = llm
            if saved is not None and isinstance(report, dict):
                report.clear()
                report.update(saved)

    async def run_all(self: Stage[Any], rows: Iterator[Row]) -> Any:
        clock = clock_of(self)

        def counted() -> Iterator[Row]:
            for row in rows:
                clock.items += 1
                if len(clock._kept) < WARM_ITEMS:
                    clock._kept.append(dict(row))
                yield row

        async for chunk in base.run_all(self, counted()):
            yield chunk

    async def process(self: Stage[Any], row: Row) -> list[Row]:
        clock = clock_of(self)
        if warm_rerun and len(clock._kept) < WARM_ITEMS:
            clock._kept.append(dict(row))
        if not clock._taken:  # the first item goes alone: what is paid once falls before its end
            clock._taken, clock._first = True, asyncio.Event()
            try:
                return await base.process(self, row)
            finally:
                clock.first_end, clock.items = now(), clock.items + 1
                clock._first.set()
        if clock._first is not None:
            await clock._first.wait()
        out = await base.process(self, row)
        clock.items += 1
        return out

    members: dict[str, Any] = {"setup": setup, "teardown": teardown, "__module__": base.__module__,
                               "__qualname__": base.__qualname__}
    members["run_all" if base.global_stage else "process"] = run_all if base.global_stage else process
    return cast("type[Stage[Any]]", type(base.__name__, (base,), members))


@contextmanager
def clocked(kinds: set[str], clocks: Clocks, now: Callable[[], float] = time.monotonic,
            cpu: Callable[[], float] = time.process_time) -> Iterator[Clocks]:
    """While it is open, the stages of ``kinds`` record their :class:`StageClock` into ``clocks``
    (wrapping whatever class the registry holds then; restored afterwards)."""
    saved = {kind: STAGES[kind] for kind in kinds}
    try:
        for kind, cls in saved.items():
            STAGES[kind] = _clocked(cls, clocks, now, cpu)
        yield clocks
    finally:
        STAGES.update(saved)


def split_fixed(clock: StageClock | None, seconds: float, global_stage: bool) -> tuple[float, float]:
    """(the fixed part of a stage's ``seconds`` in the pilot, the seconds its own run took).

    With a warm re-run (LLM-free stages): its seconds are taken out of the stage's, and what is left over
    the warm rate times the items is fixed. Otherwise: up to the first item's end less one item's share
    of the rest (per-item stages), the setup (global stages). Never more than the run's seconds."""
    if clock is None or clock.start is None:
        return 0.0, seconds
    if clock.warm is not None and clock.warm_items:
        own = max(0.0, seconds - clock.warm)
        return min(own, max(0.0, own - clock.warm / clock.warm_items * clock.items)), own
    if global_stage or clock.first_end is None:
        return min(seconds, clock.fixed), seconds
    first = clock.fixed
    rest = max(0.0, seconds - first)
    one = rest / (clock.items - 1) if clock.items > 1 else 0.0
    return min(seconds, max(0.0, first - one)), seconds


def full_seconds(pilot_seconds: float, fixed: float, scale: float) -> float:
    """A stage's seconds at full size: the fixed part once, the rest times ``scale``."""
    return fixed + max(0.0, pilot_seconds - fixed) * scale
