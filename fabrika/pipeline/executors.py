"""Where a stage's items are processed: in this process, or on the worker actors of a Ray cluster.

The runner owns ordering and the manifest; an executor only decides where
``process`` runs. :class:`LocalExecutor` leaves every stage to the in-process loop
of :mod:`fabrika.pipeline.execute`. :class:`RayExecutor` takes the per-item stages that never call the
LLM (``Stage.calls_llm = False``, e.g. ``if.consistency``, which runs the sandbox) and
runs them as batches of input rows, keyed by id, on worker actors
(:mod:`fabrika.ray.items`); each worker writes its batch's rows as one shard,
atomically, into the run directory. Global stages and every stage that calls the LLM
stay in the driver, next to the engine (cache, retries, accounting).
Both run an item with :func:`fabrika.pipeline.execute.process_item`, so a row does not
depend on where it was made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from fabrika.pipeline.stage import Stage

if TYPE_CHECKING:
    from fabrika.pipeline.config import PipelineConfig
    from fabrika.pipeline.execute import StageServices
    from fabrika.pipeline.outcome import StageStats


class Executor(Protocol):
    """Chooses where a per-item stage's items run."""

    name: str

    def takes(self, stage: Stage) -> bool:
        """True when this executor runs the stage's items (the runner then calls :meth:`run_items`)."""
        ...

    async def run_items(self, run: "StageServices", stage: Stage, stats: "StageStats") -> None:
        """Process every not-yet-written item of ``stage`` (``run`` gives the store, resume flag,
        progress and config); ``stage.setup`` has not been called in the driver."""
        ...


class LocalExecutor:
    """Everything in this process: the runner's own concurrent loop (``executor: local``)."""

    name = "local"

    def takes(self, stage: Stage) -> bool:
        return False

    async def run_items(self, run: "StageServices", stage: Stage, stats: "StageStats") -> None:  # pragma: no cover
        raise NotImplementedError("the local executor leaves items to the runner")


class RayExecutor:
    """Per-item stages that never call the LLM run on Ray worker actors (``executor: ray``)."""

    name = "ray"

    def __init__(self, config: "PipelineConfig") -> None:
        from fabrika.ray import connect

        self.settings = config.ray
        self.ray = connect(self.settings)  # ConfigError naming fabrika[ray] when ray is missing

    def takes(self, stage: Stage) -> bool:
        return not stage.global_stage and not type(stage).calls_llm

    async def run_items(self, run: "StageServices", stage: Stage, stats: "StageStats") -> None:
        from fabrika.ray.items import run_items_on_ray

        await run_items_on_ray(run, stage, stats, self.settings)


def executor_for(config: "PipelineConfig") -> Executor:
    """The executor ``config.executor`` names."""
    return RayExecutor(config) if config.executor == "ray" else LocalExecutor()


__all__ = ["Executor", "LocalExecutor", "RayExecutor", "executor_for"]
