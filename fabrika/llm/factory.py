"""Build the engine an ``llm:`` block describes: backend, routing policy and cache.

Kept apart from :mod:`fabrika.llm.config` so the settings module imports nothing
of the engine or the backends (they import the settings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fabrika.errors import ConfigError
from fabrika.llm.config import LLMConfig
from fabrika.llm.engine import LLMEngine


def routing_policy(config: LLMConfig, count: int | None = None) -> Any:
    """The :class:`~fabrika.llm.routing.RoutingPolicy` ``llm.routing`` names (affinity by default
    when more than one endpoint, or ``count`` engine replicas, serve the run). HTTP endpoints and
    Ray engine actors get the same policy, home wait and saturation floor included."""
    from fabrika.llm.routing import AffinityPolicy, CapacityPolicy

    servers = len(config.endpoints) if count is None else count
    mode = config.routing or ("affinity" if servers > 1 else "least_loaded")
    if mode == "affinity":
        return AffinityPolicy(epsilon=config.routing_epsilon, home_wait_s=config.routing_home_wait_s,
                              saturation=config.routing_saturation)
    return CapacityPolicy()


def build_engine(config: LLMConfig, run_dir: Path | None = None) -> LLMEngine:
    """Build the engine the runner hands to stages as ``ctx.llm``.

    The cache lives at ``config.cache.path`` or ``<run_dir>/cache.sqlite``; with
    neither (``run_dir=None``) caching is off.
    """
    backend: Any
    if config.backend == "sim":
        from fabrika.llm.sim import SimBackend

        backend = SimBackend(seed=config.sim.seed, error_rate=config.sim.error_rate,
                             latency_ms=config.sim.latency_ms, model=config.model)
    elif config.backend == "openai":
        from fabrika.llm.openai_compat import OpenAICompatBackend

        backend = OpenAICompatBackend(config, routing_policy(config))
    elif config.backend == "vllm":
        from fabrika.llm.vllm_local import VLLMLocalBackend

        backend = VLLMLocalBackend(config)
    else:  # pragma: no cover - Literal guards
        raise ConfigError(f"llm.backend must be one of openai, vllm, sim; got {config.backend!r}")

    cache = None
    path = config.cache.file_for(run_dir)
    if path is not None:
        from fabrika.llm.cache import ResponseCache

        cache = ResponseCache(path, flush_every=config.cache.flush_every,
                              flush_interval_s=config.cache.flush_interval_s)
    elif config.cache_only:
        raise ConfigError("llm.cache_only is true but no cache is configured; set llm.cache.enabled=true and "
                          "give a run_dir or llm.cache.path")
    return LLMEngine(backend, config=config, cache=cache)
