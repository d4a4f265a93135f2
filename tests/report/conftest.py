"""One loud line at the end of the session when the browser test could not run."""

from __future__ import annotations

from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for report in terminalreporter.stats.get("skipped", []):
        if "test_browser" in str(getattr(report, "nodeid", "")):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            terminalreporter.write_line(f"!!! {reason.removeprefix('Skipped: ')}", red=True, bold=True)
