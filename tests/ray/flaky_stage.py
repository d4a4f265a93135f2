"""A CPU stage (``calls_llm = False``, so it runs on the Ray item workers) whose chosen items meet an
infrastructure fault (TransientError) on their first ``fails`` attempts, counted in a marker file
(the attempts happen in worker processes)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from fabrika.errors import TransientError
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage


class FlakyConfig(StageConfig):
    flaky_on: list[int] = Field(default_factory=list, description="Items that meet a transient fault first.")
    fails: int = Field(default=1, ge=0, description="Attempts of each such item that fail.")
    marker_dir: str = Field(description="Directory of the per-item attempt counters.")


@register_stage
class FlakyStage(Stage[FlakyConfig]):
    kind = "test.flaky_cpu"
    Config = FlakyConfig
    calls_llm = False

    async def process(self, row: Row) -> list[Row]:
        i = row["i"]
        if i in self.config.flaky_on:
            marker = Path(self.config.marker_dir) / f"attempts-{i}"
            seen = int(marker.read_text()) if marker.exists() else 0
            marker.write_text(str(seen + 1))
            if seen < self.config.fails:
                raise TransientError(f"sandbox worker died under item {i}")
        return [ok(row["id"], i=i, doubled=2 * i)]
