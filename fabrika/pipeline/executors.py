"""Where a stage's items are processed: in this process, or on the worker actors of a Ray cluster.

The runner owns ordering and the manifest; an executor only decides where
``process`` runs. :class:`LocalExecutor` leaves every stage to the in-process loop
of :mod:`fabrika.pipeline.execute`. Other executors are named in :data:`EXECUTORS` and loaded by module
string: ``executor: ray`` is :class:`fabrika.ray.executor.RayExecutor`, which takes the
per-item stages that never call the LLM (``Stage.calls_llm = False``, e.g.
``if.consistency``, which runs the sandbox, or ``filter.language``), except those
``ray.driver_stages`` names, and runs them as batches of input rows,
keyed by id, on the run's worker actors (:mod:`fabrika.ray.items`); each worker writes its batch's rows
as one shard, atomically, into the run directory. Global stages and every stage that calls the LLM
stay in the driver, next to the engine (cache, retries, accounting); a global stage's per-row CPU
work that it hands to ``ctx.map_cpu`` (:mod:`fabrika.pipeline.cpu_map`) goes to the same worker
actors (the executor sets the context's ``cpu_mapper``).

Both run an item with :func:`fabrika.pipeline.execute.process_item`, so a row does not
depend on where it was made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

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


#: Executors other than ``local``, by the name ``executor:`` gives, as ``"module:Class"``. Loaded by
#: string like stage kinds, so the pipeline never imports an optional extra (or a layer above it).
#: The class is built with the :class:`~fabrika.pipeline.config.PipelineConfig`; it may define
#: ``build_engine(config, run_dir)`` returning the run's LLM engine, or None to use the usual one.
EXECUTORS: dict[str, str] = {
    "ray": "fabrika.ray.executor:RayExecutor",
}


def executor_class(name: str) -> Any:
    """The class :data:`EXECUTORS` names for ``executor: <name>``."""
    import importlib

    try:
        module, _, attr = EXECUTORS[name].partition(":")
    except KeyError:
        raise ValueError(f"executor {name!r} is not one of local, {', '.join(sorted(EXECUTORS))}") from None
    return getattr(importlib.import_module(module), attr)


def executor_for(config: "PipelineConfig") -> Executor:
    """The executor ``config.executor`` names."""
    if config.executor == "local":
        return LocalExecutor()
    executor: Executor = executor_class(config.executor)(config)
    return executor


__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "executor_class", "executor_for"]
