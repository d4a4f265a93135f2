"""A stage that draws from its input table itself (like ``if.multi.prompts``' slots), for the refilter tests."""

from __future__ import annotations

from typing import Iterator

from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage


@register_stage
class TotalStage(Stage[StageConfig]):
    """One slot item; its row sums ``i`` over the gated rows of its input (read in ``process``)."""

    kind = "graph.total"
    calls_llm = False

    def input_rows(self) -> Iterator[Row]:
        yield {"id": "total-slot"}

    async def process(self, row: Row) -> list[Row]:
        assert isinstance(self.config.input, str)
        values = [r["i"] for r in self.ctx.iter_rows(self.config.input)]
        return [ok("total", n=len(values), total=sum(values))]
