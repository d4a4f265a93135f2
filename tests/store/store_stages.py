"""A test stage of the store tests: every item writes several rows (the journal's item-atomicity matters only then)."""

from __future__ import annotations

from typing import Iterator

from pydantic import Field

from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id

#: What a verifier raised in the sandbox, as a rejection reason: a lone surrogate and control characters.
NASTY = "verifier_error: ValueError: bad byte \ud800 at \x00\x1b[31m end"


class MultiConfig(StageConfig):
    n: int = Field(default=12, ge=0, description="How many items.")
    rows_per_item: int = Field(default=3, ge=1, description="Rows each item writes.")
    nasty_item: int = Field(default=-1, description="Item whose first row is rejected with NASTY (-1: none).")


@register_stage
class MultiRowStage(Stage):
    """Source of ``n`` items; item ``i`` writes ``rows_per_item`` rows with Russian text."""

    kind = "test.store.multi"
    Config = MultiConfig
    config: MultiConfig

    def input_rows(self) -> Iterator[Row]:
        for i in range(self.config.n):
            yield {"id": stable_id("multi", i), "i": i}

    async def process(self, row: Row) -> list[Row]:
        i = row["i"]
        out = [ok(stable_id(row["id"], k), i=i, k=k, text=f"ответ {i}.{k}: всё хорошо")
               for k in range(self.config.rows_per_item)]
        if i == self.config.nasty_item:
            out[0] = rejected(out[0]["id"], NASTY, i=i, k=0, text=f"ответ {i}.0 \udfff")
        return out
