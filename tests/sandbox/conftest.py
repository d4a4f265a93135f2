"""Sandbox tests that need bubblewrap go through :func:`require_bwrap`: run, skip loudly, or
(with CI=true / FABRIKA_REQUIRE_BWRAP=1) fail — a CI run never silently skips them."""

from __future__ import annotations

import os

import pytest

from fabrika.sandbox.isolation import bwrap_probe
from tests.sandbox._bwrap_gate import SKIP_MARK, gate


def require_bwrap() -> None:
    action, why = gate(os.environ, bwrap_probe())
    if action == "fail":
        pytest.fail(why, pytrace=False)
    if action == "skip":
        pytest.skip(why)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if SKIP_MARK in str(r.longrepr)]
    if skipped:
        names = ", ".join(r.nodeid.split("::")[-1] for r in skipped[:5])
        terminalreporter.write_line(
            f"!!! {len(skipped)} SANDBOX TEST(S) SKIPPED: {SKIP_MARK} ({bwrap_probe()}). Install it "
            f"(apt-get install bubblewrap), or set CI=true to make this a failure. Skipped: {names}…",
            red=True, bold=True,
        )
