"""SIGTERM and SIGINT stop `fabrika run` whatever the step is doing (fabrika.pipeline.stopping).

Each test starts `fabrika run` in a subprocess on a stage (tests/pipeline/stop_stages.py) whose item
computes until stopped — in a pure-Python loop on the event-loop thread, or in a thread-pool
thread — waits for the marker file that says the busy step has started, signals, and checks: the
exit code (128 + the signal), one line naming the command that resumes, the manifest (interrupted,
the stage not complete), the finished items saved with nothing half-written, and that the same
command then completes with the dataset of an uninterrupted run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from fabrika.pipeline.config import load_config
from fabrika.pipeline.runner import run_pipeline
from fabrika.pipeline.stopping import PROTECTED, RunStopped, _protected
from fabrika.store import RunStore
from fabrika.store.manifest import effective_status
from fabrika.store.shards import REQUESTS_DIR
from tests.pipeline.llm_worker_stages import dataset_digest

ROOT = Path(__file__).resolve().parents[2]
N = 40
BUSY_ON = 25
#: generous: waiting for a process is not a speed assertion
WAIT_S = 90


def write_config(tmp_path: Path, name: str, mode: str = "loop", **extra: Any) -> Path:
    doc = {
        "name": name,
        "run_dir": str(tmp_path / name),
        "plugins": ["tests.pipeline.llm_worker_stages", "tests.pipeline.stop_stages"],
        "llm": {"backend": "sim"},
        "max_in_flight": 4,
        "stages": [
            {"kind": "test.numbers", "n": N},
            # bigger than the run: only the stop's own flush can write a shard
            {"kind": "test.busy", "input": "test.numbers", "chunk_size": 1000, "busy_on": BUSY_ON, "mode": mode,
             "marker": str(tmp_path / f"{name}.busy"), "ask": True},
        ],
        "dataset": {"stages": ["test.busy"]},
        **extra,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


_clean: list[tuple[str, int]] = []


def clean_digest(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """The dataset of an uninterrupted run (its busy item is done at once: the marker exists); made once."""
    if not _clean:
        where = tmp_path_factory.mktemp("clean")
        cfg = write_config(where, "clean")
        (where / "clean.busy").write_text("done")
        result = run_pipeline(load_config(cfg), progress=False)
        assert result.complete
        _clean.append(dataset_digest(result.run_dir))
    return _clean[0]


def start(cfg: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    # a short grace (the default is 3 s): the watchdog's interrupt is what these tests exercise
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "FABRIKA_STOP_GRACE_S": "0.5", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "fabrika", "run", str(cfg), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cfg.parent, env=full)


def wait_busy(proc: subprocess.Popen[bytes], marker: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, "the busy step never started"
        time.sleep(0.02)


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the run did not stop: {err.decode()}")
    return proc.returncode, err.decode()


def stage_files(run_dir: Path) -> list[str]:
    stage = RunStore(run_dir).stage_dir("test.busy")
    return sorted(p.name for p in stage.iterdir()) if stage.exists() else []


def saved_items(run_dir: Path) -> list[int]:
    lf = RunStore(run_dir).scan_raw("test.busy")
    return [] if lf is None else sorted(lf.collect()["i"].to_list())


def check_stopped(run_dir: Path, code: int, err: str, signame: str, cfg: Path) -> list[int]:
    """The common verdict of a graceful stop; returns the items it saved."""
    assert code == 128 + getattr(signal, signame), err
    lines = [ln for ln in err.splitlines() if f"stopped by {signame}" in ln]
    assert len(lines) == 1 and f"rerun `fabrika run {cfg}` to resume" in lines[0], err
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "interrupted"
    assert not manifest["stages"]["test.busy"].get("complete")
    assert manifest["stages"]["test.numbers"]["complete"]
    assert not (run_dir / "versions").exists() or not any((run_dir / "versions").iterdir())
    # the stop wrote the finished items as a shard: no journal, no temp file, nothing else
    files = stage_files(run_dir)
    assert files and all(f.startswith("part-") or f == REQUESTS_DIR for f in files), files
    saved = saved_items(run_dir)
    assert 0 < len(saved) < N and len(set(saved)) == len(saved) and BUSY_ON not in saved
    return saved


def resume_and_compare(cfg: Path, run_dir: Path, want: tuple[str, int], saved: list[int], **changes: Any) -> None:
    """The same config run again (in this process: the CLI's part was checked above) completes the run."""
    result = run_pipeline(load_config(cfg).model_copy(update=changes), progress=False)
    assert result.complete and result.version is not None
    assert dataset_digest(run_dir) == want
    raw = RunStore(run_dir).scan_raw("test.busy")
    assert raw is not None
    items = raw.collect()["i"].to_list()
    assert sorted(items) == list(range(N))  # nothing lost, nothing written twice
    assert set(saved) <= set(items)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigterm_in_a_cpu_bound_step_on_the_loop_thread(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The event loop never gets control: the watchdog interrupts the step where it is."""
    cfg = write_config(tmp_path, "loop")
    proc = start(cfg)
    wait_busy(proc, tmp_path / "loop.busy")
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    saved = check_stopped(tmp_path / "loop", code, err, "SIGTERM", cfg)
    resume_and_compare(cfg, tmp_path / "loop", clean_digest(tmp_path_factory), saved)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigint_while_a_thread_pool_thread_computes(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The cancelled await returns at once; the thread still computing (for minutes) does not hold the exit."""
    cfg = write_config(tmp_path, "thread", mode="thread")
    proc = start(cfg)
    wait_busy(proc, tmp_path / "thread.busy")
    proc.send_signal(signal.SIGINT)
    code, err = finish(proc)  # the thread's loop runs for 300 s: an exit that waited for it times out
    saved = check_stopped(tmp_path / "thread", code, err, "SIGINT", cfg)
    resume_and_compare(cfg, tmp_path / "thread", clean_digest(tmp_path_factory), saved)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_second_sigterm_stops_at_once(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """With a grace long enough that only the second signal can end it: gone at once, like kill -9,
    finished items in the journal, and the same command completes with the clean dataset."""
    cfg = write_config(tmp_path, "twice")
    proc = start(cfg, {"FABRIKA_STOP_GRACE_S": "600", "FABRIKA_STOP_LIMIT_S": "900"})
    wait_busy(proc, tmp_path / "twice.busy")
    proc.send_signal(signal.SIGTERM)
    assert proc.stderr is not None
    for _ in range(50):  # the first signal was heard (the loop itself is still busy)
        first = proc.stderr.readline().decode()
        if not first or "SIGTERM: stopping" in first:
            break
    assert "SIGTERM: stopping" in first and "again to stop at once" in first
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 143, err
    assert "stopped at once (SIGTERM again)" in err and "rerun the same command to resume" in err
    run_dir = tmp_path / "twice"
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert effective_status(manifest) == "killed"  # it says running, and its process is gone
    assert not manifest["stages"]["test.busy"].get("complete")
    store = RunStore(run_dir)
    assert store.journal_rows("test.busy") > 0 and store.scan_raw("test.busy") is None  # journal only
    resume_and_compare(cfg, run_dir, clean_digest(tmp_path_factory), [])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigterm_with_two_llm_workers_leaves_no_worker_process(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The busy item is in a worker process: the driver stops it too, and no worker outlives the run."""
    cfg = write_config(tmp_path, "workers", llm_workers=2)
    proc = start(cfg)
    wait_busy(proc, tmp_path / "workers.busy")
    busy_pid = int((tmp_path / "workers.busy").read_text())
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert busy_pid in {w.pid for w in workers} and busy_pid != proc.pid
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    saved = check_stopped(tmp_path / "workers", code, err, "SIGTERM", cfg)
    _, alive = psutil.wait_procs(workers, timeout=WAIT_S)
    assert not alive, [p.pid for p in alive]
    # resumed in one process: the driver recovers the workers' journals whatever N was (and it is cheaper)
    resume_and_compare(cfg, tmp_path / "workers", clean_digest(tmp_path_factory), saved, llm_workers=1)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigterm_in_a_global_stage_never_counts_its_half_made_table(tmp_path: Path) -> None:
    """A global stage stopped after its first shard: not complete, no version; the next run redoes it."""
    def doc(name: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({
            "name": name, "run_dir": str(tmp_path / name), "plugins": ["tests.pipeline.llm_worker_stages",
                                                                      "tests.pipeline.stop_stages"],
            "llm": {"backend": "sim"},
            "stages": [{"kind": "test.numbers", "n": N},
                       {"kind": "test.busy_global", "input": "test.numbers", "marker": str(tmp_path / "g.busy")}],
            "dataset": {"stages": ["test.busy_global"]}}), encoding="utf-8")
        return path

    cfg = doc("global")
    proc = start(cfg)
    wait_busy(proc, tmp_path / "g.busy")
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 143 and "stopped by SIGTERM" in err, err
    run_dir = tmp_path / "global"
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "interrupted" and not manifest["stages"]["test.busy_global"].get("complete")
    half = RunStore(run_dir).scan_raw("test.busy_global")
    assert half is not None and half.collect().height == N // 2  # half a table is on disk, and counts for nothing
    assert not (run_dir / "versions").exists() or not any((run_dir / "versions").iterdir())
    result = run_pipeline(load_config(cfg), progress=False)  # the marker exists now: no stop in this one
    again = RunStore(run_dir).scan_raw("test.busy_global")
    assert result.complete and again is not None and sorted(again.collect()["i"].to_list()) == list(range(N))
    clean = run_pipeline(load_config(doc("global_clean")), progress=False)
    assert dataset_digest(run_dir) == dataset_digest(clean.run_dir)


def test_the_nudge_waits_while_the_main_thread_is_inside_a_store_write() -> None:
    """An exception between a shard's rename and the runner noting it would write items twice."""
    def frame_in(module: str, function: str) -> Any:
        scope: dict[str, Any] = {"__name__": module, "sys": sys}
        exec(f"def {function}():\n    return sys._getframe()", scope)  # noqa: S102 - a frame in that module
        return scope[function]()

    assert ("fabrika.pipeline.execute", "flush") in PROTECTED
    assert _protected(frame_in("fabrika.store.shards", "write_shard"))
    assert _protected(frame_in("fabrika.pipeline.execute", "flush"))
    assert not _protected(frame_in("fabrika.pipeline.execute", "run_items"))
    assert not _protected(frame_in("tests.pipeline.stop_stages", "spin"))
    assert RunStopped(signal.SIGTERM).exit_code == 143 and RunStopped(signal.SIGINT).exit_code == 130
    assert isinstance(RunStopped(signal.SIGTERM), KeyboardInterrupt)  # Ctrl-C handlers handle it


# -- the controller in this process (fast; the exit is injected) ----------------------------------------


def test_a_busy_loop_thread_is_interrupted_where_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    import fabrika.pipeline.stopping as stopping
    from tests.pipeline.stop_stages import spin

    monkeypatch.setattr(stopping, "GRACE_S", 0.2)
    finished: list[bool] = []

    async def busy() -> None:
        await asyncio.sleep(0)
        signal.raise_signal(signal.SIGTERM)  # heard now; the loop never gets control again below
        spin(120.0)
        finished.append(True)

    with pytest.raises(RunStopped) as info:
        asyncio.run(stopping.stoppable(busy()))
    assert info.value.exit_code == 143 and not finished  # raised inside spin(), not after it
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the scope gave the handler back
    assert stopping.stop_received() is None


def test_a_second_signal_exits_at_once_even_while_the_watchdog_nudges() -> None:
    from fabrika.pipeline.stopping import StopOnSignals

    codes: list[int] = []

    async def main(grace_s: float) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        with StopOnSignals(loop, task, grace_s=grace_s, exit_now=codes.append) as stop:
            signal.raise_signal(signal.SIGINT)
            if grace_s:  # the watchdog has not nudged yet: the second signal is the user's
                signal.raise_signal(signal.SIGINT)
            else:  # the watchdog nudges in a store write (deferred); a second signal is still the user's
                scope: dict[str, Any] = {"__name__": "fabrika.store.shards", "stop": stop, "time": time}
                code = "def write_shard():\n    while not stop._sent:\n        time.sleep(0.01)\n    time.sleep(0.05)\n"
                exec(code, scope)  # noqa: S102 - a frame in the store
                scope["write_shard"]()
                signal.raise_signal(signal.SIGINT)
        await asyncio.sleep(0)  # the first signal's cancel came after the scope: it cancels nothing

    asyncio.run(main(60.0))
    assert codes == [130]
    asyncio.run(main(0.0))
    assert codes == [130, 130]
