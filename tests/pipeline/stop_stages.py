"""Stage kinds for the stop tests (a plugin: ``fabrika run`` subprocesses import it by name).

``test.busy`` finishes its items at once, except item ``busy_on``, which — the first time only (a
``marker`` file records it) — writes the marker and then computes until stopped: in a pure-Python
loop on the event-loop thread (``mode: loop``, the way fc.plans' index build once ignored SIGTERM)
or in a thread-pool executor (``mode: thread``). The loop is capped at ``cap_s`` so that a broken
stop fails a test by its timeout rather than hanging it. A resumed run finds the marker and does
the item at once: its rows never depend on the mode or on being stopped. ``test.busy_global`` does
the same in the middle of a global stage's ``run_all``, after its first shard.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import AsyncIterator, Iterator, Literal

from pydantic import Field

from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage
from fabrika.schemas.ids import stable_id


class BusyConfig(StageConfig):
    marker: str = Field(description="File written when the busy step has started (it is then done at once).")
    busy_on: int = Field(default=0, ge=0, description="The item whose step computes until stopped.")
    mode: Literal["loop", "thread"] = Field(default="loop", description="Where it computes.")
    cap_s: float = Field(default=300.0, gt=0, description="The busy step gives up after this long.")
    ask: bool = Field(default=False, description="Ask the LLM once per item (an LLM stage: llm_workers split it).")


def spin(cap_s: float) -> int:
    """Pure-Python work: bytecodes all the way (a signal handler runs between two of them)."""
    end = time.monotonic() + cap_s
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


@register_stage
class BusyStage(Stage[BusyConfig]):
    """See the module docs."""

    kind = "test.busy"
    Config = BusyConfig

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        i = row["i"]
        marker = Path(cfg.marker)
        if i == cfg.busy_on and not marker.exists():
            marker.write_text(str(os.getpid()))
            if cfg.mode == "loop":
                spin(cfg.cap_s)
            else:
                await asyncio.to_thread(spin, cfg.cap_s)
        answer = ""
        if cfg.ask:
            from fabrika.llm.types import ChatRequest

            resp = await self.ctx.llm.complete_one(ChatRequest(messages=({"role": "user", "content": row["text"]},),
                                                               tag="test.busy", routing_key=str(row["id"])))
            answer = resp.text if resp.ok else ""
        else:
            await asyncio.sleep(0)
        return [ok(stable_id(row["id"], "busy"), i=i, answer=answer)]


class BusyGlobalConfig(StageConfig):
    marker: str = Field(description="File written when the busy step has started (it is then done at once).")
    cap_s: float = Field(default=300.0, gt=0, description="The busy step gives up after this long.")


@register_stage
class BusyGlobalStage(Stage[BusyGlobalConfig]):
    """A global stage: its first half is one shard, then — the first time only — it computes until
    stopped on the loop thread before the second half (a half-made table that must never count)."""

    kind = "test.busy_global"
    Config = BusyGlobalConfig
    global_stage = True
    calls_llm = False

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        items = sorted(rows, key=lambda r: r["i"])
        half = len(items) // 2
        yield [ok(stable_id(r["id"], "g"), i=r["i"]) for r in items[:half]]
        # the runner writes a chunk when the next one comes (the last shard takes what is left), so the
        # first half is on disk once the second chunk is yielded: the spin is inside that second chunk's work
        yield [ok(stable_id(r["id"], "g"), i=r["i"]) for r in items[half:half + 1]]
        marker = Path(self.config.marker)
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            spin(self.config.cap_s)
        yield [ok(stable_id(r["id"], "g"), i=r["i"]) for r in items[half + 1:]]
