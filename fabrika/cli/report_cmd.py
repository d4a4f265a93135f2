"""``fabrika report RUN``: a self-contained HTML page (logic in :mod:`fabrika.export.report`)."""

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
        kept: Annotated[int, typer.Option("--kept", min=0, help="Kept rows per stage in the sample browser.")] = 30,
        per_reason: Annotated[int, typer.Option("--per-reason", min=0,
                                                help="Rejected rows per reason in the sample browser.")] = 4,
        overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a report of another run in --out.")] = False,
    ) -> None:
        """Funnel, lengths, shares, tools, turns, LLM accounting and a sample browser, as one offline HTML page."""
        from fabrika.cli.app import fail, out
        from fabrika.errors import StoreError
        from fabrika.export.browser import BrowserLimits
        from fabrika.export.report import build_report

        try:
            page = build_report(run_dir, out_dir, version, max_rows=max_rows, overwrite=overwrite,
                                limits=BrowserLimits(kept_per_stage=kept, per_reason=per_reason))
        except StoreError as exc:
            fail(str(exc))
        out.print(f"report: {page}")
