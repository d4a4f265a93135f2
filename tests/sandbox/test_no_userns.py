"""A host whose kernel refuses unprivileged user namespaces: bwrap is installed but cannot start.

Faked with a ``bwrap`` shim first on PATH that prints bwrap's own error and exits 1 (what bwrap does
as a non-root user when ``kernel.unprivileged_userns_clone`` / ``user.max_user_namespaces`` forbid it).
The documented behaviour (docs/ARCHITECTURE.md, "Fail closed" and "As a non-root user"): with a real
model, ``fabrika run`` / ``validate`` exit 2 with the one-line fix before any LLM call; a pool that
demands bwrap raises ``SandboxError``; only the offline ``sim`` demo falls back to rlimits, and says
so. Never a silent weaker mode, never a verdict from a sandbox that did not start.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from fabrika.errors import SandboxError
from fabrika.sandbox import SandboxConfig, SandboxPool
from fabrika.sandbox.isolation import bwrap_probe, resolve_isolation
from fabrika.sandbox.policy import FAIL_CLOSED_MESSAGE, SandboxSettings, header_line, isolation_problem
from fabrika.testing import FakeOpenAIServer
from tests.sandbox.test_fail_closed import GOOD, pipeline

#: bwrap's message (bubblewrap 0.4-0.11) when the kernel does not let this user create a user namespace.
USERNS_ERROR = ("bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
                "non-privileged user namespaces. On e.g. debian this can be enabled with "
                "'sysctl kernel.unprivileged_userns_clone=1'.")
CODE = "def evaluate(response):\n    return response == response.lower()\n"


def _shim(tmp_path: Path, body: str) -> str:
    """A directory holding an executable ``bwrap`` running ``body`` (sh); returns a PATH with it first."""
    bin_dir = tmp_path / "shim-bin"
    bin_dir.mkdir()
    shim = bin_dir / "bwrap"
    shim.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    shim.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


@pytest.fixture
def no_userns(tmp_path, monkeypatch):
    """PATH whose ``bwrap`` fails the way it does without unprivileged user namespaces."""
    path = _shim(tmp_path, f"echo \"{USERNS_ERROR}\" >&2\nexit 1\n")
    monkeypatch.setenv("PATH", path)
    return path


def test_the_probe_names_bwraps_error(no_userns):
    reason = bwrap_probe()
    assert reason is not None
    assert reason.startswith("bwrap exited 1: ") and "non-privileged user namespaces" in reason


def test_a_real_model_pipeline_stops_before_any_llm_call(no_userns):
    assert isolation_problem(SandboxSettings(), "openai") == FAIL_CLOSED_MESSAGE
    assert isolation_problem(SandboxSettings(), "vllm") == FAIL_CLOSED_MESSAGE
    assert isolation_problem(SandboxSettings(isolation="bwrap"), "sim") == FAIL_CLOSED_MESSAGE
    assert isolation_problem(SandboxSettings(isolation="rlimits"), "openai") is None  # the explicit opt-in


def test_a_pool_that_demands_bwrap_raises_and_runs_nothing(no_userns):
    with pytest.raises(SandboxError, match="bubblewrap cannot run here: bwrap exited 1: .*user namespaces"):
        resolve_isolation("bwrap")
    with pytest.raises(SandboxError, match="isolation='bwrap'"):
        SandboxPool(SandboxConfig(isolation="bwrap", workers=1))


def test_only_the_sim_demo_falls_back_and_says_so(no_userns, caplog):
    config = SandboxSettings().pool_config("sim", workers=1)
    assert config.isolation == "auto"
    with caplog.at_level(logging.WARNING, logger="fabrika.sandbox"):
        with SandboxPool(config) as pool:
            assert pool.isolation == "rlimits"
            verdicts = pool.run_sync(CODE, ["всё хорошо", "Привет"])
    assert [v.status for v in verdicts] == ["true", "false"]
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "FALLING BACK to rlimits" in warning and "non-privileged user namespaces" in warning
    assert "rlimits" in header_line(SandboxSettings(), "sim") and "WEAKER ISOLATION" in header_line(SandboxSettings(), "sim")


def test_bwrap_that_passes_the_probe_but_cannot_start_a_worker_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    """The probe runs ``python -c``; a worker runs the zygote script. A bwrap that starts the first and
    not the second (a namespace refused later) must stop the pool, in ``auto`` too: never rlimits."""
    real = shutil.which("bwrap") or "/usr/bin/bwrap"
    path = _shim(tmp_path, f'for a in "$@"; do [ "$a" = "-c" ] && exec {real} "$@"; done\n'
                           f"echo \"{USERNS_ERROR}\" >&2\nexit 1\n")
    monkeypatch.setenv("PATH", path)
    if bwrap_probe() is not None:
        pytest.skip("bubblewrap cannot run here: the probe half of the shim needs a working bwrap")
    for isolation in ("bwrap", "auto"):
        with pytest.raises(SandboxError, match=r"sandbox workers \(bwrap\) fail their self-test"):
            SandboxPool(SandboxConfig(isolation=isolation, workers=1))


def test_fabrika_run_and_validate_exit_2_with_the_fix(tmp_path, no_userns):
    """The CLI (in process: its import is the slow part, and ``tests/sandbox/test_fail_closed.py`` runs
    it as a subprocess) prints the one line and exits 2; no request reaches the model, nothing is written."""
    from typer.testing import CliRunner

    from fabrika.cli.app import app

    with FakeOpenAIServer() as server:
        server.script(tag="if.verifiers", responses=[GOOD])
        config = pipeline(tmp_path, server.base_url)
        for args in (["run", str(config), "--no-progress"], ["validate", str(config)]):
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 2, (args, result.output, result.exception)
            assert result.stderr == FAIL_CLOSED_MESSAGE + "\n", (args, result.stderr)
        assert server.served == 0
    assert not (tmp_path / "run").exists()
