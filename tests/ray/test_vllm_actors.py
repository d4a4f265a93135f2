"""``backend: vllm`` + ``executor: ray``: engine actors behind the driver's one engine (cache, retries,
accounting), tested with a CPU stub engine (tests/ray/stub_engine.py) in place of vLLM."""

from __future__ import annotations

import asyncio

import pytest

from fabrika.errors import ConfigError
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.config import PipelineConfig
from fabrika.pipeline.lifecycle import build_engine_for
from fabrika.ray.vllm import RayEngineBackend

STUB = "tests.ray.stub_engine:StubVLLM"


def _config(tmp_path, **ray) -> PipelineConfig:
    return PipelineConfig.model_validate({
        "name": "vllm_ray", "run_dir": str(tmp_path / "run"), "executor": "ray",
        "llm": {"backend": "vllm", "model": "stub-model", "backoff_initial_s": 0.01, "backoff_max_s": 0.05},
        "ray": {"engine_backend": STUB, "num_gpus_per_engine": 0, **ray},
        "stages": [{"kind": "if.expand"}],
    })


def _requests(n: int, word: str = "question") -> list[ChatRequest]:
    return [ChatRequest(messages=({"role": "user", "content": f"{word} {i}"},), tag="t") for i in range(n)]


def test_requests_spread_over_engines_with_one_cache_and_accounting(ray_cluster, tmp_path):
    engine = build_engine_for(_config(tmp_path, engines=2), tmp_path / "run", cache_only=False)
    assert isinstance(engine.backend, RayEngineBackend)

    async def go():
        try:
            first = await engine.complete(_requests(40) + _requests(4, "flaky"))
            again = await engine.complete(_requests(40))
            long = await engine.complete([ChatRequest(messages=({"role": "user", "content": "w " * 300},))])
            return first, again, long
        finally:
            await engine.aclose()

    first, again, long = asyncio.run(go())
    assert all(r.ok for r in first) and len({r.text for r in first}) == 44
    assert all(a.cached and a.text == f.text for a, f in zip(again, first[:40]))  # the driver's cache
    assert min(engine.backend.sent) >= 10  # both engines took a share
    assert not long[0].ok and long[0].error.kind == "context_length"  # terminal: not retried
    totals = engine.accounting.snapshot()["totals"]
    assert totals["cache_hits"] == 40 and totals["retries"] >= 4 and totals["success_after_retry"] == 4
    assert totals["completion_tokens"] == 44 * 3


def test_a_killed_engine_actor_is_retried_on_a_live_one(ray_cluster, tmp_path):
    import ray

    engine = build_engine_for(_config(tmp_path, engines=2, max_retries=2), tmp_path / "run", cache_only=False)

    async def go():
        try:
            await engine.complete(_requests(8, "warm-up"))  # both replicas are up (a kill while starting is no test)
            task = asyncio.ensure_future(engine.complete(_requests(20, "slow")))
            while not all(engine.backend.in_flight):  # both replicas busy generating
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            ray.kill(engine.backend.actors[0], no_restart=False)  # the replica dies mid-run
            return await task
        finally:
            await engine.aclose()

    out = asyncio.run(go())
    assert all(r.ok for r in out), [r.error for r in out if not r.ok][:3]
    assert len({r.text for r in out}) == 20
    assert engine.accounting.snapshot()["totals"]["retries"] >= 1  # the dead replica's requests were re-sent


def test_no_gpu_and_no_explicit_engines_is_a_config_error(ray_cluster, tmp_path):
    cfg = _config(tmp_path, num_gpus_per_engine=1)
    with pytest.raises(ConfigError, match="ray.engines"):
        build_engine_for(cfg, tmp_path / "run", cache_only=False)
