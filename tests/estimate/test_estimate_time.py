"""The estimate's time model: a stage's pilot seconds split into what it pays once and what it pays per item."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fabrika.pipeline.estimate_time import StageClock, clocked, full_seconds, split_fixed
from fabrika.pipeline.stage import STAGES, Row, Stage, StageConfig


class _Toy(Stage[StageConfig]):
    kind = "test.estimate_toy"
    log: list[tuple[str, int]] = []

    async def process(self, row: Row) -> list[Row]:
        self.log.append(("start", row["i"]))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self.log.append(("end", row["i"]))
        return [{"id": str(row["i"])}]


def test_the_first_item_goes_alone_and_the_clock_sees_it():
    ticks = iter(range(100))
    clocks: dict[str, StageClock] = {}
    STAGES[_Toy.kind] = _Toy
    _Toy.log = []
    try:
        with clocked({_Toy.kind}, clocks, now=lambda: float(next(ticks))):
            stage: Any = STAGES[_Toy.kind](StageConfig(kind=_Toy.kind, name="toy"), None)

            async def go() -> None:
                await stage.setup()
                await asyncio.gather(*(stage.process({"i": i}) for i in range(5)))

            asyncio.run(go())
        assert STAGES[_Toy.kind] is _Toy  # restored
    finally:
        del STAGES[_Toy.kind]
    first_end = _Toy.log.index(("end", 0))
    assert _Toy.log[0] == ("start", 0) and all(e[0] == "end" or e[1] == 0 for e in _Toy.log[: first_end + 1])
    starts = [e for e in _Toy.log[first_end + 1:] if e[0] == "start"]
    assert len(starts) == 4  # the others started only after the first had finished
    clock = clocks["toy"]
    assert clock.items == 5 and clock.start == 0.0 and clock.setup_end == 1.0 and clock.first_end == 2.0
    assert clock.fixed == 2.0


class _LLMToy(_Toy):
    kind = "test.estimate_llm_toy"  # calls_llm (the default): no warm re-run after its own run


def test_the_clock_records_the_process_s_cpu_from_setup_to_teardown():
    cpu_ticks = iter([10.0, 10.75])
    clocks: dict[str, StageClock] = {}
    STAGES[_LLMToy.kind] = _LLMToy
    try:
        with clocked({_LLMToy.kind}, clocks, now=lambda: 0.0, cpu=lambda: next(cpu_ticks)):
            stage: Any = STAGES[_LLMToy.kind](StageConfig(kind=_LLMToy.kind, name="llm_toy"), None)

            async def go() -> None:
                await stage.setup()
                await asyncio.gather(*(stage.process({"i": i}) for i in range(3)))
                await stage.teardown()

            asyncio.run(go())
    finally:
        del STAGES[_LLMToy.kind]
    assert clocks["llm_toy"].cpu == 0.75 and StageClock().cpu is None


def test_split_fixed_takes_one_item_s_share_off_the_first_item():
    clock = StageClock(start=0.0, setup_end=1.0, first_end=3.0, items=5)
    # 11 s in all: 3 s to the first item's end, 8 s for the other 4 items (2 s each): fixed = 3 - 2
    assert split_fixed(clock, 11.0, global_stage=False) == pytest.approx((1.0, 11.0))
    # a global stage: only its setup is fixed
    assert split_fixed(StageClock(start=0.0, setup_end=1.5), 10.0, global_stage=True) == pytest.approx((1.5, 10.0))
    assert split_fixed(None, 10.0, global_stage=False) == (0.0, 10.0)
    assert split_fixed(StageClock(start=0.0, setup_end=20.0), 10.0, global_stage=True)[0] == 10.0  # never above


def test_a_warm_rerun_splits_what_a_late_lazy_load_cost():
    """The language detector loads when a text first needs it, not at the first item: the stage's 10.3 s
    with 23 items, then 8 items again warm in 0.08 s: 10 s of it is fixed, and the warm re-run's own
    seconds are not the stage's."""
    clock = StageClock(start=0.0, setup_end=0.0, first_end=0.1, items=23, warm=0.08, warm_items=8)
    fixed, own = split_fixed(clock, 10.3 + 0.08, global_stage=False)
    assert own == pytest.approx(10.3) and fixed == pytest.approx(10.3 - 0.01 * 23)
    assert full_seconds(own, fixed, 5.0) == pytest.approx(10.3 + 4 * 0.23)


def test_full_seconds_pays_the_fixed_part_once():
    # 10 s in the pilot, 4 of them fixed (a model load); 5x the items: 4 + 6 x 5
    assert full_seconds(10.0, 4.0, 5.0) == pytest.approx(34.0)
    assert full_seconds(10.0, 0.0, 5.0) == pytest.approx(50.0)  # nothing fixed: plain scaling
    assert full_seconds(3.0, 4.0, 5.0) == pytest.approx(4.0)


class _Pure(Stage[StageConfig]):
    """An LLM-free stage whose second item pays a lazy load (as lingua does) and that reports a count."""

    kind = "test.estimate_pure"
    calls_llm = False
    loaded = False

    async def process(self, row: Row) -> list[Row]:
        if row["i"] == 1 and not _Pure.loaded:
            _Pure.loaded = True
            self.ctx.clock_ticks(50)  # the lazy load
        self.ctx.report["seen"] = self.ctx.report.get("seen", 0) + 1
        return [{"id": str(row["i"]), "ok": True}]


def test_an_llm_free_stage_re_runs_some_items_warm_with_its_report_restored():
    now = [0.0]

    class Ctx:
        llm = "engine"
        report: dict[str, Any] = {}

        def clock_ticks(self, n: int) -> None:
            now[0] += n

    def tick() -> float:
        now[0] += 1.0
        return now[0]

    clocks: dict[str, StageClock] = {}
    STAGES[_Pure.kind] = _Pure
    _Pure.loaded = False
    ctx = Ctx()
    try:
        with clocked({_Pure.kind}, clocks, now=tick):
            stage: Any = STAGES[_Pure.kind](StageConfig(kind=_Pure.kind, name="pure"), ctx)

            async def go() -> list[list[Row]]:
                await stage.setup()
                out = list(await asyncio.gather(*(stage.process({"i": i}) for i in range(12))))
                await stage.teardown()
                return out

            out = asyncio.run(go())
    finally:
        del STAGES[_Pure.kind]
    assert [r[0]["id"] for r in out] == [str(i) for i in range(12)]
    clock = clocks["pure"]
    assert clock.items == 12 and clock.warm_items == 8 and clock.warm is not None
    assert ctx.report == {"seen": 12} and ctx.llm == "engine"  # the re-run left no trace
    # the lazy load (50 ticks) was paid in the run, not in the warm re-run: it is the fixed part
    seconds = now[0] - clock.start
    fixed, own = split_fixed(clock, seconds, global_stage=False)
    assert own == pytest.approx(seconds - clock.warm) and fixed >= 50
