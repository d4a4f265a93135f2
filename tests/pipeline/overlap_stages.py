"""Stage kinds and a gate group for the overlapping-stages tests (registered on import)."""

from __future__ import annotations

import asyncio
import time
from typing import Iterator

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from fabrika.gates import GatePredicate, register_gate_group
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage
from fabrika.schemas.ids import stable_id

#: Items ``test.relay`` has started, per stage name (the late source waits on it).
CONSUMED: dict[str, int] = {}


class LateConfig(StageConfig):
    n: int = Field(default=30, ge=0, description="How many numbered items to emit.")
    delay: float = Field(default=0.01, ge=0, description="Sleep per item (seconds).")
    late_from: int = Field(default=20, ge=0, description="Items from this index on carry the `flag` column.")
    wait_for: str | None = Field(default=None, description="Hold the late items until this stage consumed one.")


@register_stage
class LateSource(Stage):
    """Numbered items; only the late ones carry ``flag`` (a column the gate needs), as a real stage
    whose optional field shows up only in some shards."""

    kind = "test.late"
    Config = LateConfig
    config: LateConfig

    def input_rows(self) -> Iterator[Row]:
        for i in range(self.config.n):
            yield {"id": stable_id("late", i), "i": i}

    async def process(self, row: Row) -> list[Row]:
        i = row["i"]
        await asyncio.sleep(self.config.delay)
        if i < self.config.late_from:
            return [ok(row["id"], i=i, text=f"строка {i}")]
        if self.config.wait_for:
            deadline = time.monotonic() + 10
            while not CONSUMED.get(self.config.wait_for) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        return [ok(row["id"], i=i, text=f"строка {i}", flag=i % 2 == 0)]


class RelayConfig(StageConfig):
    delay: float = Field(default=0.0, ge=0, description="Sleep per item (seconds).")


@register_stage
class RelayStage(Stage):
    """One LLM call per row; counts what it consumed in :data:`CONSUMED`."""

    kind = "test.relay"
    Config = RelayConfig
    config: RelayConfig

    async def process(self, row: Row) -> list[Row]:
        CONSUMED[self.name] = CONSUMED.get(self.name, 0) + 1
        if self.config.delay:
            await asyncio.sleep(self.config.delay)
        text = row.get("text") or row.get("answer") or ""
        resp = await self.ctx.llm.complete_one(ChatRequest(messages=({"role": "user", "content": text},), tag="test"))
        return [ok(stable_id(row["id"], self.name), i=row["i"], answer=resp.text)]


@register_stage
class LLMScore(Stage):
    """Annotating scorer that asks the LLM (so its calls are timed): ``score = i / 100``."""

    kind = "test.llmscore"
    annotates = True

    async def process(self, row: Row) -> list[Row]:
        await self.ctx.llm.complete_one(ChatRequest(messages=({"role": "user", "content": str(row["i"])},), tag="test"))
        return [ok(row["id"], score=row["i"] / 100)]


class FlagParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    on: bool = Field(default=True, description="Drop rows whose flag is not true.")


register_gate_group("testflag", FlagParams,
                    lambda p: [GatePredicate("unflagged", pl.col("flag"), ("flag",))] if p.on else [])
