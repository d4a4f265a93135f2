"""Fail closed: a real model's verifier code never runs without bubblewrap unless the config says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabrika.pipeline.config import sandbox_problem, validate_data
from fabrika.sandbox.policy import FAIL_CLOSED_MESSAGE, SandboxSettings, isolation_problem
from fabrika.testing import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[2]
CONSTRAINT = "Весь ответ должен быть написан строчными буквами."
GOOD = json.dumps({"func": "def evaluate(response):\n    return response == response.lower()",
                   "cases": [{"input": "привет мир", "output": True}, {"input": "Привет", "output": False},
                             {"input": "всё хорошо", "output": True}]}, ensure_ascii=False)


def pipeline(tmp_path: Path, base_url: str, **top: object) -> Path:
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(json.dumps({"id": "c-lower", "text": CONSTRAINT}, ensure_ascii=False) + "\n", encoding="utf-8")
    doc = {
        "name": "fail_closed", "run_dir": str(tmp_path / "run"),
        "llm": {"backend": "openai", "model": "fake", "endpoints": [{"base_url": base_url}], "max_retries": 0,
                "cache": {"enabled": False}},
        "stages": [
            {"kind": "if.expand", "library_seeds": False, "seed_files": [str(seeds)], "target_count": 0},
            {"kind": "if.dedup", "input": "if.expand"},
            {"kind": "if.verifiers", "input": "if.dedup", "k": 2},
            {"kind": "if.consistency", "input": "if.verifiers"},
        ],
        "dataset": {"stages": ["if.verifiers"]},
        **top,
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "FABRIKA_REQUIRE_BWRAP")}
    env.update(PATH="/nonexistent", PYTHONPATH=str(REPO))  # no bwrap on PATH
    return subprocess.run([sys.executable, "-m", "fabrika.cli.app", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        srv.script(tag="if.verifiers", responses=[GOOD])
        yield srv


def test_run_and_validate_exit_2_with_one_line_and_write_nothing(tmp_path, server):
    config = pipeline(tmp_path, server.base_url)
    for command in ("run", "validate"):
        proc = cli(command, str(config), "--no-progress") if command == "run" else cli(command, str(config))
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert proc.stderr == FAIL_CLOSED_MESSAGE + "\n", (command, proc.stderr)
    assert not (tmp_path / "run").exists()
    assert server.served == 0


def test_rlimits_opt_in_runs_and_the_manifest_says_so(tmp_path, server):
    config = pipeline(tmp_path, server.base_url, sandbox={"isolation": "rlimits", "timeout_s": 2.0, "workers": 1})
    proc = cli("run", str(config))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sandbox: rlimits — WEAKER ISOLATION" in proc.stderr  # the progress header
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["sandbox_isolation"] == "rlimits"
    assert server.served >= 1  # the k=2 verifier samples (one n=2 request when grouped)
    status = cli("status", str(tmp_path / "run"))
    assert "sandbox isolation: rlimits (weaker: no namespaces)" in status.stdout


def test_the_message_is_the_documented_line():
    assert FAIL_CLOSED_MESSAGE == ("install bubblewrap (apt-get install bubblewrap) or set sandbox.isolation: "
                                   "rlimits to accept weaker isolation")


def test_policy_by_backend_and_setting(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    auto, rl, bw = SandboxSettings(), SandboxSettings(isolation="rlimits"), SandboxSettings(isolation="bwrap")
    assert isolation_problem(auto, "openai") == FAIL_CLOSED_MESSAGE
    assert isolation_problem(auto, "vllm") == FAIL_CLOSED_MESSAGE
    assert isolation_problem(bw, "sim") == FAIL_CLOSED_MESSAGE
    assert isolation_problem(auto, "sim") is None  # the offline demo may fall back, visibly
    assert isolation_problem(rl, "openai") is None
    assert auto.pool_config("openai").isolation == "bwrap" and auto.pool_config("sim").isolation == "auto"
    assert rl.pool_config("openai", timeout_s=3.0).timeout_s == 3.0


def test_pipelines_without_llm_code_are_not_held_back(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    cfg, issues = validate_data({"name": "fc_only", "llm": {"backend": "openai", "model": "m",
                                                            "endpoints": [{"base_url": "http://127.0.0.1:9"}]},
                                 "stages": [{"kind": "if.expand", "library_seeds": True, "target_count": 0}]},
                                "t.yaml", tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    assert sandbox_problem(cfg) is None


def test_the_sim_demo_is_not_held_back_without_bwrap(tmp_path):
    config = pipeline(tmp_path, "http://127.0.0.1:9")
    doc = yaml.safe_load(config.read_text(encoding="utf-8"))
    doc["llm"] = {"backend": "sim", "model": "sim"}
    config.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    proc = cli("validate", str(config))
    assert proc.returncode == 0, proc.stderr
    doc["sandbox"] = {"isolation": "bwrap"}  # ...unless the config demands bubblewrap
    config.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    proc = cli("validate", str(config))
    assert proc.returncode == 2 and proc.stderr == FAIL_CLOSED_MESSAGE + "\n"
