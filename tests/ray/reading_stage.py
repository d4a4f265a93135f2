"""A plugin stage that reads a finished upstream table in ``setup`` (gated, its scorer joined), as a
stage on a worker actor may: ``test.upstream_reader`` (registered when the pipeline's ``plugins`` load it)."""

from __future__ import annotations

from typing import ClassVar

from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage


class UpstreamReaderConfig(StageConfig):
    """``input``: the table to annotate rows of; ``reads``: the table read whole in ``setup``."""

    reads: str


@register_stage
class UpstreamReaderStage(Stage[UpstreamReaderConfig]):
    kind = "test.upstream_reader"
    calls_llm: ClassVar[bool] = False

    async def setup(self) -> None:
        rows = list(self.ctx.iter_rows(self.config.reads, gated=True))
        self.kept = sorted(r["id"] for r in rows)
        self.tokens = {r["id"]: r.get("len_total_tokens") for r in rows}

    async def process(self, row: Row) -> list[Row]:
        rid = str(row["id"])
        return [ok(f"read-{rid}", source_id=rid, upstream_kept=len(self.kept),
                   rank=self.kept.index(rid) if rid in self.kept else None, tokens=self.tokens.get(rid))]
