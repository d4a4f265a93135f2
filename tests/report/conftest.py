"""One loud line at the end of the session when the browser test could not run; the explorer's demo run."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for report in terminalreporter.stats.get("skipped", []):
        if "test_browser" in str(getattr(report, "nodeid", "")):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            terminalreporter.write_line(f"!!! {reason.removeprefix('Skipped: ')}", red=True, bold=True)


@pytest.fixture(scope="session")
def explorer_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The FC demo (sim) with rejected and gate-dropped rows, refiltered once: v1 (config), v2 (Russian only)."""
    from typer.testing import CliRunner

    from fabrika.cli.app import app
    from tests.report.report_fixtures import run_fc_demo

    run = run_fc_demo(tmp_path_factory.mktemp("explorer") / "run")
    res = CliRunner().invoke(app, ["refilter", str(run), "--set", "filters.language.allowed=[ru]", "--name", "v2"])
    assert res.exit_code == 0, res.output
    return run
