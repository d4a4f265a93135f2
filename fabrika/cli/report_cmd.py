"""``fabrika report RUN``: a static HTML page with PNG charts (logic in :mod:`fabrika.export.report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    """Add ``report`` to the fabrika app."""

    @app.command("report")
    def report_command(
        run_dir: Annotated[Path, typer.Argument(help="Run directory (runs/<name>).")],
        out_dir: Annotated[Optional[Path], typer.Option("--out", help="Output directory (default RUN/report).")] = None,
        version: Annotated[Optional[str], typer.Option("--version", help="Version to describe (default latest).")] = None,
        max_rows: Annotated[int, typer.Option("--max-rows", help="Rows sampled for length/tool/turn statistics.")] = 20_000,
    ) -> None:
        """Funnel per stage and gate, lengths, shares, tools, turns and LLM accounting as one HTML page."""
        from fabrika.cli.app import fail, out
        from fabrika.errors import StoreError
        from fabrika.export.report import build_report

        try:
            page = build_report(run_dir, out_dir, version, max_rows=max_rows)
        except StoreError as exc:
            fail(str(exc))
        out.print(f"report: {page}")
