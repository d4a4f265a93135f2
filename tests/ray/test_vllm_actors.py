"""``backend: vllm`` + ``executor: ray``: engine actors behind the driver's one engine (cache, retries,
accounting), tested with a CPU stub engine (tests/ray/stub_engine.py) in place of vLLM: placement by
routing key with bounded load (the HTTP fleet's rules), ``n=K`` through an actor, truncation, restarts."""

from __future__ import annotations

import asyncio
import math

import pytest

from fabrika.errors import ConfigError
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.config import PipelineConfig
from fabrika.pipeline.lifecycle import build_engine_for
from fabrika.ray.vllm import RayEngineBackend

STUB = "tests.ray.stub_engine:StubVLLM"


def _config(tmp_path, llm=None, **ray) -> PipelineConfig:
    return PipelineConfig.model_validate({
        "name": "vllm_ray", "run_dir": str(tmp_path / "run"), "executor": "ray",
        "llm": {"backend": "vllm", "model": "stub-model", "backoff_initial_s": 0.01, "backoff_max_s": 0.05,
                **(llm or {})},
        "ray": {"engine_backend": STUB, "num_gpus_per_engine": 0, **ray},
        "stages": [{"kind": "if.expand"}],
    })


def _requests(n: int, word: str = "question", **fields) -> list[ChatRequest]:
    return [ChatRequest(messages=({"role": "user", "content": f"{word} {i}"},), tag="t", **fields) for i in range(n)]


def _stats(engine) -> list[dict]:
    import ray

    return ray.get([a.stats.remote() for a in engine.backend.actors])


def test_requests_spread_over_engines_with_one_cache_and_accounting(ray_cluster, tmp_path):
    engine = build_engine_for(_config(tmp_path, engines=2), tmp_path / "run", cache_only=False)
    assert isinstance(engine.backend, RayEngineBackend)

    async def go():
        try:
            first = await engine.complete(_requests(40) + _requests(4, "crash"))
            again = await engine.complete(_requests(40))
            long = await engine.complete([ChatRequest(messages=({"role": "user", "content": "w " * 800},))])
            return first, again, long
        finally:
            await engine.aclose()

    first, again, long = asyncio.run(go())
    assert all(r.ok for r in first) and len({r.text for r in first}) == 44
    assert all(a.cached and a.text == f.text for a, f in zip(again, first[:40]))  # the driver's cache
    assert min(engine.backend.sent) >= 10  # both engines took a share (distinct prompts, distinct keys)
    assert not long[0].ok and long[0].error.kind == "context_length"  # terminal: not retried
    totals = engine.accounting.snapshot()["totals"]
    # each "crash" prompt restarted its engine once: it and whatever ran beside it were aborted and re-sent
    assert totals["cache_hits"] == 40 and totals["retries"] >= 4 and totals["success_after_retry"] >= 4
    assert totals["completion_tokens"] == sum(len(r.text.split()) for r in first)


def test_an_engine_restart_aborts_what_it_runs_and_the_engine_retries_it(ray_cluster, tmp_path):
    engine = build_engine_for(_config(tmp_path, {"routing": "least_loaded"}, engines=1), tmp_path / "run",
                              cache_only=False)

    async def go():
        try:
            return await engine.complete(_requests(6, "slow") + _requests(1, "crash"))
        finally:
            stats = _stats(engine)
            await engine.aclose()
            return_stats.extend(stats)

    return_stats: list[dict] = []
    out = asyncio.run(go())
    assert all(r.ok for r in out), [r.error for r in out if not r.ok]
    assert return_stats[0]["restarts"] == 1
    totals = engine.accounting.snapshot()["totals"]
    assert totals["success_after_retry"] == 7  # the six running beside the crash were aborted too, and re-sent


def _episodes(tmp_path, routing: str) -> tuple[dict[str, list[int]], dict[str, int]]:
    """8 FC-like episodes at once, 4 turns each one after another (the history grows), routing_key = the plan
    id; returns the engines each episode's turns reached and the policy's placement counts."""
    engine = build_engine_for(_config(tmp_path / routing, {"routing": routing, "routing_epsilon": 1.0}, engines=2),
                              tmp_path / routing / "run", cache_only=False)
    episodes = [f"plan-{i}" for i in range(8)]

    async def episode(key: str) -> None:
        history = ""
        for turn in range(4):
            history += f" ход {turn}"
            (resp,) = await engine.complete([ChatRequest(messages=({"role": "user", "content": f"{key}{history}"},),
                                                         tag="fc.user", routing_key=key)])
            assert resp.ok, resp.error

    async def go():
        try:
            await asyncio.gather(*(episode(k) for k in episodes))
            return _stats(engine)
        finally:
            await engine.aclose()

    stats = asyncio.run(go())
    homes = {key: [i for i, s in enumerate(stats) if s["keys"].get(key)] for key in episodes}
    return homes, dict(getattr(engine.backend.policy, "stats", {}))


def test_one_episode_s_turns_land_on_one_engine(ray_cluster, tmp_path):
    """With affinity (the default with more than one engine) every turn of an episode reaches one engine,
    whose prefix cache holds the history; the episodes still use both engines. (epsilon 1.0: 8 episodes
    on 2 engines never reach the load bound here; the bound itself is the next test.)"""
    homes, placed = _episodes(tmp_path, "affinity")
    assert all(len(h) == 1 for h in homes.values()), homes
    assert len({h[0] for h in homes.values()}) == 2, homes
    assert placed["home"] == 8 * 4 and placed["spill"] == placed["fallback"] == 0
    # (least_loaded is not contrasted here: whether its turns wander depends on which request finishes first,
    # i.e. on the host's timing — on a loaded box the 8 episodes can run in lock-step and never wander)


def test_bounded_load_sends_a_hot_key_s_overflow_to_the_other_engine(ray_cluster, tmp_path):
    """40 slow requests of one routing key at once: with the plain bound (no saturation floor, no home
    wait) its home engine holds no more than ``ceil((1 + epsilon) x mean)``, the rest spill to the other
    engine (n counted as n sequences). With the defaults the same key stays home while its engine is
    below ``routing_saturation`` (the next test)."""
    eps = 0.25
    engine = build_engine_for(_config(tmp_path, {"routing_epsilon": eps, "routing_saturation": 0.0,
                                                 "routing_home_wait_s": 0.0}, engines=2), tmp_path / "run",
                              cache_only=False)
    total = 40

    async def go():
        try:
            out = await engine.complete(_requests(total - 8, "slow", routing_key="hot")
                                        + [ChatRequest(messages=({"role": "user", "content": "slow sampled"},),
                                                       tag="t", routing_key="hot", n=8)])
            return out, _stats(engine)
        finally:
            await engine.aclose()

    out, stats = asyncio.run(go())
    assert all(r.ok for r in out) and len(out[-1].choices) == 8
    bound = math.ceil((1 + eps) * total / 2)
    peaks = sorted(s["peak_sequences"] for s in stats)
    assert peaks[1] <= bound and peaks[0] >= total - bound  # the home engine is capped, the other took the rest
    assert sum(sum(s["ns"]) for s in stats) == total  # the n=8 request went out once, as 8 sequences
    assert engine.backend.policy.stats["spill"] > 0


def test_a_hot_key_stays_home_while_its_engine_is_below_saturation(ray_cluster, tmp_path):
    """The configured routing reaches engine actors: with the default saturation floor (0.5) a key
    whose engine runs below half its slots keeps every request at home (moving gains nothing, loses
    the prefix), where the plain bound above spills."""
    engine = build_engine_for(_config(tmp_path, {}, engines=2), tmp_path / "run", cache_only=False)
    slots = engine.backend.slots.endpoints[0].max_concurrency
    total = min(24, slots // 2 - 1)  # below half its slots (24 would spill under the plain bound: 15 cap)

    async def go():
        try:
            out = await engine.complete(_requests(total, "slow", routing_key="hot"))
            return out, _stats(engine)
        finally:
            await engine.aclose()

    out, stats = asyncio.run(go())
    assert all(r.ok for r in out)
    assert sorted(sum(s["ns"]) for s in stats) == [0, total]  # one engine took them all
    assert engine.backend.policy.stats["spill"] == 0


def test_n_samples_through_an_actor_equal_single_requests(ray_cluster, tmp_path):
    """The determinism contract of ``n=K`` (docs/ARCHITECTURE.md): with a seed, one n=K request through the
    actor gives the K samples that K single requests give, choice by choice — the rows do not depend on
    ``llm.group_samples``. Truncation by max_tokens is reported per choice (finish_reason 'length')."""
    k = 6

    def samples(group: bool, sub: str) -> tuple[list[tuple[str, str]], list[list[int]]]:
        engine = build_engine_for(_config(tmp_path / sub, {"group_samples": group, "seed": 7, "cache":
                                                           {"enabled": False}}, engines=2),
                                  tmp_path / sub / "run", cache_only=False)
        reqs = [ChatRequest(messages=({"role": "user", "content": f"prompt {p}"},), tag="t", sample_index=i,
                            max_tokens=6) for p in range(3) for i in range(k)]

        async def go():
            try:
                out = await engine.complete(reqs)
                return out, _stats(engine)
            finally:
                await engine.aclose()

        out, stats = asyncio.run(go())
        assert all(r.ok for r in out), [r.error for r in out if not r.ok][:2]
        return [(r.text, r.choices[0].finish_reason) for r in out], [s["ns"] for s in stats]

    grouped, ns_grouped = samples(True, "grouped")
    single, ns_single = samples(False, "single")
    assert sorted(n for ns in ns_grouped for n in ns) == [k] * 3  # one n=K request per prompt
    assert sorted(n for ns in ns_single for n in ns) == [1] * (3 * k)
    assert grouped == single
    assert len({t for t, _ in grouped}) == 3 * k  # K different samples per prompt, not K copies
    assert {f for _, f in grouped} == {"stop", "length"}  # some answers are longer than max_tokens=6
    assert all(len(t.split()) <= 6 for t, _ in grouped)


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


def _verifier_rows(tmp_path, name: str, group: bool):
    import json

    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store.run import RunStore

    seeds = tmp_path / f"{name}-seeds.jsonl"
    seeds.write_text("\n".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) for i, t in {
        "c-lower": "Весь ответ должен быть написан строчными буквами.",
        "c-comma": "В ответе не должно быть ни одной запятой.",
        "c-words": "Ответ должен содержать не менее 5 слов."}.items()), encoding="utf-8")
    config, issues = validate_data({
        "name": name, "seed": 3, "run_dir": str(tmp_path / name), "executor": "ray",
        "plugins": ["fabrika.generators.instruct"], "sandbox": {"workers": 1, "isolation": "rlimits"},
        "llm": {"backend": "vllm", "model": "stub-model", "seed": 11, "temperature": 1.0, "max_retries": 0,
                "cache": {"enabled": False}, "group_samples": group},
        "ray": {"engine_backend": STUB, "num_gpus_per_engine": 0, "engines": 2},
        "stages": [
            {"kind": "if.expand", "library_seeds": False, "seed_files": [str(seeds)], "target_count": 0},
            {"kind": "if.dedup", "input": "if.expand"},
            {"kind": "if.verifiers", "input": "if.dedup", "k": 5},
        ],
    }, "test", tmp_path)
    assert config is not None, [str(i) for i in issues]
    engine = build_engine_for(config, tmp_path / name, cache_only=False)
    try:
        result = run_pipeline(config, resume=False, progress=False, engine=engine)
        assert result.complete, result.problems
        ns = sorted(n for s in _stats(engine) for n in s["ns"])
    finally:
        asyncio.run(engine.aclose())
    frame = RunStore(tmp_path / name).scan_raw("if.verifiers").collect()
    return frame.select(sorted(c for c in frame.columns if c not in ("created_at", "seconds"))).sort("id"), ns


def test_n_k_through_engine_actors_gives_the_rows_of_k_requests(ray_cluster, tmp_path):
    """The HTTP path's same-rows contract (tests/llm/test_fleet_rows.py) through engine actors: ``if.verifiers``
    with k=5, samples grouped into one n=5 request per constraint or sent one by one, the same rows."""
    grouped, ns_grouped = _verifier_rows(tmp_path, "grouped", group=True)
    separate, ns_separate = _verifier_rows(tmp_path, "separate", group=False)
    assert ns_grouped == [5, 5, 5] and ns_separate == [1] * 15  # one n=5 request per constraint vs one per sample
    assert grouped.height > 0 and grouped.equals(separate)
    assert grouped.filter(grouped["status"] == "ok").height >= 2  # the samples differ (not one copied five times)
