"""``llm_workers: 2`` under ``executor: ray``: the LLM stage's partitions run in Ray actors, and the
dataset is the one-process local dataset, also when one actor is killed with SIGKILL mid-stage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import fabrika.pipeline.execute as execute
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.partition import partition_of
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas.ids import stable_id
from tests.pipeline import llm_worker_stages as ws


def test_ray_actors_make_the_local_dataset_even_when_one_is_killed(ray_cluster: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    async def clock(seconds: float) -> None:
        return None

    monkeypatch.setattr(execute, "transient_wait", clock)
    n = 20
    victim = next(i for i in range(5, n) if partition_of(stable_id("numbers", i), 2) == 1)
    ask = {"kill_on": victim, "marker": str(tmp_path / "kills"), "driver_pid": os.getpid()}

    def cfg(name: str, workers: int, executor: str):  # noqa: ANN202
        doc = ws.pipeline_doc(tmp_path / name, workers, n=n, log=str(tmp_path / f"{name}.log"), **ask)
        doc.update(executor=executor, ray={"address": ray_cluster})
        config, issues = validate_data(doc, "w.yaml", tmp_path)
        assert config is not None, issues
        return config

    local = cfg("local", 1, "local")
    assert run_pipeline(local, resume=False, progress=False).complete  # in this process: never kills
    on_ray = cfg("ray", 2, "ray")
    result = run_pipeline(on_ray, resume=False, progress=False)
    assert result.complete, result.problems
    report = result.stats["test.wask"].report["llm_workers"]
    assert report["where"] == "ray actors" and report["retried_rounds"] == 1
    assert report["deaths"][0].startswith("worker 1: its Ray actor died")
    assert ws.dataset_digest(on_ray.resolved_run_dir) == ws.dataset_digest(local.resolved_run_dir)
    pids = {pid for pid, _ in ws.calls(tmp_path / "ray.log")}
    assert os.getpid() not in pids and len(pids) == 3  # two actors, and the one that replaced the killed one
