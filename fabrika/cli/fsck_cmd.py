"""``fabrika fsck RUN_DIR [--repair]``: check a run's journals and shards (logic in :mod:`fabrika.store.fsck`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add ``fsck`` to the fabrika app."""

    @app.command("fsck")
    def fsck_command(
        run_dir: Annotated[Path, typer.Argument(help="Run directory (runs/<name>).")],
        repair: Annotated[bool, typer.Option("--repair", help="Drop damaged journal items and move damaged shards "
                                             "into RUN_DIR/quarantine/, so the next run redoes those items.")] = False,
    ) -> None:
        """Check every journal record and shard of a run. Exit 0 when clean (or repaired), 1 when damage is left."""
        from rich.markup import escape

        from fabrika.cli.app import err, fail, out
        from fabrika.errors import StorageError, StoreError
        from fabrika.store.fsck import fsck

        try:
            report = fsck(run_dir, repair=repair)
        except StorageError as exc:
            fail(str(exc), code=exc.exit_code)
        except StoreError as exc:
            fail(str(exc))
        for p in report.problems:
            (out if p.repaired else err).print(escape(p.line()), highlight=False, soft_wrap=True)
        summary = (f"{run_dir}: {report.journals} journal(s), {report.shards} shard(s), {report.rows} row(s) checked; "
                   f"{len(report.problems)} problem(s)")
        if repair and report.problems:
            summary += (f", {report.dropped_items} damaged journal record(s) dropped, "
                        f"{len(report.quarantined)} shard(s) moved to {run_dir / 'quarantine'}")
        if report.temp_files:
            summary += f"; {report.temp_files} temporary file(s) of a crashed writer" + (" removed" if repair else "")
        out.print(escape(summary), highlight=False, soft_wrap=True)
        if not report.clean:
            raise typer.Exit(1)
