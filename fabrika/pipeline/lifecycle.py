"""Engine and resource lifecycle of a run: build the engine, name its backend, close what stages shared."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

from rich.console import Console

from fabrika.errors import ConfigError
from fabrika.pipeline.config import PipelineConfig

console = Console(stderr=True)


def build_engine_for(config: PipelineConfig, run_dir: Path, cache_only: bool) -> Any:
    """The LLM engine of ``config.llm`` (``fabrika.llm.config.build_engine``), honouring ``--cache-only``."""
    try:
        from fabrika.llm.config import build_engine
    except ImportError as exc:  # pragma: no cover - the LLM layer is a separate area
        raise ConfigError(f"llm: the LLM engine is not available ({exc})") from exc
    llm_cfg = config.llm
    kwargs: dict[str, Any] = {}
    if cache_only:
        fields = getattr(type(llm_cfg), "model_fields", {})
        if "cache_only" in fields:
            llm_cfg = llm_cfg.model_copy(update={"cache_only": True})
        elif "cache_only" in inspect.signature(build_engine).parameters:
            kwargs["cache_only"] = True
        else:
            raise ConfigError("--cache-only: this LLM engine has no cache-only mode")
    if config.executor == "ray" and getattr(llm_cfg, "backend", None) == "vllm":
        from fabrika.ray.vllm import build_ray_engine  # one vLLM engine actor per GPU (docs/RAY.md)

        return build_ray_engine(llm_cfg, config.ray, run_dir)
    return build_engine(llm_cfg, run_dir, **kwargs)


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
    llm = config.llm
    value = llm.get("backend") if isinstance(llm, dict) else getattr(llm, "backend", None)
    return str(getattr(value, "name", value) or "unknown")


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
