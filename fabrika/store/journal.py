"""A stage's write-ahead journal: finished rows are durable within about a second.

Shards hold ``chunk_size`` items (few, large files are what polars reads
fast), so finished items wait in memory until a chunk fills. The journal
closes that window: each finished item's rows are appended to
``stages/<stage>/journal.jsonl`` as they come and the file is fsynced at most
every ``sync_s`` seconds. When a chunk becomes a shard, the journal is
rewritten (atomically) with the rows still waiting. After a crash,
:meth:`fabrika.store.run.RunStore.recover_journal` turns what the journal holds into a shard — skipping items a
shard already has (a crash between writing the shard and rewriting the
journal) and a torn last line — before the stage resumes.

Values are stored as the shard would store them (nested values as JSON text,
:func:`fabrika.store.shards.flatten_row`), so a recovered row reads exactly
like one written directly.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterable

import fabrika.store.shards as shards

JOURNAL = "journal.jsonl"


def _line(row: dict[str, Any]) -> str:
    return json.dumps(shards.flatten_row(row), ensure_ascii=False, separators=(",", ":"), default=str) + "\n"


class StageJournal:
    """Appends finished rows; :meth:`maybe_sync` fsyncs at most every ``sync_s`` seconds.

    The file (and the stage directory) is created on the first append, so a stage
    that finished nothing leaves nothing behind.
    """

    def __init__(self, stage_dir: Path, sync_s: float = 1.0) -> None:
        self.dir = stage_dir
        self.path = stage_dir / JOURNAL
        self.sync_s = sync_s
        self._fh: Any = None
        self._dirty = False
        self._last_sync = time.monotonic()

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        if self._fh is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")
        self._fh.write("".join(_line(r) for r in rows))
        self._dirty = True

    def maybe_sync(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._dirty and now - self._last_sync >= self.sync_s:
            self.sync()

    def sync(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        self._dirty = False
        self._last_sync = time.monotonic()

    def rewrite(self, rows: Iterable[dict[str, Any]]) -> None:
        """Replace the journal with ``rows`` (the items not yet in a shard), atomically."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        data = "".join(_line(r) for r in rows).encode("utf-8")
        if data:
            shards.atomic_write_bytes(self.path, data)
        else:
            self.path.unlink(missing_ok=True)
        self._dirty = False
        self._last_sync = time.monotonic()

    def close(self, remove: bool) -> None:
        if self._fh is not None:
            if self._dirty:
                self.sync()
            self._fh.close()
            self._fh = None
        if remove:
            self.path.unlink(missing_ok=True)


def read_rows(stage_dir: Path) -> list[dict[str, Any]]:
    """Rows in a stage's journal (a torn or garbled line — a crash mid-write — is skipped)."""
    path = stage_dir / JOURNAL
    if not path.is_file():
        return []
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("id"):
                rows.append(row)
    return rows


def count_rows(stage_dir: Path) -> int:
    """Rows a journal holds (for ``fabrika status`` on a live or killed run)."""
    path = stage_dir / JOURNAL
    if not path.is_file():
        return 0
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip())
