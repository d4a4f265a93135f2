"""The runner's implementation of :class:`~fabrika.pipeline.context.StageContext`."""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import polars as pl

from fabrika.pipeline.context import item_rng
from fabrika.pipeline.gates import gate_lazy
from fabrika.pipeline.llm_wrap import StageLLM
from fabrika.pipeline.stage import Row, StageConfig
from fabrika.store.shards import iter_frame_rows

if TYPE_CHECKING:
    from fabrika.pipeline.runner import StageStats, _Run


class RunContext:
    """The :class:`~fabrika.pipeline.context.StageContext` the runner hands to one stage."""

    def __init__(self, run: "_Run", stage: StageConfig, stats: "StageStats") -> None:
        self._run = run
        self._stage = stage.stage_name
        self._stats = stats
        self.llm = StageLLM(run.engine, self._stage, stats.llm) if run.engine is not None else None
        self.seed = run.config.seed
        self.run_dir = run.store.run_dir
        self.pipeline = run.config
        self.backend_name = run.backend_name

    def _scan(self, stage_name: str, gated: bool) -> pl.LazyFrame | None:
        order = self._run.order
        before = order[: order.index(self._stage)] if self._stage in order else order
        annotators = [a for a in self._run.annotators.get(stage_name, []) if a in before]
        lf = self._run.store.scan(stage_name, annotators)
        if lf is not None and gated:
            lf = gate_lazy(lf, self._run.config.filters)
        return lf

    def iter_rows(self, stage_name: str, *, gated: bool = True, columns: list[str] | None = None) -> Iterator[Row]:
        """Rows of an upstream stage, streamed, with the annotations that ran before this stage joined."""
        lf = self._scan(stage_name, gated)
        if lf is None:
            return
        if columns:
            lf = lf.select(columns)
        yield from iter_frame_rows(lf)

    def count_rows(self, stage_name: str, gated: bool = True) -> int:
        """How many rows :meth:`iter_rows` would yield (one aggregate pass; for progress totals)."""
        lf = self._scan(stage_name, gated)
        return 0 if lf is None else int(lf.select(pl.len()).collect().item())

    def rng(self, *parts: Any) -> random.Random:
        return item_rng(self.seed, self._stage, *parts)

    def resource(self, name: str, factory: Callable[[], Any]) -> Any:
        if name not in self._run.resources:
            self._run.resources[name] = factory()
        return self._run.resources[name]

    def stage_dir(self, stage_name: str) -> Path:
        path = self._run.store.stage_dir(stage_name)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def report(self, key: str, value: Any) -> None:
        self._stats.report[key] = value
