"""``fabrika report RUN``: a self-contained HTML page (logic in :mod:`fabrika.export.report`); ``fabrika browse RUN``:
the same run explorer served from the shards on 127.0.0.1 (:mod:`fabrika.export.explorer_server`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``browse`` to the fabrika app."""

    @app.command("report")
    def report_command(
        run_dir: Annotated[Path, typer.Argument(help="Run directory (runs/<name>).")],
        out_dir: Annotated[Optional[Path], typer.Option("--out", help="Output directory (default RUN/report).")] = None,
        version: Annotated[Optional[str], typer.Option("--version", help="Version to describe (default latest).")] = None,
        max_rows: Annotated[int, typer.Option("--max-rows", help="Rows sampled for length/tool/turn statistics.")] = 20_000,
        kept: Annotated[int, typer.Option("--kept", min=0, help="Kept rows per stage in the sample browser.")] = 30,
        per_reason: Annotated[int, typer.Option("--per-reason", min=0,
                                                help="Rejected rows per reason in the sample browser.")] = 4,
        page_rows: Annotated[int, typer.Option("--page-rows", min=0, help="Runs with at most this many rows go into "
                                               "the page whole; bigger ones get a sample (use `fabrika browse`).")] = 5_000,
        overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a report of another run in --out.")] = False,
    ) -> None:
        """Funnel, lengths, shares, tools, turns, LLM accounting and a sample browser, as one offline HTML page."""
        from fabrika.cli.app import fail, out
        from fabrika.errors import StoreError
        from fabrika.export.browser import BrowserLimits
        from fabrika.export.report import build_report

        try:
            page = build_report(run_dir, out_dir, version, max_rows=max_rows, overwrite=overwrite,
                                limits=BrowserLimits(max_rows=page_rows, kept_per_stage=kept,
                                                    per_reason=per_reason))
        except StoreError as exc:
            fail(str(exc))
        out.print(f"report: {page}")

    @app.command("browse")
    def browse_command(
        run_dir: Annotated[Path, typer.Argument(help="Run directory (runs/<name>).")],
        port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free one).")] = 8765,
        version: Annotated[Optional[str], typer.Option("--version", help="Version whose kept rows are shown "
                                                       "(default latest).")] = None,
    ) -> None:
        """Page through every row of every stage (kept, gate-dropped, rejected), served from the shards on 127.0.0.1."""
        from fabrika.cli.app import fail, out
        from fabrika.errors import StoreError
        from fabrika.export.explorer_server import serve

        try:
            serve(run_dir, version, port, ready=lambda url: out.print(f"browse: {url} (Ctrl-C stops)"))
        except StoreError as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; pass --port N (0: any free port)")
        except KeyboardInterrupt:
            out.print("browse: stopped")
