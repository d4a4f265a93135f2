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


def _worker_processes() -> list[psutil.Process]:
    """The live ItemWorker actor processes of THIS test session's cluster (Ray titles them ``ray::ItemWorker…``).

    Only descendants of this process count: ``ray.init`` started the raylet as our child, and another Ray
    cluster on the same machine (another session's bench) must never be touched. The sandbox zygotes
    under a worker are exec'd interpreters with their own command line."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline() or [])
            if cmd.startswith("ray::ItemWorker") and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return sorted(found, key=lambda p: p.pid)


def _wait_for_shard(stage_dir: Path, timeout: float = 120.0, stop: threading.Event | None = None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and not (stop and stop.is_set()):
        if stage_dir.is_dir() and shard_files(stage_dir):
            return True
        time.sleep(0.02)
    return False


def _wait_for_workers(n: int, timeout: float = 30.0) -> list[psutil.Process]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        procs = _worker_processes()
        if len(procs) == n:
            return procs
        time.sleep(0.05)
    raise AssertionError(f"expected {n} ItemWorker processes, found {len(_worker_processes())}")


def _items(reference: Path) -> int:
    """Items of ``if_consistency`` (one row each) in the finished reference run."""
    return RunStore(reference).counts("if_consistency")["rows"]


def test_ray_run_writes_the_local_dataset(ray_cluster, local_run, tmp_path):
    config = _ray_config(tmp_path, tmp_path / "run", workers=2, batch_size=8, driver_stages=["if.samples"])
    result = run_pipeline(config, resume=False, progress=False)
    assert result.complete, result.problems
    stats = result.stats["if_consistency"]
    assert stats.report["executor"] == "ray (2 worker(s))" and stats.report["ray_worker_processes"] == 2
    assert stats.processed == stats.ok_rows > 16 and stats.shards >= 3  # several batches, each a worker's shard
    assert result.manifest["stages"]["if_consistency"]["duplicate_ids"] == 0
    assert result.manifest["stages"]["if_consistency"]["complete"]
    assert not list((tmp_path / "run" / "stages" / "if_consistency").glob(".tmp-*"))
    assert result.stats["if_queries"].report["executor"] == "ray (2 worker(s))"  # LLM-free: on the workers
    assert result.stats["if_samples"].report["executor"] == "driver (ray.driver_stages)"  # kept, by kind
    responses = result.stats["if_responses"].report
    assert responses["executor"].startswith("driver (calls the LLM")
    assert responses["sandbox_on"] == "ray workers"  # its verifier runs went to the worker actors
    assert responses["sandbox_isolation"] == result.stats["if_consistency"].report["sandbox_isolation"]
    assert_same_data(tmp_path / "run", local_run)


def test_killed_worker_is_retried_and_the_dataset_is_unchanged(ray_cluster, local_run, tmp_path):
    """At the first worker-written shard, one worker actor is frozen (SIGSTOP) so that it certainly holds
    unfinished batches (the driver keeps ``batches_in_flight`` queued on it), then SIGKILLed. Ray restarts
    the actor and retries exactly the batches it held; the other worker runs on, untouched."""
    run_dir = resume_copy(local_run, tmp_path / "run", REDO)
    assert _items(local_run) >= 8 * 2  # batches of 2: many more than the 2 × 2 in flight when the kill lands
    config = _ray_config(tmp_path, run_dir, workers=2, batch_size=2, batch_seconds=None,
                        batches_in_flight=2, max_retries=3)
    killed: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def killer() -> None:
        try:
            if not _wait_for_shard(run_dir / "stages" / "if_consistency", stop=stop):
                return
            victim = _wait_for_workers(2)[0]
            victim.send_signal(signal.SIGSTOP)  # its queued batches can no longer finish
            time.sleep(0.5)  # the driver refills a worker whose batches returned just before the freeze
            victim.send_signal(signal.SIGKILL)
            killed.append(victim.pid)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        result = run_pipeline(config, resume=True, progress=False)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert len(killed) == 1, "no worker process was killed mid-stage"
    assert _gone(killed[0])
    assert result.complete, result.problems
    entry = result.manifest["stages"]["if_consistency"]
    report = entry["report"]
    assert report["ray_worker_restarts"] == 1  # the killed actor came back once, in a new process ...
    assert report["ray_batches_after_restart"] >= 1  # ... and returned the batches it held when it died
    assert entry["processed"] == entry["seen"] == _items(local_run) and entry["skipped"] == 0
    assert entry["duplicate_ids"] == 0 and entry["complete"]
    assert not list((run_dir / "stages" / "if_consistency").glob(".tmp-*"))
    assert_same_data(run_dir, local_run)


def test_driver_killed_with_sigkill_resumes_without_duplicates(ray_cluster, local_run, tmp_path):
    """The driver (a ``fabrika run`` subprocess) is SIGKILLed mid-stage: its workers are frozen first, so the
    rows on disk are exactly what the dead run leaves; the rerun keeps them, redoes the rest, writes no id twice."""
    run_dir = resume_copy(local_run, tmp_path / "run", REDO)
    total = _items(local_run)
    path = write_config(tmp_path / "ray.yaml", small_if_document(run_dir, "ray", workers=2, batch_size=2,
                                                                 batch_seconds=None))
    env = {**os.environ, "RAY_ADDRESS": ray_cluster, "PYTHONPATH": str(ROOT), "FABRIKA_SKIP_VLLM": "1"}
    driver = subprocess.Popen([sys.executable, "-m", "fabrika.cli.app", "run", str(path), "--no-progress"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stage_dir = run_dir / "stages" / "if_consistency"
    try:
        assert _wait_for_shard(stage_dir, timeout=180), "the driver never reached the Ray stage"
        for proc in _wait_for_workers(2):
            proc.send_signal(signal.SIGSTOP)  # nothing more is written; Ray kills them when their driver dies
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        driver.wait(timeout=60)
    assert driver.returncode == -signal.SIGKILL
    written_before = RunStore(run_dir).counts("if_consistency")["rows"]
    assert 1 <= written_before < total  # killed mid-stage
    result = run_pipeline(load_config(path), resume=True, progress=False)
    assert result.complete, result.problems
    stats = result.stats["if_consistency"]
    assert stats.skipped == written_before  # the dead run's worker shards were kept, not redone
    assert stats.processed == total - written_before and stats.seen == total
    entry = result.manifest["stages"]["if_consistency"]
    assert entry["duplicate_ids"] == 0 and entry["complete"] and entry["rows"] == total
    assert not list(stage_dir.glob(".tmp-*"))
    assert_same_data(run_dir, local_run)


def _gone(pid: int) -> bool:
    """Exited or a zombie; the process may exit between the two reads, which also counts."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
