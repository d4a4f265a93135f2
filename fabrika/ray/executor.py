"""The ``executor: ray`` executor, loaded by name through :data:`fabrika.pipeline.executors.EXECUTORS`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabrika.pipeline.stage import Stage

if TYPE_CHECKING:
    from fabrika.pipeline.config import PipelineConfig
    from fabrika.pipeline.execute import StageServices
    from fabrika.pipeline.outcome import StageStats


def placement(stage: Stage, driver_stages: list[str]) -> str:
    """``"ray"`` or ``"driver (<why>)"`` for a per-item stage under ``executor: ray``."""
    if type(stage).calls_llm:
        return "driver (calls the LLM: next to the engine, its cache and accounting)"
    if stage.name in driver_stages or stage.config.kind in driver_stages:
        return "driver (ray.driver_stages)"
    return "ray"


class RayExecutor:
    """Per-item stages that never call the LLM run on Ray worker actors (``executor: ray``)."""

    name = "ray"

    def __init__(self, config: "PipelineConfig") -> None:
        from fabrika.ray import connect

        self.settings = config.ray
        self.ray = connect(self.settings)  # ConfigError naming fabrika[ray] when ray is missing

    def takes(self, stage: Stage) -> bool:
        """True for the per-item stages that never call the LLM (``Stage.calls_llm = False``), except those
        ``ray.driver_stages`` names. Where a per-item stage runs, and why, goes into its manifest report
        (``executor``)."""
        if stage.global_stage:  # in the driver (it needs every row at once); its ctx.map_cpu work on the workers
            if stage.name not in self.settings.driver_stages and stage.config.kind not in self.settings.driver_stages:
                self._cpu_map_on_workers(stage)
            return False
        where = placement(stage, self.settings.driver_stages)
        if where == "ray":
            return True
        stage.ctx.report("executor", where)
        if getattr(type(stage), "uses_sandbox", False):  # its LLM-written code still runs on the workers
            self._sandbox_on_workers(stage)
        return False

    def _sandbox_on_workers(self, stage: Stage) -> None:
        """Give a driver-run stage's context a sandbox factory whose pools run on the worker actors
        (:mod:`fabrika.ray.sandbox`; stages that take their pool from ``get_sandbox`` use it)."""
        from fabrika.ray.items import worker_pool
        from fabrika.ray.sandbox import remote_sandbox_factory

        ctx: Any = stage.ctx
        run_dir = str(Path(ctx.run_dir).resolve())

        def pool() -> Any:
            return worker_pool(ctx, self.ray, self.settings, ctx.pipeline, run_dir, ctx.backend_name)[0]

        ctx.sandbox_factory = remote_sandbox_factory(pool, ctx.report)

    def _cpu_map_on_workers(self, stage: Stage) -> None:
        """Give a driver-run stage's context a ``cpu_mapper`` whose chunks run on the worker actors
        (:mod:`fabrika.ray.cpu_map`; ``ctx.map_cpu`` uses it)."""
        from fabrika.ray.cpu_map import RayCpuMapper
        from fabrika.ray.items import worker_pool

        ctx: Any = stage.ctx
        run_dir = str(Path(ctx.run_dir).resolve())

        def pool() -> Any:
            return worker_pool(ctx, self.ray, self.settings, ctx.pipeline, run_dir, ctx.backend_name)

        ctx.cpu_mapper = RayCpuMapper(pool, self.settings, ctx.report_map)

    def llm_launcher(self) -> Any:
        """LLM workers (``llm_workers > 1``) as Ray actors (:mod:`fabrika.ray.llm_workers`)."""
        from fabrika.ray.llm_workers import RayLLMLauncher

        return RayLLMLauncher(self.ray, self.settings)

    async def run_items(self, run: "StageServices", stage: Stage, stats: "StageStats") -> None:
        from fabrika.ray.items import run_items_on_ray

        await run_items_on_ray(run, stage, stats, self.settings)

    @staticmethod
    def build_engine(config: "PipelineConfig", run_dir: Path) -> Any:
        """One vLLM engine actor per GPU for ``backend: vllm`` (docs/RAY.md); None: the usual engine."""
        if getattr(config.llm, "backend", None) != "vllm":
            return None
        from fabrika.ray.vllm import build_ray_engine

        return build_ray_engine(config.llm, config.ray, run_dir)


__all__ = ["RayExecutor", "placement"]
