"""Engine and resource lifecycle of a run: build the engine, name its backend, close what stages shared."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

from rich.console import Console

from fabrika.errors import ConfigError
from fabrika.pipeline.config import PipelineConfig, configured_backend
from fabrika.pipeline.executors import executor_class

console = Console(stderr=True)


def build_engine_for(config: PipelineConfig, run_dir: Path, cache_only: bool) -> Any:
    """The LLM engine of ``config.llm`` (``fabrika.llm.factory.build_engine``), honouring ``--cache-only``."""
    from fabrika.llm.factory import build_engine

    if cache_only:
        config = config.model_copy(update={"llm": config.llm.model_copy(update={"cache_only": True})})
    if config.executor != "local":  # an executor may place the engine itself (Ray: vLLM engine actors)
        builder = getattr(executor_class(config.executor), "build_engine", None)
        engine = builder(config, run_dir) if builder is not None else None
        if engine is not None:
            return engine
    return build_engine(config.llm, run_dir)


async def probe_llm(config: PipelineConfig) -> None:
    """Before any work: each endpoint of an ``openai`` backend must answer ``GET /models`` listing
    ``llm.model`` (skipped with ``llm.probe: false``); raises :class:`ConfigError` naming the endpoint."""
    llm = config.llm
    if isinstance(llm, dict) or getattr(llm, "backend", None) != "openai" or not getattr(llm, "probe", False):
        return
    from fabrika.llm.openai_compat import probe_endpoints

    problems = await probe_endpoints(llm)
    if problems:
        more = f" (and {len(problems) - 1} more endpoint(s))" if len(problems) > 1 else ""
        raise ConfigError(f"{problems[0]}{more}; nothing was run (llm.probe: false skips this check)")


def backend_of(config: PipelineConfig, engine: Any) -> str:
    name = getattr(engine, "backend_name", None)
    if isinstance(name, str) and name:
        return name
    return configured_backend(config)


async def close_resources(resources: dict[str, Any]) -> None:
    """Close run-wide resources (sandbox pools, embedders) once every stage is done, newest first."""
    for name, res in reversed(list(resources.items())):
        closer = getattr(res, "aclose", None) or getattr(res, "close", None)
        if not callable(closer):
            continue
        try:
            result = closer()
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # noqa: BLE001 - a failing close must not hide the run's outcome
            console.print(f"[yellow]warning:[/] closing resource {name!r} failed: {type(exc).__name__}: {exc}")
    resources.clear()


def first_error(eg: BaseExceptionGroup) -> BaseException:
    """The error a stage raised (not the cancellations it caused in its siblings)."""
    for exc in eg.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return eg.exceptions[0]
