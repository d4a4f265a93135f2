"""``llm_workers: 2`` under ``executor: ray``: the LLM stage's partitions run in Ray actors, and the
dataset is the one-process local dataset, also when one actor is killed with SIGKILL mid-stage."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

import fabrika.pipeline.execute as execute
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.partition import partition_of
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas.ids import stable_id
from fabrika.store.run import RunStore
from fabrika.store.shards import shard_files
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


def test_transient_faults_on_ray_workers_get_in_run_retry_rounds(ray_cluster: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """As locally: an item that met an infrastructure fault on a worker is re-sent after a backoff
    (TRANSIENT_ROUNDS at most); it is neither a row nor, when a round succeeds, pending. An item that
    fails every round stays pending (no row; the CLI exits 3), the others are written, and the next run
    in the same run directory redoes exactly that item once the fault has healed."""
    waits: list[float] = []

    async def clock(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(execute, "transient_wait", clock)

    def run(name: str, fails: int, flaky_on: tuple[int, ...] = (3, 7), resume: bool = False):  # noqa: ANN202
        (tmp_path / name).mkdir(exist_ok=True)
        doc = {"name": "f", "run_dir": str(tmp_path / name / "run"), "executor": "ray",
               "ray": {"address": ray_cluster}, "llm": {"backend": "sim"},
               "plugins": ["tests.pipeline.llm_worker_stages", "tests.ray.flaky_stage"],
               "stages": [{"kind": "test.numbers", "n": 12},
                          {"kind": "test.flaky_cpu", "input": "test.numbers", "flaky_on": list(flaky_on), "fails": fails,
                           "marker_dir": str(tmp_path / name)}],
               "dataset": {"stages": ["test.flaky_cpu"]}}
        config, issues = validate_data(doc, "f.yaml", tmp_path)
        assert config is not None, issues
        return run_pipeline(config, resume=resume, progress=False)

    healed = run("healed", fails=1)
    st = healed.stats["test.flaky_cpu"]
    assert healed.complete, healed.problems
    assert (st.processed, st.pending, st.transient) == (12, 0, 2) and waits == [execute.TRANSIENT_BACKOFF_S[0]]

    # item 5 fails its first attempt and every retry round of this run; its attempt after that succeeds
    waits.clear()
    stuck = run("stuck", fails=1 + execute.TRANSIENT_ROUNDS, flaky_on=(5,))
    st = stuck.stats["test.flaky_cpu"]
    assert not stuck.complete and stuck.version is None  # the CLI exits 3 on an unfinished run
    assert any("test.flaky_cpu" in p and "pending" in p for p in stuck.problems), stuck.problems
    assert (st.processed, st.pending, st.transient) == (11, 1, 1 + execute.TRANSIENT_ROUNDS)
    assert waits == list(execute.TRANSIENT_BACKOFF_S[:execute.TRANSIENT_ROUNDS])
    flaky_dir = tmp_path / "stuck" / "run" / "stages" / "test.flaky_cpu"
    written = RunStore(tmp_path / "stuck" / "run").scan_raw("test.flaky_cpu").collect()
    assert sorted(written["i"]) == [i for i in range(12) if i != 5]  # no row of any kind for item 5
    shards = set(shard_files(flaky_dir))

    again = run("stuck", fails=1 + execute.TRANSIENT_ROUNDS, flaky_on=(5,), resume=True)  # same config, healed
    st = again.stats["test.flaky_cpu"]
    assert again.complete, again.problems
    assert (st.processed, st.pending, st.transient, st.skipped) == (1, 0, 0, 11)
    assert (tmp_path / "stuck" / "attempts-5").read_text() == str(2 + execute.TRANSIENT_ROUNDS)
    new = set(shard_files(flaky_dir)) - shards
    assert shards <= set(shard_files(flaky_dir)) and len(new) == 1
    assert [r["i"] for r in pl.read_parquet(next(iter(new))).to_dicts()] == [5]  # exactly the pending item
    final = RunStore(tmp_path / "stuck" / "run").scan_raw("test.flaky_cpu").collect()
    assert sorted(final["i"]) == list(range(12)) and final["id"].n_unique() == 12
