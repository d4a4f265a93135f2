"""`fabrika eval` shares the run's stop (fabrika.pipeline.stopping): SIGTERM mid-eval exits 143 with one
line and writes no report — never a success, never a half-written report. (`fabrika run`'s stops:
tests/pipeline/test_sigterm_stop.py and tests/cli/test_kill_resume.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabrika.testing import FakeOpenAIServer
from tests.eval.test_if import write_samples

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigterm_stops_eval_without_a_report(tmp_path: Path) -> None:
    write_samples(tmp_path / "if.jsonl")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with FakeOpenAIServer(latency_ms=600_000) as srv:  # answers never come: the eval is mid-request
        proc = subprocess.Popen([sys.executable, "-m", "fabrika", "eval", "if", "--out", str(out), "--samples",
                                 str(tmp_path / "if.jsonl"), "--base-url", srv.base_url, "--model", "judge-model"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 60
        while not srv.requests:
            assert proc.poll() is None and time.monotonic() < deadline, "the eval never asked the model"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 143, err.decode()
    assert "stopped by SIGTERM: finished items are saved; rerun the same command to resume" in err.decode()
    assert not (out / "report.json").exists() and not (out / "report.partial.json").exists()
