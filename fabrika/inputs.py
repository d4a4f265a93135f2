"""One reader for the user's input files: JSON lines and parquet, streamed.

Seeds, prompt files, query pools, benchmark files, corpora and calibration pairs
all come in as records; every module reads them here so that a missing file, a
broken line or a missing column gives the same :class:`InputError`, naming the
path, the line (or parquet row) and what was expected. Checks of the record's own
fields stay with the caller, which knows what they mean; :func:`where` words the
location for its messages the same way.

Named ``inputs`` rather than ``io`` so that it can never shadow the standard
library's ``io``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from fabrika.errors import InputError

DATA_DIR = Path(__file__).resolve().parent / "data"
PACKAGE_PREFIX = "package://"
PARQUET_BATCH = 1024


def resolve_data_path(path: str | Path, base: Path | Callable[[str], Path] | None = None) -> Path:
    """``package://x/y`` → ``fabrika/data/x/y``; another relative path against ``base``.

    ``base`` is a directory (the config file's) or a resolver such as
    ``PipelineConfig.resolve_path``; ``None`` leaves the path as it is.
    """
    text = str(path)
    if text.startswith(PACKAGE_PREFIX):
        return DATA_DIR.joinpath(*text[len(PACKAGE_PREFIX):].split("/"))
    if callable(base):
        return Path(base(text))
    p = Path(text)
    if base is not None and not p.is_absolute():
        p = Path(base) / p
    return p


def where(path: Path, n: int) -> str:
    """The location of record ``n`` as :func:`iter_records` numbers it, for error messages."""
    return f"{path}: row {n}" if Path(path).suffix == ".parquet" else f"{path}:{n}"


def iter_records(path: str | Path, *, what: str, hint: str = "",
                 columns: Sequence[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(n, record)`` from a ``.parquet`` file or a JSON-lines file (any other ending).

    ``n`` is the 1-based line number (blank lines are skipped but counted) or the
    1-based parquet row. ``what`` names the file in messages ("seed file");
    ``hint`` says how to fix it ("fix `benchmarks[].path`"). ``columns`` are
    required parquet columns (the only ones read); JSON lines, whose keys vary by
    line, keep every key and the caller checks its fields, worded with :func:`where`.
    """
    path = Path(path)
    fix = f"; {hint}" if hint else ""
    if not path.is_file():
        raise InputError(f"{path}: {what} not found; give a .jsonl or .parquet file{fix}")
    if path.suffix == ".parquet":
        yield from _parquet_records(path, what, fix, columns)
        return
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(_lines(fh, path, what), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: invalid JSON ({exc.msg}); a {what} holds one JSON object "
                                 "per line") from exc
            if not isinstance(rec, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            yield lineno, rec


def _lines(fh: Any, path: Path, what: str) -> Iterator[str]:
    """The file's lines; bytes that are not UTF-8 (a binary file) are an :class:`InputError`, not a traceback."""
    lineno = 0
    try:
        for lineno, line in enumerate(fh, start=1):  # noqa: B007 - read after the loop for the message
            yield line
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}:{lineno + 1}: not UTF-8 text ({exc.reason} at byte {exc.start}); a {what} is "
                         "JSON lines (UTF-8) or a .parquet file") from exc


def _parquet_records(path: Path, what: str, fix: str,
                     columns: Sequence[str] | None) -> Iterator[tuple[int, dict[str, Any]]]:
    import polars as pl

    try:
        names = list(pl.read_parquet_schema(path))
    except Exception as exc:  # polars raises several kinds for a non-parquet file
        raise InputError(f"{path}: not a readable parquet {what} ({exc}){fix}") from exc
    if columns is not None:
        missing = [c for c in columns if c not in names]
        if missing:
            raise InputError(f"{path}: no column {missing[0]!r} (columns: {names}){fix}")
    frame = pl.scan_parquet(path)
    if columns is not None:
        frame = frame.select(list(dict.fromkeys(columns)))
    n = 0
    for batch in frame.collect_batches(chunk_size=PARQUET_BATCH):
        for rec in batch.iter_rows(named=True):
            n += 1
            yield n, rec
