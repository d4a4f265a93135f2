"""Atomic parquet shards and their lazy reading (DESIGN contracts 5 and 6).

A stage's output is a directory of ``part-<seq>-<hash>.parquet`` shards. A shard
is written under a hidden temporary name in the same directory, fsynced, then
``os.replace``-d into place, so a reader never sees half a file: names that do
not match :data:`SHARD_PATTERN` (temporary files of a crashed writer) are
ignored and cleaned by :func:`clean_temp`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import polars as pl
import pyarrow.parquet as pq

from fabrika.errors import StoreError
from fabrika.schemas.ids import stable_id

SHARD_PATTERN = re.compile(r"^part-(\d{6})-([0-9a-f]{8})\.parquet$")
TEMP_PREFIX = ".tmp-"
#: Columns every stage row has; typed up front so an all-null shard still reads as text.
BASE_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.String(),
    "input_id": pl.String(),
    "status": pl.String(),
    "reason": pl.String(),
    "llm_backend": pl.String(),
}


def fsync_dir(path: Path) -> None:
    """Persist a rename: fsync the directory entry (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_file(path: Path, suffix: str = "") -> Iterator[BinaryIO]:
    """A binary handle on a temporary sibling of ``path``; on success it is fsynced and
    ``os.replace``-d into place (and the directory fsynced), on failure it is deleted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary sibling, fsync and ``os.replace``."""
    with atomic_file(path) as fh:
        fh.write(data)


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str).encode("utf-8"))


def _flatten_value(value: Any) -> Any:
    """Nested values become JSON strings (the ``fabrika.schemas.rows`` convention)."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return value


def flatten_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with nested values as JSON text, as a shard stores it."""
    return {k: _flatten_value(v) for k, v in row.items()}


def rows_to_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Build a shard frame: base columns typed as text, other columns inferred over all rows."""
    if not rows:
        raise StoreError("refusing to write an empty shard")
    columns: dict[str, list[Any]] = {}
    for i, row in enumerate(rows):
        for key in row:
            if key not in columns:
                columns[key] = [None] * i
        for key, col in columns.items():
            col.append(_flatten_value(row.get(key)))
    series = []
    for key, values in columns.items():
        dtype = BASE_SCHEMA.get(key)
        try:
            series.append(pl.Series(key, values, dtype=dtype, strict=dtype is None))
        except (TypeError, pl.exceptions.PolarsError) as exc:
            kinds = sorted({type(v).__name__ for v in values if v is not None})
            raise StoreError(
                f"column {key!r} mixes value types {kinds}; a stage must emit one type per column"
            ) from exc
    return pl.DataFrame(series).sort("id")


def shard_files(directory: Path) -> list[Path]:
    """Committed shards of a directory, in sequence order (temporary files are skipped)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if SHARD_PATTERN.match(p.name))


def next_seq(directory: Path) -> int:
    files = shard_files(directory)  # each name matches SHARD_PATTERN
    last = SHARD_PATTERN.match(files[-1].name) if files else None
    return int(last.group(1)) + 1 if last else 0


def write_shard(directory: Path, rows: list[dict[str, Any]], seq: int | None = None) -> Path:
    """Write ``rows`` (sorted by id) as the next shard of ``directory``, atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    frame = rows_to_frame(rows)
    seq = next_seq(directory) if seq is None else seq
    digest = stable_id(frame["id"].to_list())[:8]
    path = directory / f"part-{seq:06d}-{digest}.parquet"
    with atomic_file(path, suffix=".parquet") as fh:
        frame.write_parquet(fh)
    return path


def clean_temp(directory: Path) -> int:
    """Delete temporary files a crashed writer left behind; returns how many."""
    if not directory.is_dir():
        return 0
    removed = 0
    for p in directory.iterdir():
        if p.name.startswith(TEMP_PREFIX) and p.is_file():
            p.unlink(missing_ok=True)
            removed += 1
    return removed


def canonical_columns(names: Iterable[str]) -> list[str]:
    """Base columns first, the rest sorted: column order must not depend on which shard came first."""
    names = list(dict.fromkeys(names))
    return [c for c in BASE_SCHEMA if c in names] + sorted(c for c in names if c not in BASE_SCHEMA)


def scan_files(files: Iterable[Path]) -> pl.LazyFrame | None:
    """Lazily scan shards whose schemas may differ (a column null in one shard, absent in another).

    Columns come in :func:`canonical_columns` order, so the table is the same
    whatever order items completed in (DESIGN contract 7).
    """
    groups: dict[tuple[tuple[str, str], ...], list[Path]] = {}
    for f in files:
        groups.setdefault(file_schema(f), []).append(f)
    if not groups:
        return None
    # one scan per distinct schema (usually one or a few), not one per shard
    frames = [pl.scan_parquet(group) for group in groups.values()]
    lf = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
    return lf.select(canonical_columns(lf.collect_schema().names()))


_SCHEMAS: dict[tuple[str, int, int], tuple[tuple[str, str], ...]] = {}


def file_schema(path: Path) -> tuple[tuple[str, str], ...]:
    """A shard's schema from its footer; cached, shards are immutable once renamed into place."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    cached = _SCHEMAS.get(key)
    if cached is None:
        cached = tuple((k, str(v)) for k, v in pl.read_parquet_schema(path).items())
        if len(_SCHEMAS) > 100_000:
            _SCHEMAS.clear()
        _SCHEMAS[key] = cached
    return cached


_SIZES: dict[tuple[str, int, int], tuple[int, int]] = {}


def shard_size(path: Path) -> tuple[int, int]:
    """``(rows, uncompressed bytes)`` of a shard from its footer (cached like :func:`file_schema`)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    cached = _SIZES.get(key)
    if cached is None:
        meta = pq.read_metadata(path)
        cached = (meta.num_rows, sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)))
        if len(_SIZES) > 100_000:
            _SIZES.clear()
        _SIZES[key] = cached
    return cached


_RATIOS: dict[tuple[str, int, int], float] = {}


def memory_ratio(path: Path) -> float:
    """In-memory bytes per footer byte of a shard (read once and cached): parquet's
    "uncompressed" size is after dictionary encoding, several times below what the rows
    take in memory when they repeat text (e.g. samples sharing a prompt prefix)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _RATIOS:
        if len(_RATIOS) > 10_000:
            _RATIOS.clear()
        _RATIOS[key] = max(1.0, pl.read_parquet(path).estimated_size() / max(1, shard_size(path)[1]))
    return _RATIOS[key]


def group_files(files: Iterable[Path], max_rows: int, max_bytes: int, ratio: float = 1.0) -> Iterator[list[Path]]:
    """Consecutive shards in groups of at most ``max_rows`` rows and ``max_bytes`` bytes in memory
    (footer size × ``ratio``, see :func:`memory_ratio`) — a group is one read's memory; a shard
    larger than that is a group of its own."""
    group: list[Path] = []
    rows = size = 0
    for f in files:
        r, b = shard_size(f)
        b = int(b * ratio)
        if group and (rows + r > max_rows or size + b > max_bytes):
            yield group
            group, rows, size = [], 0, 0
        group.append(f)
        rows += r
        size += b
    if group:
        yield group


def conform(lf: pl.LazyFrame, schema: pl.Schema, own: Iterable[tuple[str, str]] | None = None) -> pl.LazyFrame:
    """``lf`` with exactly ``schema``'s columns, types and order (absent columns as typed nulls):
    a group of shards then reads like the same rows of the whole table's diagonal scan.
    ``own``: ``lf``'s schema if known (:func:`file_schema`), saving a footer read."""
    have = {c for c, _ in own} if own is not None else set(lf.collect_schema().names())
    return lf.select([pl.col(c).cast(t) if c in have else pl.lit(None, dtype=t).alias(c) for c, t in schema.items()])


def iter_frame_rows(lf: pl.LazyFrame, batch_size: int = 1024) -> Iterator[dict[str, Any]]:
    """Rows of a lazy frame as dicts.

    NOTE: polars ``collect_batches`` runs the whole query ahead of the consumer and
    buffers every batch, so this holds the full result; stage tables are read with
    :meth:`fabrika.store.run.RunStore.iter_frames`, which is bounded.
    """
    for batch in lf.collect_batches(chunk_size=batch_size):
        yield from batch.iter_rows(named=True)
