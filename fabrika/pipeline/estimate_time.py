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
``fixed = first item's end - one item's share of the rest`` (:func:`full_seconds`). A global
stage (one ``run_all`` over its whole input) has no first item: only its ``setup`` and the
resources it built are fixed. The order of items never changes an output (DESIGN contract 7),
so letting the first item go alone changes only timing.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, cast

from fabrika.pipeline.stage import STAGES, Row, Stage


@dataclass
class StageClock:
    """Timestamps (``time.monotonic``) of one stage in the pilot."""

    start: float | None = None
    setup_end: float | None = None
    first_end: float | None = None
    items: int = 0
    _first: asyncio.Event | None = field(default=None, repr=False)
    _taken: bool = False

    @property
    def fixed(self) -> float:
        """Seconds from the start to the first item's end (to the setup's end without items)."""
        if self.start is None:
            return 0.0
        end = self.first_end if self.first_end is not None else self.setup_end
        return max(0.0, (end or self.start) - self.start)


Clocks = dict[str, StageClock]


def _clocked(base: type[Stage[Any]], clocks: Clocks, now: Callable[[], float]) -> type[Stage[Any]]:
    async def setup(self: Stage[Any]) -> None:
        clock = clocks.setdefault(self.name, StageClock())
        clock.start, clock.first_end, clock.items, clock._taken, clock._first = now(), None, 0, False, None
        await base.setup(self)
        clock.setup_end = now()

    async def process(self: Stage[Any], row: Row) -> list[Row]:
        clock = clocks.get(self.name)
        if clock is None:  # processed without setup (a harness): start the clock at the first item
            clock = clocks[self.name] = StageClock(start=now())
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

    return cast("type[Stage[Any]]", type(base.__name__, (base,), {
        "setup": setup, "process": process, "__module__": base.__module__, "__qualname__": base.__qualname__}))


@contextmanager
def clocked(kinds: set[str], clocks: Clocks, now: Callable[[], float] = time.monotonic) -> Iterator[Clocks]:
    """While it is open, the stages of ``kinds`` record their :class:`StageClock` into ``clocks``
    (wrapping whatever class the registry holds then; restored afterwards)."""
    saved = {kind: STAGES[kind] for kind in kinds}
    try:
        for kind, cls in saved.items():
            STAGES[kind] = _clocked(cls, clocks, now)
        yield clocks
    finally:
        STAGES.update(saved)


def split_fixed(clock: StageClock | None, seconds: float, global_stage: bool) -> float:
    """The fixed part of a stage's ``seconds`` in the pilot: up to the first item's end less one item's
    share of the rest (per-item stages), the setup (global stages); never more than ``seconds``."""
    if clock is None or clock.start is None:
        return 0.0
    if global_stage or clock.first_end is None:
        return min(seconds, clock.fixed)
    first = clock.fixed
    rest = max(0.0, seconds - first)
    one = rest / (clock.items - 1) if clock.items > 1 else 0.0
    return min(seconds, max(0.0, first - one))


def full_seconds(pilot_seconds: float, fixed: float, scale: float) -> float:
    """A stage's seconds at full size: the fixed part once, the rest times ``scale``."""
    return fixed + max(0.0, pilot_seconds - fixed) * scale
