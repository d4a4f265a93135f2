"""Real processes against one run dir: a second writer is refused, a killed run's rows are on disk,
and `validate --probe` names a wrong model or a dead endpoint."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.store import RunStore
from fabrika.store.versions import scan_version
from fabrika.testing import FakeOpenAIServer

N = 200
runner = CliRunner()


def make(tmp_path: Path, latency_ms: float = 20, chunk_size: int = 8) -> Path:
    prompts = tmp_path / "prompts.jsonl"
    with prompts.open("w", encoding="utf-8") as fh:
        for i in range(N):
            fh.write(json.dumps({"prompt": f"Задача {i}: назови число {i}."}, ensure_ascii=False) + "\n")
    doc = {
        "name": "shared", "run_dir": str(tmp_path / "run"), "max_in_flight": 8,
        "llm": {"backend": "sim", "sim": {"latency_ms": latency_ms}},
        "stages": [
            {"kind": "generic.prompts", "name": "prompts", "path": "prompts.jsonl"},
            {"kind": "generic.complete", "name": "answers", "input": "prompts", "chunk_size": chunk_size},
        ],
        "dataset": {"stages": ["answers"]},
    }
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def start(cfg: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fabrika", "run", str(cfg), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cfg.parent)


def wait_for(pred, timeout: float = 30) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.01)


@pytest.mark.timeout(90)
def test_second_run_on_the_same_dir_exits_2_and_the_first_has_no_duplicates(tmp_path: Path) -> None:
    cfg = make(tmp_path, latency_ms=200)  # about 5 s of work: the second starts while the first runs
    first = start(cfg)
    lock = tmp_path / "run" / ".lock"
    wait_for(lambda: lock.is_file() and b"pid" in lock.read_bytes())
    second = start(cfg)
    _, err2 = second.communicate(timeout=60)
    assert second.returncode == 2, err2.decode()
    assert f"is in use by pid {first.pid} (fabrika run" in err2.decode()
    assert first.poll() is None, "the first run ended before the second was refused; the test proved nothing"
    _, err1 = first.communicate(timeout=60)
    assert first.returncode == 0, err1.decode()
    data = scan_version(tmp_path / "run", "v1").collect()
    assert data.height == N and data["id"].n_unique() == N
    # the lock dies with its process: a later run gets it (no stale lock)
    again = start(cfg)
    assert again.wait(60) == 0


@pytest.mark.timeout(90)
def test_status_of_a_killed_run_shows_the_rows_on_disk_and_resume_recovers_them(tmp_path: Path) -> None:
    cfg = make(tmp_path, latency_ms=200, chunk_size=10_000)  # no shard before the end: only the journal
    proc = start(cfg)
    journal = tmp_path / "run" / "stages" / "answers" / "journal.jsonl"
    wait_for(lambda: journal.is_file() and journal.stat().st_size > 0)
    time.sleep(1.5)  # > the journal's fsync interval
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    on_disk = sum(1 for line in journal.read_bytes().splitlines() if line.strip())
    assert 0 < on_disk < N
    assert not RunStore(tmp_path / "run").shards("answers")  # nothing but the journal
    status = runner.invoke(app, ["status", str(tmp_path / "run"), "--json"])
    assert status.exit_code == 0, status.output
    doc = json.loads(status.output)
    assert doc["status"] == "killed"
    assert doc["stages"]["answers"]["rows"] == on_disk and doc["stages"]["answers"]["journal_rows"] == on_disk

    final = start(cfg)
    _, err = final.communicate(timeout=60)
    assert final.returncode == 0, err.decode()
    m = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert m["stages"]["answers"]["recovered_from_journal"] == on_disk
    assert m["stages"]["answers"]["processed"] == N - on_disk  # the journal's items were not asked again
    raw = RunStore(tmp_path / "run").scan_raw("answers").collect()
    assert raw.height == N and raw["input_id"].n_unique() == N
    assert not journal.exists()


def probe_config(tmp_path: Path, base_url: str, model: str) -> Path:
    (tmp_path / "p.jsonl").write_text('{"prompt": "Привет"}\n', encoding="utf-8")
    doc = {"name": "probe", "run_dir": str(tmp_path / "run"),
           "llm": {"backend": "openai", "model": model, "endpoints": [{"base_url": base_url}],
                   "connect_timeout_s": 1},
           "stages": [{"kind": "generic.prompts", "name": "prompts", "path": "p.jsonl"},
                      {"kind": "generic.complete", "name": "answers", "input": "prompts"}]}
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def test_validate_probe_names_a_wrong_model_and_a_dead_endpoint(tmp_path: Path) -> None:
    with FakeOpenAIServer(models=["Qwen/Qwen3-8B"]) as srv:
        good = runner.invoke(app, ["validate", str(probe_config(tmp_path, srv.base_url, "Qwen/Qwen3-8B")), "--probe"])
        assert good.exit_code == 0, good.output
        wrong = runner.invoke(app, ["validate", str(probe_config(tmp_path, srv.base_url, "Qwen/Qwen3-4B")), "--probe"])
        assert wrong.exit_code == 2
        [line] = wrong.stderr.strip().splitlines()
        assert srv.base_url in line and "'Qwen/Qwen3-4B' is not served" in line and "check llm.model" in line
        # `run` probes too, before anything is written
        ran = runner.invoke(app, ["run", str(probe_config(tmp_path, srv.base_url, "Qwen/Qwen3-4B")), "--no-progress"])
        assert ran.exit_code == 2 and "is not served" in ran.stderr
        assert srv.served == 0 and not (tmp_path / "run" / "stages").exists()
        dead_url = srv.base_url
    down = runner.invoke(app, ["validate", str(probe_config(tmp_path, dead_url, "Qwen/Qwen3-8B")), "--probe"])
    assert down.exit_code == 2
    [line] = down.stderr.strip().splitlines()
    assert dead_url in line and "unreachable" in line


def test_duplicate_ids_fail_materialisation_loudly(tmp_path: Path) -> None:
    from fabrika.errors import StoreError
    from fabrika.store.versions import materialise

    cfg = make(tmp_path, latency_ms=0)
    assert runner.invoke(app, ["run", str(cfg), "--no-progress"]).exit_code == 0
    store = RunStore(tmp_path / "run")
    row = store.scan_raw("answers").head(1).collect().to_dicts()[0]
    store.write("answers", [row])  # what a second writer would have done
    with pytest.raises(StoreError, match="written more than once"):
        materialise(tmp_path / "run", name="v2")
    assert not (tmp_path / "run" / "versions" / "v2").exists()
    refilter = runner.invoke(app, ["refilter", str(tmp_path / "run")])
    assert refilter.exit_code == 2 and "written more than once" in refilter.stderr
    assert pl.read_parquet(tmp_path / "run" / "versions" / "v1" / "data" / "answers.parquet").height == N
