"""kill -9 at random moments, resume, and get exactly the dataset of an uninterrupted run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from fabrika.pipeline.config import load_config
from fabrika.pipeline.runner import run_pipeline
from fabrika.store import RunStore
from fabrika.store.manifest import effective_status
from fabrika.store.shards import REQUESTS_DIR
from fabrika.store.versions import scan_version

N = 480


def make(tmp_path: Path, run_name: str) -> Path:
    prompts = tmp_path / "prompts.jsonl"
    if not prompts.exists():
        with prompts.open("w", encoding="utf-8") as fh:
            for i in range(N):
                fh.write(json.dumps({"prompt": f"Вопрос номер {i}: сколько будет {i} плюс {i}?"}, ensure_ascii=False) + "\n")
    doc = {
        "name": run_name,
        "run_dir": str(tmp_path / run_name),
        "max_in_flight": 8,
        "llm": {"backend": "sim", "sim": {"latency_ms": 25}},
        "stages": [
            {"kind": "generic.prompts", "name": "prompts", "path": "prompts.jsonl", "chunk_size": 100},
            {"kind": "generic.complete", "name": "answers", "input": "prompts", "chunk_size": 8},
        ],
        "dataset": {"stages": ["answers"]},
    }
    path = tmp_path / f"{run_name}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def start(cfg: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fabrika", "run", str(cfg), "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cfg.parent,
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kill_9_and_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    rng = random.Random(7)
    cfg = make(tmp_path, "killed")
    answers = RunStore(tmp_path / "killed").stage_dir("answers")
    partial_kills = 0
    for _ in range(3):
        proc = start(cfg)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            if any(answers.glob("part-*.parquet")):
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert effective_status(json.loads((tmp_path / "killed" / "manifest.json").read_text(encoding="utf-8"))) == "killed"
        written = RunStore(tmp_path / "killed").scan_raw("answers")
        n = 0 if written is None else written.select(pl.len()).collect().item()
        partial_kills += 0 < n < N
    assert partial_kills >= 2, "kills should land mid-stage"

    final = start(cfg)
    _, stderr = final.communicate(timeout=60)
    assert final.returncode == 0, stderr.decode()

    reference = run_pipeline(load_config(make(tmp_path, "clean")), progress=False)
    got = scan_version(tmp_path / "killed", "v1").sort("id").collect()
    want = scan_version(reference.run_dir, "v1").sort("id").collect()
    assert got.height == N and got["id"].n_unique() == N
    assert got.equals(want)
    raw = RunStore(tmp_path / "killed").scan_raw("answers").collect()
    assert raw.height == N and raw["input_id"].n_unique() == N  # nothing duplicated, nothing lost
    # only shards, and the request-log sidecar holding a log per shard (no temp file left by a kill)
    assert not [p for p in answers.iterdir() if not p.name.startswith("part-") and p.name != REQUESTS_DIR]
    shards = {p.name for p in answers.iterdir() if p.name.startswith("part-")}
    logs = {p.name for p in (answers / REQUESTS_DIR).iterdir()} if (answers / REQUESTS_DIR).exists() else set()
    assert logs <= shards, sorted(logs - shards)
    assert os.path.exists(tmp_path / "killed" / "manifest.json")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sigterm_saves_finished_items_and_resumes(tmp_path: Path) -> None:
    cfg = make(tmp_path, "termed")
    doc = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    doc["stages"][1]["chunk_size"] = 10_000  # bigger than the run: only a stop-time flush can write anything
    doc["llm"]["sim"]["latency_ms"] = 100  # answers take >= 6 s: the signal lands mid-stage
    cfg.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    store = RunStore(tmp_path / "termed")
    proc = start(cfg)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not store.has_rows("prompts"):
        time.sleep(0.01)
    time.sleep(1.5)  # answers are being produced now
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr.decode()  # 128 + SIGTERM (fabrika.pipeline.stopping)
    assert f"stopped by SIGTERM: finished items are saved; rerun `fabrika run {cfg}` to resume" in stderr.decode()
    saved = store.scan_raw("answers")
    assert saved is not None and 0 < saved.select(pl.len()).collect().item() < N
    assert json.loads((tmp_path / "termed" / "manifest.json").read_text(encoding="utf-8"))["status"] == "interrupted"
    final = start(cfg)
    _, stderr = final.communicate(timeout=60)
    assert final.returncode == 0, stderr.decode()
    raw = store.scan_raw("answers").collect()
    assert raw.height == N and raw["input_id"].n_unique() == N


def test_status_tells_a_killed_run_from_a_running_one(tmp_path: Path) -> None:
    import socket

    from fabrika.store.manifest import effective_status

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = socket.gethostname()
    assert effective_status({"status": "running", "invocations": [{"pid": dead.pid, "host": here}]}) == "killed"
    assert effective_status({"status": "running", "invocations": [{"pid": os.getpid(), "host": here}]}) == "running"
    assert effective_status({"status": "done", "invocations": [{"pid": dead.pid, "host": here}]}) == "done"
