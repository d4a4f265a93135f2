"""``backend: vllm`` with ``executor: ray``: one vLLM engine per GPU as a Ray actor, driven from the driver.

The driver keeps the one :class:`~fabrika.llm.engine.LLMEngine` of the run — cache,
retries, failure classification and accounting are exactly those of a local run.
Only its transport changes: :class:`RayEngineBackend` implements
:class:`fabrika.llm.base.Backend` by placing each request on an engine actor with the rules
of the HTTP backend's endpoint pool (:mod:`fabrika.llm.routing`): ``llm.routing: affinity``
(the default with more than one engine) hashes the request's ``routing_key`` (an FC episode,
a prompt's K samples) onto one engine with bounded load, so its turns find their prefix in
that engine's KV cache; an ``n``-sample request counts ``n`` sequences; a replica that keeps
failing is skipped by its circuit breaker while Ray restarts it. Each :class:`EngineActor` reserves ``ray.num_gpus_per_engine``
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
    from fabrika.llm.routing import EndpointPool
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

    def stats(self) -> dict[str, Any]:
        """What the engine reports about itself (``backend.stats()`` where it has one), for tests and logs."""
        stats = getattr(self.backend, "stats", None)
        return dict(stats()) if callable(stats) else {}

    async def aclose(self) -> None:
        await self.backend.aclose()


def engine_routing(llm: "LLMConfig", count: int) -> Any:
    """The :class:`~fabrika.llm.routing.RoutingPolicy` for ``count`` engine actors: ``llm.routing`` as for
    HTTP endpoints (affinity by default with more than one engine, with the same epsilon, home wait and saturation)."""
    from fabrika.llm.factory import routing_policy

    return routing_policy(llm, count)


def engine_slots(count: int, per_engine: int, policy: Any) -> "EndpointPool":
    """The HTTP backend's slot pool over engine actors: each actor is an
    :class:`~fabrika.llm.routing.Endpoint` named ``ray-engine-<i>`` (no URL is ever dialled) with
    ``ray.max_requests_per_engine`` sequence slots and its own circuit breaker, so placement
    (routing key, bounded load, ``n`` counted as ``n`` sequences) and a dead replica being skipped
    are the same rules as for a fleet of vLLM servers."""
    from fabrika.llm.routing import CircuitBreaker, Endpoint, EndpointPool

    endpoints = [Endpoint(base_url=f"ray-engine-{i}", url=f"ray-engine-{i}", headers={}, api_key="",
                          max_concurrency=per_engine, breaker=CircuitBreaker()) for i in range(count)]
    return EndpointPool(endpoints, policy=policy)


class RayEngineBackend:
    """:class:`fabrika.llm.base.Backend` over N engine actors, placed like HTTP endpoints (see :func:`engine_slots`)."""

    name = "vllm"
    #: K samples of one prompt go out as one ``n=K`` request (``llm.group_samples``): the engine's
    #: vLLM runs them as K child requests seeded ``seed + sample_index + j``, one prefill for all.
    supports_n = True

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
        self.policy = engine_routing(llm, count)
        self.slots = engine_slots(count, settings.max_requests_per_engine, self.policy)
        self._index = {ep.base_url: i for i, ep in enumerate(self.slots.endpoints)}
        self.sent = [0] * count  # requests per engine, for the manifest and tests

    @property
    def in_flight(self) -> list[int]:
        """Sequences in flight per engine (an ``n``-sample request counts ``n``)."""
        return [ep.in_flight for ep in self.slots.endpoints]

    async def send(self, request: "ChatRequest") -> "ChatResponse":
        from fabrika.llm.routing import sequences_of

        ep, probe = await self.slots.acquire(request)
        i = self._index[ep.base_url]
        error: LLMError | None = None
        try:
            self.sent[i] += 1
            status, value = await self.actors[i].send.remote(request)
            if status == "error":
                kind, message, retry_after = value
                error = LLMError(kind, f"engine {i}: {message}", retry_after=retry_after)
                raise error
            return value
        except self._ray.exceptions.RayActorError as exc:
            error = LLMError("server", f"vllm engine actor {i} died ({type(exc).__name__}); retried")
            raise error from exc
        except self._ray.exceptions.RayError as exc:
            error = LLMError("server", f"vllm engine actor {i}: {type(exc).__name__}: {exc}")
            raise error from exc
        finally:
            self.slots.release(ep, error, probe, sequences_of(request))

    def health(self) -> list[dict[str, Any]]:
        """Per engine: sequences in flight, requests served, breaker state (as the HTTP backend's pool)."""
        return self.slots.health()

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


__all__ = ["EngineActor", "RayEngineBackend", "build_ray_engine", "engine_routing", "engine_slots"]
