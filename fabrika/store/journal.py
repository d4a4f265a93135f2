"""A stage's write-ahead journal: finished items are durable within about a second, whole or not at all.

Shards hold ``chunk_size`` items (few, large files are what polars reads
fast), so finished items wait in memory until a chunk fills. The journal
closes that window: each finished item is appended to
``stages/<stage>/journal.jsonl`` as it comes and the file is fsynced at most
every ``sync_s`` seconds. When a chunk becomes a shard, the journal is
rewritten (atomically) with the items still waiting. After a crash,
:meth:`fabrika.store.run.RunStore.recover_journal` turns what the journal holds into a shard —
skipping items a shard already has (a crash between writing the shard and rewriting the
journal) — before the stage resumes.

**One record per item, with a checksum.** A record is one line::

    fj2 <blake2b-64 of the rest, 16 hex> <row count> <payload>\\n

where the payload is ``{"item": <input id>, "rows": [<rows>]}`` as compact JSON (UTF-8,
so no raw newline inside). An item's rows are committed together or not at all: a
journal cut anywhere inside a record loses the whole item, which the next run redoes — it
never counts as done with part of its rows. Reading (:func:`scan`) sorts the damage:

* a **torn tail** — the records after the last intact one are incomplete (no newline) or
  fail their checksum — is what a crash, a kill or a full disk leaves; those items are
  dropped and redone;
* a damaged record **before** an intact one cannot come from a crash (the file is only
  appended to, and rewritten by rename): :class:`~fabrika.errors.JournalCorruptError`
  names the file, the line and byte offset and the repair (``fabrika fsck RUN_DIR
  --repair`` drops the damaged items so the next run redoes them).

Journals of earlier fabrika versions (``{...}`` JSON, one row per line, no checksum) are
read as *legacy*: every item but the file's last (the only one a cut can have reached) is
kept, and a line that does not parse before the end is the same loud error.

Values are stored as the shard would store them (nested values as JSON text, text made
storable: :func:`fabrika.store.shards.flatten_row`), so a recovered row reads exactly
like one written directly. A write that fails (a full disk, a read-only directory) cuts
the file back to its last whole record and raises a one-line
:class:`~fabrika.errors.StorageError`: nothing half-written stays behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any, Iterable, Iterator

import fabrika.store.shards as shards
from fabrika.errors import JournalCorruptError, StorageError
from fabrika.textutil.jsontext import dumps_compact_bytes

JOURNAL = "journal.jsonl"
#: The journal of LLM worker ``k`` of a stage split over processes (``llm_workers``): ``journal-w<k>.jsonl``.
PARTITION_JOURNAL = "journal-w{index}.jsonl"
MAGIC = b"fj2 "
#: The one call that puts journal bytes on disk (tests inject a full disk here).
_write = os.write
_HASH_HEX = 16


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=_HASH_HEX // 2).hexdigest().encode("ascii")


def item_key(row: dict[str, Any]) -> str:
    """The id an item is resumed by: its rows' ``input_id`` (a row's own ``id`` when it has none)."""
    return str(row.get("input_id") or row["id"])


def encode_item(rows: list[dict[str, Any]], *, flat: bool = False) -> bytes:
    """One journal record holding all of one item's ``rows`` (``flat``: :func:`~fabrika.store.shards.flatten_row`
    made them already)."""
    flat_rows = rows if flat else [shards.flatten_row(r) for r in rows]
    payload = dumps_compact_bytes({"item": item_key(flat_rows[0]), "rows": flat_rows})
    rest = b"%d " % len(flat_rows) + payload
    return MAGIC + _digest(rest) + b" " + rest + b"\n"


def decode_record(line: bytes) -> list[dict[str, Any]] | None:
    """The rows of one record (``line`` with its newline), or ``None`` when it is damaged."""
    if not line.startswith(MAGIC) or not line.endswith(b"\n"):
        return None
    body = line[len(MAGIC):-1]
    want, sep, rest = body.partition(b" ")
    if not sep or len(want) != _HASH_HEX or _digest(rest) != want:
        return None
    count, sep, payload = rest.partition(b" ")
    try:
        doc = json.loads(payload.decode("utf-8"))
        n = int(count)
    except ValueError:
        return None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if (not sep or not isinstance(rows, list) or len(rows) != n or not rows
            or not all(isinstance(r, dict) and r.get("id") for r in rows)):
        return None
    return rows


def _group_items(rows: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Consecutive rows of one item (the runner keeps an item's rows together)."""
    for _, item in groupby(rows, key=item_key):
        yield list(item)


@dataclass
class Damage:
    """A damaged record: 1-based ``line``, byte ``offset``, and whether it is part of the torn tail."""

    line: int
    offset: int
    tail: bool


@dataclass
class JournalScan:
    """What a journal holds: intact items (each a list of rows) and the damaged records."""

    path: Path
    items: list[list[dict[str, Any]]] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    legacy: bool = False
    #: Rows of a legacy journal's last item, left out (a cut may have reached it).
    legacy_dropped: int = 0
    #: Byte length of the intact prefix (everything before the torn tail).
    good_bytes: int = 0

    @property
    def torn(self) -> list[Damage]:
        return [d for d in self.damage if d.tail]

    @property
    def corrupt(self) -> list[Damage]:
        return [d for d in self.damage if not d.tail]

    @property
    def rows(self) -> int:
        return sum(len(i) for i in self.items)

    def raise_if_corrupt(self) -> None:
        bad = self.corrupt
        if bad:
            first = bad[0]
            run_dir = self.path.parents[2] if len(self.path.parts) >= 3 else self.path.parent
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise JournalCorruptError(
                self.path, f"damaged journal record at line {first.line}, byte {first.offset}{more}, "
                "before intact ones (not a crash: the file was changed on disk)",
                f"run `fabrika fsck {run_dir} --repair` to drop the damaged item(s) (the next run redoes them), "
                "then rerun")


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of each line, the last one possibly without its newline."""
    offset = 0
    with open(path, "rb") as fh:
        for line in fh:
            yield offset, line
            offset += len(line)


def _scan_legacy(scan: JournalScan, lines: list[tuple[int, bytes]]) -> JournalScan:
    rows: list[dict[str, Any]] = []
    parsed: list[tuple[int, int, dict[str, Any] | None]] = []
    for n, (offset, line) in enumerate(lines, 1):
        row: Any = None
        if line.endswith(b"\n"):
            try:
                row = json.loads(line.decode("utf-8"))
            except ValueError:
                row = None
        parsed.append((n, offset, row if isinstance(row, dict) and row.get("id") else None))
    last_good = max((i for i, (_, _, r) in enumerate(parsed) if r is not None), default=-1)
    for i, (n, offset, row) in enumerate(parsed):
        if row is None:
            scan.damage.append(Damage(n, offset, tail=i > last_good))
        else:
            rows.append(row)
    items = list(_group_items(rows))
    if items:  # the last item may have been cut: it is redone, not trusted
        scan.legacy_dropped = len(items[-1])
        items = items[:-1]
    scan.items = items
    return scan


def scan(path: Path) -> JournalScan:
    """Read a journal (see the module docs); a missing file is an empty scan. Never raises for
    damage — :meth:`JournalScan.raise_if_corrupt` does that — only for an unreadable file."""
    result = JournalScan(path)
    if not path.is_file():
        return result
    try:
        lines = list(_lines(path))
    except OSError as exc:
        raise StorageError.from_os(exc, path, "cannot read") from exc
    if lines and lines[0][1][:1] == b"{" and not any(line.startswith(MAGIC) for _, line in lines):
        result.legacy = True
        return _scan_legacy(result, lines)
    decoded = [(n, offset, line, decode_record(line)) for n, (offset, line) in enumerate(lines, 1)]
    last_good = max((i for i, (*_, rows) in enumerate(decoded) if rows is not None), default=-1)
    for i, (n, offset, line, rows) in enumerate(decoded):
        if rows is None:
            result.damage.append(Damage(n, offset, tail=i > last_good))
        else:
            result.items.append(rows)
        if i <= last_good:
            result.good_bytes = offset + len(line)
    return result


def partition_journal(index: int) -> str:
    """The journal file name of LLM worker ``index`` (each worker process appends only to its own)."""
    return PARTITION_JOURNAL.format(index=index)


def journal_names(stage_dir: Path) -> list[str]:
    """The journals a stage directory holds: the stage's own and those of its LLM workers, sorted."""
    if not stage_dir.is_dir():
        return []
    return sorted(p.name for p in stage_dir.iterdir()
                  if p.is_file() and (p.name == JOURNAL or re.fullmatch(r"journal-w\d+\.jsonl", p.name)))


def read_items(stage_dir: Path, name: str = JOURNAL) -> JournalScan:
    """The intact items of a stage's journal ``name``; a damaged record before the tail raises
    :class:`~fabrika.errors.JournalCorruptError` (loud: the data changed on disk)."""
    result = scan(stage_dir / name)
    result.raise_if_corrupt()
    return result


def read_rows(stage_dir: Path) -> list[dict[str, Any]]:
    """Rows of the intact items of a stage's journal (see :func:`read_items`)."""
    return [r for item in read_items(stage_dir).items for r in item]


def count_rows(stage_dir: Path) -> int:
    """Rows of the intact items a journal holds (for ``fabrika status`` on a live or killed run).
    Damage is not raised here: ``status`` reports what is there, ``run`` and ``fsck`` judge it.
    The journals of LLM workers (:func:`partition_journal`) count too."""
    return sum(scan(stage_dir / name).rows for name in journal_names(stage_dir))


class StageJournal:
    """Appends finished items, one checksummed record each; :meth:`maybe_sync` fsyncs at most
    every ``sync_s`` seconds.

    The file (and the stage directory) is created on the first append, so a stage
    that finished nothing leaves nothing behind. Each record goes out in one ``os.write``
    loop (no user-space buffer), so what a kill leaves is whole records and at most one cut
    one at the end. A failed write cuts the file back to its last whole record and raises
    :class:`~fabrika.errors.StorageError`; the journal is closed then (a later :meth:`append`
    raises the same error; :meth:`rewrite` starts it afresh).
    """

    def __init__(self, stage_dir: Path, sync_s: float = 1.0, name: str = JOURNAL) -> None:
        self.dir = stage_dir
        self.path = stage_dir / name
        self.sync_s = sync_s
        self._fd: int | None = None
        self._size = 0
        self._broken: StorageError | None = None
        self._dirty = False
        self._last_sync = time.monotonic()

    def _open(self) -> int:
        if self._fd is None:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._size = os.fstat(self._fd).st_size
            except OSError as exc:
                raise StorageError.from_os(exc, self.path) from exc
        return self._fd

    def _fail(self, exc: OSError) -> StorageError:
        """Cut back to the last whole record, close, and say what happened in one line."""
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
        self._dirty = False
        self._broken = StorageError.from_os(exc, self.path)
        return self._broken

    def append(self, rows: Iterable[dict[str, Any]], *, flat: bool = False) -> None:
        """Commit one finished item's rows as one record: all of them or, after a crash, none (``flat``: rows
        :func:`~fabrika.store.shards.flatten_row` made)."""
        if self._broken is not None:  # nothing more goes in after a failed write (until a rewrite)
            raise self._broken
        rows = list(rows)
        if not rows:
            return
        data = encode_item(rows, flat=flat)
        fd = self._open()
        view = memoryview(data)
        try:
            while view:
                view = view[_write(fd, view):]
        except OSError as exc:
            raise self._fail(exc) from exc
        self._size += len(data)
        self._dirty = True

    def maybe_sync(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._dirty and now - self._last_sync >= self.sync_s:
            self.sync()

    def sync(self) -> None:
        if self._fd is not None and self._dirty:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise self._fail(exc) from exc
        self._dirty = False
        self._last_sync = time.monotonic()

    def rewrite(self, rows: Iterable[dict[str, Any]], *, flat: bool = False) -> None:
        """Replace the journal with ``rows`` (the items not yet in a shard, each item's rows
        consecutive; ``flat``: :func:`~fabrika.store.shards.flatten_row`'s), atomically."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        data = b"".join(encode_item(item, flat=flat) for item in _group_items(rows))
        if data:
            shards.atomic_write_bytes(self.path, data)
        else:
            self.path.unlink(missing_ok=True)
        self._broken = None
        self._dirty = False
        self._last_sync = time.monotonic()

    def close(self, remove: bool) -> None:
        if self._fd is not None:
            try:
                if self._dirty:
                    self.sync()
            finally:
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
        if remove:
            self.path.unlink(missing_ok=True)


def write_items(path: Path, items: Iterable[list[dict[str, Any]]]) -> None:
    """Write ``items`` as a fresh journal at ``path``, atomically (``fabrika fsck --repair``)."""
    data = b"".join(encode_item(item) for item in items if item)
    if data:
        shards.atomic_write_bytes(path, data)
    else:
        path.unlink(missing_ok=True)
