"""`make test` = CI: without bubblewrap the sandbox tests skip loudly, and with CI=true they fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox._bwrap_gate import bwrap_required, gate

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("env", "required"),
    [
        ({}, False),
        ({"CI": "true"}, True),
        ({"CI": "1"}, True),
        ({"CI": "false"}, False),
        ({"CI": ""}, False),
        ({"FABRIKA_REQUIRE_BWRAP": "1"}, True),
        ({"FABRIKA_REQUIRE_BWRAP": "0", "CI": "no"}, False),
        ({"GITHUB_ACTIONS": "true", "CI": "TRUE"}, True),
    ],
)
def test_which_environments_require_bwrap(env, required):
    assert bwrap_required(env) is required


def test_gate_runs_skips_or_fails():
    assert gate({"CI": "true"}, None) == ("run", "")
    action, why = gate({}, "bubblewrap (bwrap) is not on PATH")
    assert action == "skip" and "apt-get install bubblewrap" in why and "not on PATH" in why
    action, why = gate({"CI": "true"}, "bwrap exited 1: No permissions to create new namespace")
    assert action == "fail" and "CI" in why and "No permissions" in why


def _pytest_without_bwrap(ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "FABRIKA_REQUIRE_BWRAP")}
    env["PATH"] = "/nonexistent"  # no bwrap to find
    env["PYTHONPATH"] = str(REPO)
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/sandbox/test_isolation_paths.py"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_without_bwrap_the_suite_says_loudly_what_it_skipped():
    proc = _pytest_without_bwrap(ci=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "SANDBOX TEST(S) SKIPPED" in proc.stdout and "apt-get install bubblewrap" in proc.stdout


def test_without_bwrap_ci_fails():
    proc = _pytest_without_bwrap(ci=True)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "required because CI or FABRIKA_REQUIRE_BWRAP is set" in proc.stdout


def _ensure_bwrap(tmp_path: Path, uid: str) -> subprocess.CompletedProcess[str]:
    """.ci/ensure-bwrap.sh on a PATH without bwrap (and without apt-get), as ``uid``."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n", encoding="utf-8")
    (fake / "id").chmod(0o755)
    return subprocess.run(["/bin/bash", str(REPO / ".ci" / "ensure-bwrap.sh")], env={"PATH": str(fake)},
                          capture_output=True, text=True, timeout=30, check=False)


def test_make_test_says_loudly_when_bwrap_cannot_be_installed(tmp_path):
    proc = _ensure_bwrap(tmp_path, "1000")
    assert proc.returncode == 0
    assert "bubblewrap is NOT installed" in proc.stderr and "SKIPPED (FAIL with CI=true)" in proc.stderr


def test_make_test_and_ci_share_the_install_step():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    test_target = makefile[makefile.index("\ntest:"):]
    assert "ensure-bwrap.sh" in test_target.split("\n\n")[0]
    assert ".ci/ensure-bwrap.sh" in ci and 'export CI="${CI:-true}"' in ci and "make test" in ci
