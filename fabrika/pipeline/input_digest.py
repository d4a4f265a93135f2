"""Digests of the contents of a stage's declared input files, for its fingerprint (DESIGN contract 9).

A stage declares the files it reads as data (``Stage.input_files``, :class:`~fabrika.pipeline.preflight.InputFile`);
:func:`input_file_digests` resolves every one of them in a stage config (the config value or the
class default, as :func:`~fabrika.pipeline.preflight.preflight` does) and digests what it finds:

* a file: blake2b of its bytes, cached per process by ``(path, size, mtime_ns)``, so a big corpus is
  read once per process however many stages or fingerprints name it (``bench/input_digest.py``);
* a directory (a model, a tokenizer, a saved dataset): blake2b over the sorted relative paths and
  sizes of its files, the *content* of the files up to :data:`SMALL_FILE_BYTES` (config, tokenizer
  and template JSON) and, for bigger ones (weights), their size and ``mtime_ns`` only — an edit in
  place that keeps the size and the mtime of a weight file is not seen. Entries whose name starts
  with a dot (``.git``, ``.cache``) are skipped;
* nothing there: ``"missing"`` (preflight reports the file with exit 2; fingerprinting never fails).

The path is the config's own value (a shipped default as ``package://…``), so moving a run and its
config elsewhere does not change a fingerprint; a touched file with the same bytes does not either.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Sequence

from fabrika.inputs import DATA_DIR, PACKAGE_PREFIX
from fabrika.pipeline.preflight import InputFile, resolved_files

#: Files of a directory input up to this size are hashed by content; bigger ones by size and mtime_ns.
SMALL_FILE_BYTES = 32 << 20
#: Bytes read per step while hashing a file.
CHUNK_BYTES = 1 << 20
MISSING = "missing"
UNREADABLE = "unreadable"

_FILES: dict[tuple[str, int, int], str] = {}


def _hash_file(path: Path, size: int, mtime_ns: int) -> str:
    key = (str(path), size, mtime_ns)
    cached = _FILES.get(key)
    if cached is None:
        h = hashlib.blake2b(digest_size=16)
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK_BYTES):
                h.update(chunk)
        cached = _FILES[key] = h.hexdigest()
    return cached


def file_digest(path: Path) -> str:
    """blake2b of a file's bytes (cached by path, size and mtime_ns), or ``missing`` / ``unreadable``."""
    try:
        st = path.stat()
        return _hash_file(path.resolve(), st.st_size, st.st_mtime_ns)
    except FileNotFoundError:
        return MISSING
    except OSError:
        return UNREADABLE


def directory_digest(path: Path) -> str:
    """Digest of a directory's files: relative paths, sizes, small files' content, big files' mtime_ns."""
    h = hashlib.blake2b(digest_size=16)
    root = path.resolve()
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            full = Path(base) / name
            rel = full.relative_to(root).as_posix()
            try:
                st = full.stat()
                small = st.st_size <= SMALL_FILE_BYTES
                what = _hash_file(full, st.st_size, st.st_mtime_ns) if small else f"mtime:{st.st_mtime_ns}"
                h.update(f"{rel}\0{st.st_size}\0{what}\n".encode("utf-8", "surrogateescape"))
            except OSError:
                h.update(f"{rel}\0{UNREADABLE}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def path_digest(path: Path) -> str:
    """:func:`directory_digest` of a directory, :func:`file_digest` of anything else."""
    return directory_digest(path) if path.is_dir() else file_digest(path)


def _shown(value: Any) -> str:
    """The path as the config gives it; a shipped file (a class default) as ``package://…``."""
    text = str(value)
    try:
        rel = Path(text).resolve().relative_to(DATA_DIR.resolve())
    except (ValueError, OSError):
        return text
    return text if text.startswith(PACKAGE_PREFIX) or not Path(text).is_absolute() else PACKAGE_PREFIX + rel.as_posix()


def input_file_digests(stage: Any, specs: Sequence[InputFile], pipeline: Any) -> dict[str, dict[str, str]]:
    """``{key path: {"path": as configured, "digest": …}}`` of every input file a configured stage names."""
    return {key: {"path": _shown(value), "digest": path_digest(path)}
            for key, value, path, _spec, _owner in resolved_files(stage, specs, pipeline)}


def clear_cache() -> None:
    """Forget the per-process file digests (tests, benches)."""
    _FILES.clear()


__all__ = ["SMALL_FILE_BYTES", "clear_cache", "directory_digest", "file_digest", "input_file_digests", "path_digest"]
