"""Sections of the pipeline document that configure something outside the pipeline package.

``ray:`` (used when ``executor: ray``) lives here, not in :mod:`fabrika.ray`, because
:class:`~fabrika.pipeline.config.PipelineConfig` holds it and the pipeline layer never
imports the layers above it. Pure pydantic: importing it never imports ray.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: The one line ``validate`` and ``run`` print when ``executor: ray`` is set but ray is not importable.
RAY_MISSING = ("executor is 'ray' but the ray package is not installed; install it with "
               "pip install 'fabrika[ray]', or set executor: local")


class RaySettings(BaseModel):
    """Where and how per-item CPU stages and vLLM engines run on a Ray cluster."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        default=None, description="Ray cluster to join ('auto', 'ray://head:10001'); None: RAY_ADDRESS when set "
        "(as under `ray job submit`), else a local cluster on this machine.")
    workers: int | None = Field(
        default=None, ge=1, description="Worker actors per per-item CPU stage; None: the cluster's CPUs ÷ num_cpus.")
    num_cpus: float = Field(
        default=1.0, gt=0, description="CPUs each worker actor reserves (its sandbox pool runs sandbox.workers "
        "processes; keep the two equal so Ray does not oversubscribe a node).")
    batch_size: int = Field(
        default=32, ge=1, description="Items per Ray task; each task's rows become one shard written by the worker.")
    batch_seconds: float | None = Field(
        default=2.0, gt=0, description="Grow a stage's batches (from batch_size, up to max_batch_size) until one "
        "takes about this long on a worker, measured on the batches returned so far: a stage doing a millisecond "
        "per row is not sent 32 rows at a time. None: every batch has batch_size rows.")
    max_batch_size: int = Field(
        default=4096, ge=1, description="Largest batch (and worker-written shard) that batch_seconds may grow to.")
    batches_in_flight: int = Field(
        default=2, ge=1, description="Batches queued per worker (one running, the rest waiting) so workers never idle.")
    max_retries: int = Field(
        default=3, ge=0, description="Restarts of a dead worker actor and retries of its unfinished batches.")
    engines: int | None = Field(
        default=None, ge=1, description="vLLM engine actors (backend: vllm); None: one per GPU of the cluster ÷ "
        "num_gpus_per_engine.")
    num_gpus_per_engine: float = Field(
        default=1.0, ge=0, description="GPUs each vLLM engine actor reserves (llm.vllm.tensor_parallel_size for TP).")
    engine_backend: str | None = Field(
        default=None, description="'module:callable' building the backend inside each engine actor from the "
        "LLMConfig; None: fabrika's in-process vLLM backend (fabrika.llm.vllm_local.VLLMLocalBackend).")
    driver_stages: list[str] = Field(
        default_factory=list, description="Stage names or kinds kept in the driver although they never call the "
        "LLM (e.g. a stage whose setup reads a file only the driver's node has). Default: none; every LLM-free "
        "per-item stage runs on the workers.")
    max_requests_per_engine: int = Field(
        default=256, ge=1, description="Requests sent to one engine actor at once (vLLM batches them itself).")


def ray_missing() -> str | None:
    """:data:`RAY_MISSING` when ``import ray`` fails here; None when ray is importable."""
    import importlib

    try:
        importlib.import_module("ray")
    except ImportError:
        return RAY_MISSING
    return None
