"""Live per-stage progress (rich): done/total, rate, ETA, tokens, cache hits, rejections."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class RunProgress:
    """One progress line per stage; disabled (no output) for tests and ``--no-progress``."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._progress = Progress(
            TextColumn("[bold]{task.description:<18}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[extra]}"),
            console=Console(stderr=True),
            disable=not enabled,
            refresh_per_second=4,
        )

    def __enter__(self) -> "RunProgress":
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)

    def note(self, text: str) -> None:
        """A line above the bars, for the run's header (e.g. the sandbox isolation mode)."""
        if self.enabled:
            self._progress.console.print(text, highlight=False)

    def add(self, name: str, total: int | None) -> TaskID:
        return self._progress.add_task(name, total=total, rate="", extra="")

    def _fields(self, stats: Any, task: TaskID) -> dict[str, Any]:
        llm = stats.llm
        elapsed = self._progress.tasks[task].elapsed or 0.0
        done = stats.processed + stats.skipped
        rate = f"{stats.processed / elapsed:.1f}/s" if elapsed > 0 and stats.processed else ""
        extra = f"tok {llm.prompt_tokens + llm.completion_tokens} cache {llm.cached}/{llm.requests}"
        if stats.rejected:
            extra += f" rejected {stats.rejected}"
        if stats.skipped:
            extra += f" resumed {stats.skipped}"
        if llm.errors:
            extra += f" llm-err {llm.errors}"
        if stats.internal_errors:
            extra += f" [red]internal {stats.internal_errors}[/]"
        if stats.cache_miss:
            extra += f" [yellow]cache-miss {stats.cache_miss}[/]"
        return {"completed": done, "rate": rate, "extra": extra}

    def advance(self, task: TaskID, stats: Any) -> None:
        if self.enabled:
            self._progress.update(task, **self._fields(stats, task))

    def finish(self, task: TaskID, stats: Any) -> None:
        if self.enabled:
            fields = self._fields(stats, task)
            total = self._progress.tasks[task].total
            if total is None:
                fields["total"] = fields["completed"]
            self._progress.update(task, **fields)
