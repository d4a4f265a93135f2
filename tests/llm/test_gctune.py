"""GC settings while an engine is open (fabrika.llm.gctune): applied, shared by nested engines, restored."""

from __future__ import annotations

import gc

from fabrika.llm import build_engine, gctune
from fabrika.llm.config import LLMConfig


def test_engines_raise_the_young_threshold_and_the_last_close_restores_it(tmp_path) -> None:  # noqa: ANN001
    while gctune.holders():  # engines other tests left open must not hide the restore
        gctune.release()
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    cfg = LLMConfig(backend="sim", cache={"enabled": False})
    first = build_engine(cfg, tmp_path)
    assert gctune.holders() == 1 and gc.get_threshold()[0] == max(before[0], gctune.GEN0_THRESHOLD)
    assert gc.get_threshold()[1:] == before[1:] and gc.get_freeze_count() > frozen
    second = build_engine(cfg, tmp_path)
    assert gctune.holders() == 2

    import asyncio

    asyncio.run(first.aclose())
    asyncio.run(first.aclose())  # closing twice releases once
    assert gctune.holders() == 1 and gc.get_threshold()[0] == max(before[0], gctune.GEN0_THRESHOLD)
    asyncio.run(second.aclose())
    assert gctune.holders() == 0 and gc.get_threshold() == before and gc.get_freeze_count() == 0
    gctune.release()  # an extra release is harmless
    assert gc.get_threshold() == before
