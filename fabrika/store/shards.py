"""Atomic parquet shards and their lazy reading (DESIGN contracts 5 and 6).

A stage's output is a directory of ``part-<seq>-<hash>.parquet`` shards. A shard
is written under a hidden temporary name in the same directory, fsynced, then
``os.replace``-d into place, so a reader never sees half a file: names that do
not match :data:`SHARD_PATTERN` (temporary files of a crashed writer) are
ignored and cleaned by :func:`clean_temp`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator

import polars as pl

from fabrika.errors import ShardCorruptError, StorageError, StoreError
from fabrika.schemas.ids import stable_id
from fabrika.textutil.jsontext import dumps_compact, dumps_sorted_indent2
from fabrika.textutil.sanitize import clean_text

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


_OS_ERROR = re.compile(r"os error (\d+)")


def os_error_of(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind ``exc``: itself, or the one polars/pyarrow name in their message
    (``... No space left on device (os error 28)``); ``None`` when it is not an I/O failure."""
    if isinstance(exc, OSError):
        return exc
    m = _OS_ERROR.search(str(exc))
    if m:
        code = int(m.group(1))
        return OSError(code, os.strerror(code))
    return None


def storage_error(exc: BaseException, path: Path, action: str = "cannot write") -> StorageError | None:
    """``exc`` as a one-line :class:`StorageError` for ``path`` when it is an I/O failure."""
    if isinstance(exc, StorageError):
        return exc
    os_exc = os_error_of(exc)
    return None if os_exc is None else StorageError.from_os(os_exc, path, action)


@contextmanager
def atomic_file(path: Path, suffix: str = "") -> Iterator[BinaryIO]:
    """A binary handle on a temporary sibling of ``path``; on success it is fsynced and
    ``os.replace``-d into place (and the directory fsynced), on failure it is deleted.

    An I/O failure (a full disk, a read-only or unwritable directory) leaves nothing behind
    and is raised as a one-line :class:`~fabrika.errors.StorageError` naming ``path``.
    """
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=suffix, dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                Path(tmp).unlink(missing_ok=True)
            except OSError:
                pass
        wrapped = storage_error(exc, path)
        if wrapped is not None and wrapped is not exc:
            raise wrapped from exc
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary sibling, fsync and ``os.replace``."""
    with atomic_file(path) as fh:
        fh.write(data)


def atomic_write_json(path: Path, value: Any) -> None:
    text = dumps_sorted_indent2(value)  # = json.dumps(..., ensure_ascii=False, indent=2, sort_keys=True, default=str)
    atomic_write_bytes(path, clean_text(text).encode("utf-8"))


def _flatten_value(value: Any) -> Any:
    """Nested values become JSON strings (the ``fabrika.schemas.rows`` convention); all text
    is made storable (:func:`fabrika.textutil.sanitize.clean_text`: no lone surrogates or
    control characters; JSON already escapes control characters inside nested values)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, (dict, list, tuple)):
        return clean_text(dumps_compact(value))
    return value


_KEYS: dict[str, str] = {}


def _clean_key(key: str) -> str:
    """A column name made storable (names repeat on every row: remembered)."""
    got = _KEYS.get(key)
    if got is None:
        if len(_KEYS) > 10_000:
            _KEYS.clear()
        got = _KEYS[key] = clean_text(key)
    return got


def flatten_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with nested values as JSON text and storable text, as a shard stores it; a request log
    (:data:`REQUESTS_KEY`, :data:`SHARED_REQUESTS_KEY`) as the text its sidecar stores (:func:`request_log_text`).
    Flattening a flat row changes nothing."""
    return {_clean_key(k): request_log_text(v) if k in _LOG_KEYS else _flatten_value(v) for k, v in row.items()}


def rows_to_frame(rows: list[dict[str, Any]], *, flat: bool = False) -> pl.DataFrame:
    """Build a shard frame: base columns typed as text, other columns inferred over all rows
    (``flat``: the rows are :func:`flatten_row`'s already)."""
    if not rows:
        raise StoreError("refusing to write an empty shard")
    columns: dict[str, list[Any]] = {}
    for i, raw in enumerate(rows):
        row = raw if flat else flatten_row(raw)
        for key in row:
            if key not in columns:
                columns[key] = [None] * i
        for key, col in columns.items():
            col.append(row.get(key))
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


#: Footer key of a shard's content checksum: ``<polars version>:<blake2b-64 hex>`` (see :func:`content_tag`).
CONTENT_KEY = "fabrika.content"
_CONTENT_SEED = 0x66616272  # "fabr"


def content_digest(frame: pl.DataFrame) -> str | None:
    """A checksum of a frame's rows as polars reads them: blake2b over polars' per-row hashes plus the
    column names and types. polars' hashes are stable within one polars version only, so the tag
    carries the version and a reader of another version skips the check. ``None``: a dtype polars
    cannot hash."""
    try:
        hashes = frame.hash_rows(seed=_CONTENT_SEED).to_numpy().tobytes()
    except (pl.exceptions.PolarsError, TypeError, ValueError):
        return None
    h = hashlib.blake2b(digest_size=8)
    h.update("\x1f".join(f"{name}:{dtype}" for name, dtype in frame.schema.items()).encode("utf-8"))
    h.update(hashes)
    return h.hexdigest()


def content_tag(frame: pl.DataFrame) -> dict[str, str]:
    """The footer metadata :func:`write_shard` stores: the content checksum of ``frame``."""
    digest = content_digest(frame)
    return {} if digest is None else {CONTENT_KEY: f"{pl.__version__}:{digest}"}


#: A key of an item's first row (never a column) that carries the item's LLM request log to the shard
#: writer, through the journal too: :func:`write_shard` moves it into the stage's ``requests/`` sidecar,
#: under the shard's own name, *before* the shard is renamed into place (see :mod:`fabrika.store.requests`).
REQUESTS_KEY = "__fabrika_requests__"
#: Beside it, on a global stage's first row of a shard: the stage's *shared* requests (made for no one row),
#: written to the sidecar under the item :data:`SHARED_ITEM` (no row id is empty).
SHARED_REQUESTS_KEY = "__fabrika_shared_requests__"
SHARED_ITEM = ""
_LOG_KEYS = frozenset({REQUESTS_KEY, SHARED_REQUESTS_KEY})
#: The sidecar directory inside a stage directory.
REQUESTS_DIR = "requests"


def _split_requests(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """``rows`` without :data:`REQUESTS_KEY`, and ``(item id, request log JSON)`` of the items that carried one."""
    side: list[tuple[str, str]] = []
    out = rows
    for i, row in enumerate(rows):
        if REQUESTS_KEY not in row and SHARED_REQUESTS_KEY not in row:
            continue
        if out is rows:
            out = list(rows)
        row = dict(row)
        log = row.pop(REQUESTS_KEY, None)
        shared = row.pop(SHARED_REQUESTS_KEY, None)
        out[i] = row
        for item, entries in ((str(row.get("input_id") or row["id"]), log), (SHARED_ITEM, shared)):
            if entries is not None:
                side.append((item, request_log_text(entries)))
    return out, side


def request_log_text(entries: Any) -> Any:
    """A request log's sidecar text: its entries as compact JSON with sorted keys (text as it is), made
    storable; ``None`` stays ``None``."""
    if entries is None:
        return None
    text = entries if isinstance(entries, str) else json.dumps(
        entries, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return clean_text(text)


def write_shard(directory: Path, rows: list[dict[str, Any]], seq: int | None = None, *, flat: bool = False) -> Path:
    """Write ``rows`` (sorted by id) as the next shard of ``directory``, atomically, with the
    checksum of its content in the footer (:data:`CONTENT_KEY`, checked by :func:`verify_shard`).

    Items whose first row carries :data:`REQUESTS_KEY` get their request log written first, to
    ``requests/<the shard's name>`` (atomically too): a shard is never in place without the log of its
    items, and a log whose shard never got there (a crash in between) is ignored by its readers.
    ``flat``: the rows are :func:`flatten_row`'s already (not flattened again)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows, side = _split_requests(rows)
    frame = rows_to_frame(rows, flat=flat)
    seq = next_seq(directory) if seq is None else seq
    digest = stable_id(frame["id"].to_list())[:8]
    path = directory / f"part-{seq:06d}-{digest}.parquet"
    if side:
        side.sort()
        log = pl.DataFrame({"item": [i for i, _ in side], "requests": [t for _, t in side]},
                           schema={"item": pl.String, "requests": pl.String})
        with atomic_file(directory / REQUESTS_DIR / path.name, suffix=".parquet") as fh:
            log.write_parquet(fh)
    with atomic_file(path, suffix=".parquet") as fh:
        frame.write_parquet(fh, metadata=content_tag(frame) or None)
    return path


def clean_temp(directory: Path) -> int:
    """Delete what a writer killed mid-shard left behind; returns how many files.

    Temporary files in the stage directory and in its request-log sidecar, and sidecar logs whose shard never
    appeared (a kill between the sidecar's rename and the shard's). Called only while no writer of the stage
    runs (before a stage starts, after its Ray workers are done)."""
    if not directory.is_dir():
        return 0
    removed = 0
    for p in directory.iterdir():
        if p.name.startswith(TEMP_PREFIX) and p.is_file():
            p.unlink(missing_ok=True)
            removed += 1
    sidecar = directory / REQUESTS_DIR
    if sidecar.is_dir():
        for p in sidecar.iterdir():
            if p.is_file() and (p.name.startswith(TEMP_PREFIX) or not (directory / p.name).exists()):
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


def repair_hint(path: Path) -> str:
    """What to do about a damaged file of a run: ``fabrika fsck`` for stage data, re-materialising for versions."""
    parts = path.parts
    if len(parts) >= 3 and parts[-3] == "stages":
        run_dir = path.parents[2]
        return (f"run `fabrika fsck {run_dir} --repair` to set it aside (the next run redoes its items), "
                "then rerun")
    if len(parts) >= 4 and parts[-4] == "versions":
        return f"re-materialise it: `fabrika refilter {path.parents[3]} --name {parts[-3]} --overwrite`"
    return "restore it from a backup or delete it and rerun"


def _one_line(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shard_error(path: Path, exc: BaseException) -> StorageError:
    """A shard that failed to read as one line naming it: an I/O failure (permissions, a disk
    error) as itself, anything else (a truncated or garbled file) as :class:`ShardCorruptError`."""
    os_exc = exc if isinstance(exc, OSError) else None
    if os_exc is not None and os_exc.errno not in (None, errno.EINVAL):
        return StorageError.from_os(os_exc, path, "cannot read")
    return ShardCorruptError(path, f"damaged parquet shard ({_one_line(exc)})", repair_hint(path))


_READ_BASE: tuple[type[BaseException], ...] = (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError,
                                               ValueError)


def read_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged parquet file raises (polars, pyarrow, the OS). Polars' decoder may also
    *panic* on garbled pages: ``PanicException`` derives from ``BaseException``, not ``Exception``.
    pyarrow is imported only by the reads that need it (footers), so a reader that never needs it (the first
    page of ``fabrika browse``) does not pay for it; its ``ArrowException`` is included once it is loaded
    (nothing else raises it)."""
    pa = sys.modules.get("pyarrow")
    return _READ_BASE + ((pa.ArrowException,) if pa is not None else ())


def __getattr__(name: str) -> Any:  # ``READ_ERRORS``: the tuple above, with pyarrow's error
    if name == "READ_ERRORS":
        import pyarrow  # noqa: F401 - its error class belongs in the tuple

        return read_errors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_structure(path: Path) -> None:
    """Cheap checks a truncated or overwritten shard fails: the ``PAR1`` magic at both ends and a
    footer length that fits the file. Raises :class:`ShardCorruptError`."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(4)
            if size >= 12:
                fh.seek(size - 8)
                tail = fh.read(8)
            else:
                tail = b""
    except FileNotFoundError:
        raise  # gone, not damaged: a stage being dropped while a follower reads it (pipeline.overlap)
    except OSError as exc:
        raise shard_error(path, exc) from exc
    if size < 12 or head != b"PAR1" or tail[4:] != b"PAR1":
        raise ShardCorruptError(path, f"damaged parquet shard (truncated or overwritten: {size} bytes, "
                                "no parquet magic at both ends)", repair_hint(path))
    footer = int.from_bytes(tail[:4], "little")
    if footer + 12 > size:
        raise ShardCorruptError(path, f"damaged parquet shard (footer of {footer} bytes in a {size}-byte file)",
                                repair_hint(path))


def verify_shard(path: Path, full: bool = True, require_id: bool = True) -> int:
    """Check one shard; returns its row count. ``full`` decodes every page of every column and
    compares the content checksum (:data:`CONTENT_KEY`, when the shard has one written by this
    polars version) — what ``fabrika fsck`` does; otherwise only the structure and the footer are
    read. Raises
    :class:`~fabrika.errors.StorageError` (:class:`ShardCorruptError` for a damaged file)."""
    import pyarrow.parquet as pq

    check_structure(path)
    try:
        meta = pq.read_metadata(path)
        rows = meta.num_rows
        if full:
            frame = pl.read_parquet(path)
            if frame.height != rows:
                raise ValueError(f"footer says {rows} rows, the pages hold {frame.height}")
            if require_id and ("id" not in frame.columns or frame["id"].null_count()):
                raise ValueError("rows without an 'id'")
            tag = (meta.metadata or {}).get(CONTENT_KEY.encode())
            version, _, want = tag.decode("utf-8", "replace").rpartition(":") if tag else ("", "", "")
            if version == pl.__version__ and content_digest(frame) != want:
                raise ValueError("content checksum mismatch: the rows changed on disk")
    except FileNotFoundError:
        raise
    except read_errors() as exc:
        raise shard_error(path, exc) from exc
    return rows


def collect_checked(files: Iterable[Path], collect: Callable[[], Any]) -> Any:
    """``collect()`` (a polars read over ``files``); when it fails, the first of ``files`` that does
    not read in full is named in a one-line :class:`StorageError` instead of polars' traceback."""
    try:
        return collect()
    except read_errors() as exc:
        for f in files:
            try:
                verify_shard(f, full=True)
            except StorageError as bad:
                raise bad from exc
            except FileNotFoundError:
                raise exc from None  # a vanished shard is the caller's race to handle, not damage
        raise


_SCHEMAS: dict[tuple[str, int, int], tuple[tuple[str, str], ...]] = {}


def _stat_key(path: Path) -> tuple[str, int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise shard_error(path, exc) from exc
    return (str(path), st.st_mtime_ns, st.st_size)


def file_schema(path: Path) -> tuple[tuple[str, str], ...]:
    """A shard's schema from its footer; cached, shards are immutable once renamed into place.
    A shard that fails the cheap checks (:func:`check_structure`) or whose footer does not
    parse raises a one-line :class:`~fabrika.errors.StorageError` naming it."""
    key = _stat_key(path)
    cached = _SCHEMAS.get(key)
    if cached is None:
        check_structure(path)
        try:
            cached = tuple((k, str(v)) for k, v in pl.read_parquet_schema(path).items())
        except FileNotFoundError:
            raise
        except read_errors() as exc:
            raise shard_error(path, exc) from exc
        if len(_SCHEMAS) > 100_000:
            _SCHEMAS.clear()
        _SCHEMAS[key] = cached
    return cached


_SIZES: dict[tuple[str, int, int], tuple[int, int]] = {}


def shard_size(path: Path) -> tuple[int, int]:
    """``(rows, uncompressed bytes)`` of a shard from its footer (cached like :func:`file_schema`)."""
    key = _stat_key(path)
    cached = _SIZES.get(key)
    if cached is None:
        import pyarrow.parquet as pq

        check_structure(path)
        try:
            meta = pq.read_metadata(path)
        except FileNotFoundError:
            raise
        except read_errors() as exc:
            raise shard_error(path, exc) from exc
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
    key = _stat_key(path)
    if key not in _RATIOS:
        if len(_RATIOS) > 10_000:
            _RATIOS.clear()
        frame = collect_checked([path], lambda: pl.read_parquet(path))
        _RATIOS[key] = max(1.0, frame.estimated_size() / max(1, shard_size(path)[1]))
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
