"""``executor: ray`` end to end on a local 2-CPU cluster: same dataset as the local executor,
a killed worker is retried, a killed driver resumes, nothing is written twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from fabrika.pipeline.config import load_config
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.run import RunStore
from fabrika.store.shards import shard_files
from tests.ray.conftest import assert_same_data, resume_copy
from tests.ray.ifconfig import KEEP, ROOT, small_if_document, write_config

REDO = KEEP[KEEP.index("if_consistency"):]  # the worker-run stage and everything that reads its scores


def _ray_config(tmp: Path, run_dir: Path, **ray):
    return load_config(write_config(tmp / "ray.yaml", small_if_document(run_dir, "ray", **ray)))


def _worker_pids() -> list[int]:
    """Processes of the ItemWorker actors (Ray titles them ``ray::ItemWorker…``)."""
    pids = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith("ray::ItemWorker"):
            pids.append(p.pid)
    return pids


def _wait_for_shard(stage_dir: Path, timeout: float = 120.0, stop: threading.Event | None = None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and not (stop and stop.is_set()):
        if stage_dir.is_dir() and shard_files(stage_dir):
            return True
        time.sleep(0.02)
    return False


def test_ray_run_writes_the_local_dataset(ray_cluster, local_run, tmp_path):
    config = _ray_config(tmp_path, tmp_path / "run", workers=2, batch_size=8)
    result = run_pipeline(config, resume=False, progress=False)
    assert result.complete, result.problems
    stats = result.stats["if_consistency"]
    assert stats.report["executor"] == "ray (2 worker(s))" and stats.report["ray_worker_processes"] == 2
    assert stats.processed == stats.ok_rows > 16 and stats.shards >= 3  # several batches, each a worker's shard
    assert result.manifest["stages"]["if_consistency"]["duplicate_ids"] == 0
    assert result.manifest["stages"]["if_consistency"]["complete"]
    assert not list((tmp_path / "run" / "stages" / "if_consistency").glob(".tmp-*"))
    assert_same_data(tmp_path / "run", local_run)


def test_killed_worker_is_retried_and_the_dataset_is_unchanged(ray_cluster, local_run, tmp_path):
    run_dir = resume_copy(local_run, tmp_path / "run", REDO)
    config = _ray_config(tmp_path, run_dir, workers=2, batch_size=4, max_retries=3)
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:  # as soon as the first worker-written shard exists: mid-stage
        if _wait_for_shard(run_dir / "stages" / "if_consistency", stop=stop):
            pids = _worker_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        result = run_pipeline(config, resume=True, progress=False)
    finally:
        stop.set()
        thread.join()
    assert killed, "no worker process was found to kill"
    assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == psutil.STATUS_ZOMBIE
    assert result.complete, result.problems
    entry = result.manifest["stages"]["if_consistency"]
    # 3 when the killed worker held a batch (Ray restarts it and retries the batch there); 2 when the kill
    # fell between its batches and the other worker took the rest — the dataset must be whole either way
    assert entry["report"]["ray_worker_processes"] in (2, 3)
    assert entry["duplicate_ids"] == 0 and entry["complete"]
    assert_same_data(run_dir, local_run)


def test_driver_killed_with_sigkill_resumes_without_duplicates(ray_cluster, local_run, tmp_path):
    run_dir = resume_copy(local_run, tmp_path / "run", REDO)
    path = write_config(tmp_path / "ray.yaml", small_if_document(run_dir, "ray", workers=2, batch_size=4))
    env = {**os.environ, "RAY_ADDRESS": ray_cluster, "PYTHONPATH": str(ROOT), "FABRIKA_SKIP_VLLM": "1"}
    driver = subprocess.Popen([sys.executable, "-m", "fabrika.cli.app", "run", str(path), "--no-progress"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stage_dir = run_dir / "stages" / "if_consistency"
    try:
        assert _wait_for_shard(stage_dir, timeout=180), "the driver never reached the Ray stage"
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        driver.wait(timeout=60)
    assert driver.returncode == -signal.SIGKILL
    written_before = RunStore(run_dir).counts("if_consistency")["rows"]
    assert written_before >= 1
    result = run_pipeline(load_config(path), resume=True, progress=False)
    assert result.complete, result.problems
    stats = result.stats["if_consistency"]
    assert stats.skipped >= written_before  # the killed driver's worker shards were kept, not redone
    assert stats.processed + stats.skipped == stats.seen
    entry = result.manifest["stages"]["if_consistency"]
    assert entry["duplicate_ids"] == 0 and entry["complete"]
    assert_same_data(run_dir, local_run)
