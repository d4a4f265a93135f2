"""``backend: vllm`` with ``executor: ray``: one vLLM engine per GPU as a Ray actor, driven from the driver.

The driver keeps the one :class:`~fabrika.llm.engine.LLMEngine` of the run — cache,
retries, failure classification and accounting are exactly those of a local run.
Only its transport changes: :class:`RayEngineBackend` implements
:class:`fabrika.llm.base.Backend` by sending each request to the engine actor with the
fewest requests in flight. Each :class:`EngineActor` reserves ``ray.num_gpus_per_engine``
GPUs and builds the in-process vLLM backend (:class:`~fabrika.llm.vllm_local.VLLMLocalBackend`)
there, so the chat template, guided decoding and error mapping are the local ones.

The cache scope is the backend name ``vllm``, the same as the in-process backend: the
same model with the same request gives the same key wherever the engine runs.

Why actors and not Ray Data's LLM batch API: fabrika's generators are per-item async
conversations (agents answer each other, verifiers are re-asked), so requests arrive
one at a time with dependencies between them; a batch ``map_batches`` over a fixed
dataset fits one-shot prompt lists, not this loop, and would bypass the engine's
cache and accounting.

An engine actor that dies is restarted by Ray (``ray.max_retries``); its in-flight
requests fail as retryable ``server`` errors and the engine's retry sends them again.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabrika.errors import ConfigError, LLMError

if TYPE_CHECKING:
    from fabrika.llm.config import LLMConfig
    from fabrika.llm.engine import LLMEngine
    from fabrika.llm.types import ChatRequest, ChatResponse
    from fabrika.pipeline.sections import RaySettings


def _load(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    if not attr:
        raise ConfigError(f"ray.engine_backend {spec!r}: expected 'module:callable'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"ray.engine_backend {spec!r}: cannot import it ({exc})") from exc


class EngineActor:
    """One model replica: the in-process vLLM backend (or ``ray.engine_backend``) inside a Ray actor."""

    def __init__(self, llm: "LLMConfig", backend_spec: str | None) -> None:
        if backend_spec is None:
            from fabrika.llm.vllm_local import VLLMLocalBackend

            self.backend = VLLMLocalBackend(llm)
        else:
            self.backend = _load(backend_spec)(llm)

    def pid(self) -> int:
        return os.getpid()

    async def send(self, request: "ChatRequest") -> tuple[str, Any]:
        """``("ok", response)`` or ``("error", (kind, message, retry_after))``: an LLMError crosses as data."""
        try:
            return "ok", await self.backend.send(request)
        except LLMError as exc:
            return "error", (exc.kind, exc.message, exc.retry_after)

    async def aclose(self) -> None:
        await self.backend.aclose()


class RayEngineBackend:
    """:class:`fabrika.llm.base.Backend` over N engine actors (least requests in flight wins)."""

    name = "vllm"

    def __init__(self, llm: "LLMConfig", settings: "RaySettings") -> None:
        from fabrika.ray import connect

        ray = self._ray = connect(settings)
        count = settings.engines
        if count is None:
            gpus = float(ray.cluster_resources().get("GPU", 0))
            if settings.num_gpus_per_engine <= 0 or gpus < settings.num_gpus_per_engine:
                raise ConfigError(f"llm.backend is 'vllm' with executor: ray but the Ray cluster has {gpus:g} GPU(s) "
                                  f"(ray.num_gpus_per_engine={settings.num_gpus_per_engine:g}); set ray.engines to "
                                  "place engines explicitly")
            count = int(gpus // settings.num_gpus_per_engine)
        Actor = ray.remote(num_gpus=settings.num_gpus_per_engine, num_cpus=1,
                           max_concurrency=settings.max_requests_per_engine,
                           max_restarts=settings.max_retries)(EngineActor)
        self.actors = [Actor.remote(llm, settings.engine_backend) for _ in range(count)]
        self.in_flight = [0] * count
        self._slots = [asyncio.Semaphore(settings.max_requests_per_engine) for _ in range(count)]
        self.sent = [0] * count  # per engine, for the manifest and tests

    async def send(self, request: "ChatRequest") -> "ChatResponse":
        i = min(range(len(self.actors)), key=self.in_flight.__getitem__)
        self.in_flight[i] += 1
        try:
            async with self._slots[i]:
                self.sent[i] += 1
                status, value = await self.actors[i].send.remote(request)
        except self._ray.exceptions.RayActorError as exc:
            raise LLMError("server", f"vllm engine actor {i} died ({type(exc).__name__}); retried") from exc
        except self._ray.exceptions.RayError as exc:
            raise LLMError("server", f"vllm engine actor {i}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.in_flight[i] -= 1
        if status == "error":
            kind, message, retry_after = value
            raise LLMError(kind, f"engine {i}: {message}", retry_after=retry_after)
        return value

    async def aclose(self) -> None:
        for a in self.actors:
            try:
                await asyncio.wait_for(a.aclose.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - a dead engine has nothing to close
                pass
            self._ray.kill(a, no_restart=True)


def build_ray_engine(llm: "LLMConfig", settings: "RaySettings", run_dir: Path | None) -> "LLMEngine":
    """The run's engine with :class:`RayEngineBackend` as its transport and the usual cache.

    Mirrors :func:`fabrika.llm.factory.build_engine` (same cache file, flush settings and
    ``cache_only`` rule) so the Ray path cannot drift into a second cache or accounting.
    """
    from fabrika.llm.engine import LLMEngine

    backend = RayEngineBackend(llm, settings)
    cache = None
    path = llm.cache.file_for(run_dir)
    if path is not None:
        from fabrika.llm.cache import ResponseCache

        cache = ResponseCache(path, flush_every=llm.cache.flush_every, flush_interval_s=llm.cache.flush_interval_s)
    elif llm.cache_only:
        raise ConfigError("llm.cache_only is true but no cache is configured; set llm.cache.enabled=true and "
                          "give a run_dir or llm.cache.path")
    return LLMEngine(backend, config=llm, cache=cache)


__all__ = ["EngineActor", "RayEngineBackend", "build_ray_engine"]
