"""Configuration of the LLM engine (the ``llm:`` block of a pipeline YAML).

The runner builds the engine with exactly :func:`fabrika.llm.factory.build_engine`
(``build_engine(config, run_dir)``); everything a stage needs — cache, retries,
concurrency limits, accounting — is configured here. This module holds only the
settings, so the engine and the backends can import it without a circle.

Example (two vLLM servers for one model, prices for the cost column)::

    llm:
      backend: openai
      model: Qwen/Qwen3-8B
      endpoints:
        - {base_url: "http://gpu-1:8000/v1", max_concurrency: 256}
        - {base_url: "http://gpu-2:8000/v1", max_concurrency: 256}
      temperature: 0.7
      extra_body: {chat_template_kwargs: {enable_thinking: false}}
      price_per_1m: {Qwen/Qwen3-8B: {prompt: 0.05, completion: 0.2}}

Offline (the default): ``llm: {backend: sim, sim: {seed: 7, error_rate: 0.05}}``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fabrika.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EndpointConfig(_Strict):
    """One OpenAI-compatible server. Several endpoints serving the same model are load-balanced."""

    base_url: str = Field(description="Base URL including the API prefix, e.g. 'http://gpu-1:8000/v1'.")
    api_key: str | None = Field(default=None, description="API key in clear text (prefer api_key_env).")
    api_key_env: str | None = Field(default=None, description="Name of the environment variable holding the API key.")
    max_concurrency: int = Field(default=64, ge=1, description="Requests in flight to this endpoint at most; "
                                 "an n=K request counts K (its sequence slots).")

    def resolve_api_key(self) -> str:
        """The key to send; local servers (vLLM) accept any, so a missing key becomes 'EMPTY'."""
        if self.api_key is not None:
            return self.api_key
        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if value is None:
                raise ConfigError(f"llm.endpoints[].api_key_env names {self.api_key_env!r}, which is not set; "
                                  f"export {self.api_key_env}=... or set llm.endpoints[].api_key")
            return value
        return "EMPTY"


class CacheConfig(_Strict):
    """The request-keyed SQLite cache (see :mod:`fabrika.llm.cache`)."""

    enabled: bool = Field(default=True, description="Cache successful responses; a rerun re-asks nothing it already has.")
    path: Path | None = Field(default=None, description="SQLite file; None means <run_dir>/cache.sqlite.")
    flush_every: int = Field(default=512, ge=1, description="Buffered answers written per batched transaction.")
    flush_interval_s: float = Field(default=1.0, gt=0, description="Longest an answer waits in the write buffer.")

    def file_for(self, run_dir: str | Path | None) -> Path | None:
        """The SQLite file to open: ``path``, else ``<run_dir>/cache.sqlite``; None when disabled or nowhere."""
        if not self.enabled:
            return None
        if self.path is not None:
            return self.path
        return Path(run_dir) / "cache.sqlite" if run_dir is not None else None


class SimConfig(_Strict):
    """The offline ``sim`` backend (see :mod:`fabrika.llm.sim`)."""

    error_rate: float = Field(default=0.0, ge=0.0, le=1.0,
                              description="Fraction of attempts failing with a retryable error (exercises retries).")
    seed: int = Field(default=0, description="Mixed into every simulated answer; changing it changes all answers.")
    latency_ms: float = Field(default=0.0, ge=0.0, description="Simulated latency per attempt.")


class BreakerConfig(_Strict):
    """Per-endpoint circuit breaker (see :mod:`fabrika.llm.routing`)."""

    failure_threshold: int = Field(default=5, ge=1, description="Consecutive connection errors, timeouts or 5xx "
                                   "answers that open the breaker (no requests sent to that endpoint).")
    cooldown_s: float = Field(default=2.0, gt=0, description="Wait before the first half-open probe request.")
    max_cooldown_s: float = Field(default=60.0, gt=0, description="Longest wait between probes (the wait doubles "
                                  "after each failed probe); a hung endpoint (a timeout while it answered nothing "
                                  "else) waits this long at once.")


class ModelPrice(_Strict):
    prompt: float = Field(ge=0.0, description="Price per 1M prompt tokens.")
    completion: float = Field(ge=0.0, description="Price per 1M completion tokens.")


class VLLMLocalConfig(_Strict):
    """In-process vLLM (``backend: vllm``); requires ``pip install 'fabrika[vllm]'``."""

    tensor_parallel_size: int = Field(default=1, ge=1, description="GPUs per model replica.")
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0, description="Fraction of GPU memory vLLM may take.")
    max_model_len: int | None = Field(default=None, ge=1, description="Context length cap; None uses the model's.")
    engine_kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra vllm AsyncEngineArgs fields.")


class LLMConfig(_Strict):
    """How fabrika reaches a model. Defaults give the offline ``sim`` backend."""

    backend: Literal["openai", "vllm", "sim"] = Field(
        default="sim", description="'openai': any OpenAI-compatible server(s); 'vllm': in-process vLLM; "
        "'sim': deterministic offline stand-in (data marked backend='sim').")
    model: str = Field(default="sim", description="Model name sent to the server (or loaded by vLLM).")
    endpoints: list[EndpointConfig] = Field(default_factory=list,
                                            description="Servers for backend 'openai'; several are load-balanced.")
    transport: Literal["raw", "aiohttp", "openai_sdk"] = Field(
        default="raw", description="'raw': fabrika's minimal keep-alive HTTP/1.1 client (fabrika.llm.rawhttp; the "
        "least CPU per request; an endpoint behind a proxy uses 'aiohttp'); 'aiohttp': a lean aiohttp client; "
        "'openai_sdk': the openai SDK's AsyncOpenAI over its aiohttp transport (slower per request). All three "
        "send the same JSON and share one error mapping.")
    timeout_s: float = Field(default=120.0, gt=0, description="Per-attempt timeout in seconds (whole attempt). "
                             "It also bounds a hung endpoint: a timeout while the endpoint answered nothing "
                             "else marks it hung (its requests then fail at once, the run exits 3 after about "
                             "this long instead of retrying into more timeouts).")
    connect_timeout_s: float = Field(default=10.0, gt=0, description="Connect timeout; a connect that does not "
                                     "finish is a 'connection' error and counts toward the endpoint's breaker.")
    read_timeout_s: float | None = Field(default=None, gt=0, description="Longest silence while reading an answer; "
                                         "None: only timeout_s applies.")
    deadline_s: float | None = Field(default=None, gt=0, description="Optional total time for one request across "
                                     "all its retries; past it the request fails with 'timeout' (item stays pending).")
    breaker: BreakerConfig = Field(default_factory=BreakerConfig, description="Per-endpoint circuit breaker.")
    routing: Literal["affinity", "least_loaded", "capacity"] | None = Field(
        default=None, description="Endpoint choice: 'affinity' routes by the request's routing_key (episode id, "
        "or the prompt) with consistent hashing and bounded load, so a dialogue's turns and a prompt's samples "
        "reuse one server's prefix cache; 'least_loaded' (alias 'capacity') sends each request to the endpoint "
        "with the lowest in-flight / max_concurrency. None: affinity with more than one endpoint. Affinity "
        "places requests only among endpoints with a free slot, so give endpoints a max_concurrency above the "
        "server's own sequence slots (e.g. 2-4x vLLM's max_num_seqs) and let the server queue.")
    routing_epsilon: float = Field(default=0.25, ge=0.0, description="Affinity's load bound: no endpoint takes a "
                                   "request past (1 + epsilon) x its share of the mean in-flight (larger: more "
                                   "cache reuse, less balance).")
    routing_home_wait_s: float = Field(default=2.0, ge=0.0, description="Affinity: seconds a request whose "
                                       "key's home server is full or past the load bound waits for that server "
                                       "to finish a request before it goes to the next one on the ring, while "
                                       "the fleet is saturated (see routing_saturation); 0: spill at once. "
                                       "Never waits for a server that is down. A spill moves the whole "
                                       "episode: the new server stays its home.")
    routing_saturation: float = Field(default=0.5, ge=0.0, le=1.0, description="Affinity: the load "
                                      "(requests in flight / max_concurrency) from which a server counts as "
                                      "saturated. Below it a server always takes its keys' requests, whatever "
                                      "the load bound (with max_concurrency at 2x vLLM's max_num_seqs, 0.5 is "
                                      "the server's own batch: the request starts at once, moving it would only "
                                      "lose its prefix cache); a request waits for its home "
                                      "(routing_home_wait_s) only while the whole fleet is this loaded, and "
                                      "spills at once below. 0: the plain load bound, waits at any load.")
    group_samples: bool = Field(default=True, description="Send repeated samples of one prompt (requests equal "
                                "but for sample_index) as one request with n=K where the backend supports it "
                                "(openai-compatible): one prefill instead of K. Each sample keeps its own cache "
                                "entry.")
    probe: bool = Field(default=True, description="Before a run, ask each endpoint's GET /models; an unreachable "
                        "endpoint or an unlisted model stops the run before any work (backend 'openai').")
    max_failure_rate: float = Field(default=0.2, ge=0.0, le=1.0, description="A stage whose share of items that "
                                    "failed for LLM reasons (left pending or rejected with llm_error) passes this "
                                    "ends the run as not finished (exit 3); when the recent items (the last "
                                    "2 x max_in_flight, at least 50) pass it, the stage stops early.")
    max_retries: int = Field(default=6, ge=0, description="Retries after the first attempt for retryable errors.")
    backoff_initial_s: float = Field(default=0.5, ge=0, description="First backoff wait (doubles each retry).")
    backoff_max_s: float = Field(default=30.0, ge=0, description="Longest backoff wait (Retry-After may ask for more).")
    backoff_jitter_s: float = Field(default=0.5, ge=0, description="Random extra wait, up to this many seconds.")
    retry_after_max_s: float = Field(default=120.0, ge=0, description="Cap on a server's Retry-After.")
    cache: CacheConfig = Field(default_factory=CacheConfig, description="Response cache.")
    cache_only: bool = Field(default=False, description="Never call the model: a cache miss is a CacheMissError "
                             "response and engine.cache_misses counts them (the runner fails the run).")
    price_per_1m: dict[str, ModelPrice] | None = Field(
        default=None, description="Prices per 1M tokens by model name, for cost accounting.")
    sim: SimConfig = Field(default_factory=SimConfig, description="Settings of the 'sim' backend.")
    vllm: VLLMLocalConfig = Field(default_factory=VLLMLocalConfig, description="Settings of the 'vllm' backend.")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0,
                                      description="Default temperature for requests that set none.")
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, description="Default top_p for requests that set none.")
    max_tokens: int | None = Field(default=None, ge=1, description="Default max_tokens for requests that set none.")
    seed: int | None = Field(default=None, description="Default sampling seed for requests that set none.")
    extra_body: dict[str, Any] | None = Field(
        default=None, description="Default extra_body (e.g. vLLM chat_template_kwargs); a request's own keys win.")
    max_in_flight: int = Field(default=4096, ge=1, description="Engine-wide cap on requests in flight.")

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, v: list[EndpointConfig]) -> list[EndpointConfig]:
        for i, ep in enumerate(v):
            if not ep.base_url.startswith(("http://", "https://")):
                raise ValueError(f"llm.endpoints[{i}].base_url must start with http:// or https://, got {ep.base_url!r}")
        return v

    @model_validator(mode="after")
    def _backend_needs(self) -> "LLMConfig":
        if self.backend == "openai" and not self.endpoints:
            raise ValueError("llm.endpoints is empty but llm.backend is 'openai'; add at least one "
                             "{base_url: 'http://host:8000/v1'} or use backend: sim")
        return self

    def price(self, model: str) -> ModelPrice | None:
        return (self.price_per_1m or {}).get(model)
