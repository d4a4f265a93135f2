"""The runner's implementation of :class:`~fabrika.pipeline.context.StageContext`."""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import polars as pl

from fabrika.gates import gate_lazy
from fabrika.pipeline.context import item_rng
from fabrika.pipeline.llm_wrap import StageLLM
from fabrika.pipeline.stage import Row, StageConfig

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

    def _annotators(self, stage_name: str) -> list[str]:
        """Annotating stages of ``stage_name`` that run before this stage (their scores are final)."""
        order = self._run.order
        before = order[: order.index(self._stage)] if self._stage in order else order
        return [a for a in self._run.annotators.get(stage_name, []) if a in before]

    def _where(self, gated: bool) -> Callable[[pl.LazyFrame], pl.LazyFrame] | None:
        filters = self._run.config.filters
        return (lambda lf: gate_lazy(lf, filters)) if gated else None

    def iter_rows(self, stage_name: str, *, gated: bool = True, columns: list[str] | None = None) -> Iterator[Row]:
        """Rows of an upstream stage with the annotations that ran before this stage joined,
        streamed a bounded group of shards at a time (:meth:`RunStore.iter_frames`)."""
        frames = self._run.store.iter_frames(stage_name, self._annotators(stage_name),
                                             where=self._where(gated), columns=columns)
        for frame in frames:
            yield from frame.iter_rows(named=True)

    def count_rows(self, stage_name: str, gated: bool = True) -> int:
        """How many rows :meth:`iter_rows` would yield (narrow columns only; for progress totals)."""
        return self._run.store.count_rows(stage_name, self._annotators(stage_name), self._where(gated))

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
