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
* a document (``format="document"``: a tools file, an OpenAPI or MCP spec): its bytes, and when it
  holds ``$ref`` s to other local files (``schemas/pet.yaml#/Pet``, followed by the tools importer),
  the bytes of every file those reach, transitively. A document without such refs keeps its plain
  file digest, so adding this did not change a fingerprint;
* nothing there: ``"missing"`` (preflight reports the file with exit 2; fingerprinting never fails).

The path is the config's own value (a shipped default as ``package://…``), so moving a run and its
config elsewhere does not change a fingerprint; a touched file with the same bytes does not either.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import unquote, urljoin, urlparse

import yaml

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


#: A ``$ref`` whose value names another document (not ``#/…`` in the same one); a cheap pre-filter.
_EXTERNAL_REF = re.compile(rb"""["']?\$ref["']?\s*:\s*["']?(?!#)[^\s"'#]""")
_REFS: dict[tuple[str, int, int], tuple[str, ...]] = {}


def _ref_values(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _ref_values(value)
    elif isinstance(node, list):
        for item in node:
            yield from _ref_values(item)


def _parse(text: bytes) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        return None  # not a document the importer reads either: it reports it itself


def _local_refs(path: Path) -> tuple[str, ...]:
    """Absolute paths of the local files ``path``'s external ``$ref`` s name (cached by size and mtime)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    cached = _REFS.get(key)
    if cached is None:
        data = path.read_bytes()
        found: set[str] = set()
        if _EXTERNAL_REF.search(data):
            base = path.as_uri()
            for ref in _ref_values(_parse(data)):
                target = urlparse(urljoin(base, ref.split("#", 1)[0]))
                if ref.split("#", 1)[0] and target.scheme == "file":
                    found.add(os.path.normpath(unquote(target.path)))
        cached = _REFS[key] = tuple(sorted(found))
    return cached


def document_digest(path: Path) -> str:
    """:func:`file_digest` of a document, combined with those of the local files its ``$ref`` s reach."""
    own = file_digest(path)
    if own in (MISSING, UNREADABLE):
        return own
    root = path.resolve()
    seen: dict[str, str] = {}
    todo = [str(root)]
    while todo:
        current = Path(todo.pop())
        try:
            refs = _local_refs(current)
        except OSError:
            continue
        for ref in refs:
            if ref not in seen and ref != str(root):
                seen[ref] = file_digest(Path(ref))
                if seen[ref] not in (MISSING, UNREADABLE):
                    todo.append(ref)
    if not seen:
        return own
    h = hashlib.blake2b(own.encode(), digest_size=16)
    for ref in sorted(seen):  # named relative to the document, so moving the whole tree keeps the digest
        h.update(f"{os.path.relpath(ref, root.parent)}\0{seen[ref]}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def path_digest(path: Path, fmt: str = "any") -> str:
    """:func:`directory_digest` of a directory, :func:`document_digest` of a document, else :func:`file_digest`."""
    if path.is_dir():
        return directory_digest(path)
    return document_digest(path) if fmt == "document" else file_digest(path)


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
    return {key: {"path": _shown(value), "digest": path_digest(path, spec.format)}
            for key, value, path, spec, _owner in resolved_files(stage, specs, pipeline)}


def clear_cache() -> None:
    """Forget the per-process file digests (tests, benches)."""
    _FILES.clear()
    _REFS.clear()


__all__ = ["SMALL_FILE_BYTES", "clear_cache", "directory_digest", "document_digest", "file_digest", "input_file_digests", "path_digest"]
