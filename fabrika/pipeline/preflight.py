"""Input preflight: every file a stage names is opened and its head parsed before the first LLM call.

A stage declares its input files as data (``Stage.input_files``, a tuple of
:class:`InputFile`): where the path sits in its config (``corpus[].path``,
``personas.*``, ``seed_files[]``), what the file is, and what each record must
hold (string fields, fields named by another config key such as ``text_field``,
or a pydantic model). :func:`preflight` resolves every such path and reads the
first :data:`HEAD_RECORDS` records: a missing file, an empty one, a binary one,
a line that is not a JSON object, or a record without the field the stage reads
is ONE line naming the file, the line and the fix. ``fabrika validate`` and
``fabrika run`` (which validates first) report them with exit 2, so an empty corpus
no longer gives an empty dataset with exit 0 and a binary one no longer a traceback.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

from pydantic import BaseModel, ValidationError

from fabrika.errors import InputError
from fabrika.inputs import iter_records, resolve_data_path, where

#: Records read per file (the rest is read by the stage itself; a bad line there is its InputError).
HEAD_RECORDS = 20
#: Bytes sniffed for a NUL byte / invalid UTF-8 (a binary file).
SNIFF_BYTES = 8192
_PART = re.compile(r"(\w+)(\[\]|\.\*)?")


@dataclass(frozen=True)
class InputFile:
    """One input file a stage config names.

    Attributes:
        key: where the path sits in the stage config: ``query_pool``, ``seed_files[]`` (every item of a
            list), ``corpus[].path`` (a field of every item), ``personas.*`` (every value of a mapping).
        what: the file in messages ("topic corpus").
        fields: string fields every record must hold, non-empty.
        field_keys: config keys, next to the path's own item, whose VALUE names a required string field
            (``text_field`` of a corpus entry).
        model: every record validates as this pydantic model.
        format: ``records`` (JSON lines or parquet, read by :func:`fabrika.inputs.iter_records`),
            ``document`` (one JSON/YAML document: only existence, emptiness and binary are checked here),
            ``directory`` (a saved dataset or model directory: must exist).
        default: the path used when the key is ``None`` (a shipped file).
        fix: how to fix a bad file, appended to every message.
    """

    key: str
    what: str
    fields: tuple[str, ...] = ()
    field_keys: tuple[str, ...] = ()
    model: type[BaseModel] | None = None
    format: Literal["records", "document", "directory", "any"] = "records"
    default: str | None = None
    fix: str = ""


def _walk(value: Any, parts: list[tuple[str, str]], key: str, owner: Any) -> Iterator[tuple[str, Any, Any]]:
    """``(key path, value, owner)`` for every value ``parts`` reach; ``owner`` holds sibling keys."""
    if not parts:
        yield key, value, owner
        return
    (name, suffix), rest = parts[0], parts[1:]
    child = value.get(name) if isinstance(value, dict) else getattr(value, name, None)
    path = f"{key}.{name}" if key else name
    if child is None:
        yield path, None, value
        return
    if suffix == "[]":
        for i, item in enumerate(child or []):
            yield from _walk(item, rest, f"{path}[{i}]", item)
    elif suffix == ".*":
        for k, item in (child.items() if isinstance(child, dict) else []):
            yield from _walk(item, rest, f"{path}.{k}", value)
    else:
        yield from _walk(child, rest, path, value)


def locate(config: Any, spec: InputFile) -> Iterator[tuple[str, Any, Any]]:
    """``(key path, raw path or None, owner)`` of every file ``spec`` names in a stage config."""
    parts = [(m.group(1), m.group(2) or "") for m in _PART.finditer(spec.key)]
    yield from _walk(config, parts, "", config)


def _sniff(path: Path) -> str | None:
    """Why ``path`` cannot be a text input (empty, binary), or None."""
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
    if not head.strip():
        return "is empty"
    if b"\x00" in head:
        return "is binary (NUL bytes), not text"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # a multi-byte character cut at the sniff boundary is fine
            return f"is not UTF-8 text (byte {exc.start + 1})"
    return None


def _field_value(owner: Any, key: str) -> Any:
    return owner.get(key) if isinstance(owner, dict) else getattr(owner, key, None)


def check_file(path: Path, spec: InputFile, owner: Any = None) -> str | None:
    """The first problem of one input file as a message naming file, line and fix, or None."""
    fix = f"; {spec.fix}" if spec.fix else ""
    if spec.format == "directory":
        return None if path.exists() else f"{path}: {spec.what} not found{fix}"
    if not path.exists():
        return f"{path}: {spec.what} not found{fix}"
    if path.is_dir():
        return None if spec.format == "any" else f"{path}: {spec.what} is a directory, expected a file{fix}"
    if path.suffix != ".parquet":
        why = _sniff(path)
        if why is not None:
            return f"{path}: {spec.what} {why}{fix}"
    if spec.format != "records":
        return None
    needed = list(spec.fields) + [str(v) for k in spec.field_keys if (v := _field_value(owner, k))]
    seen = 0
    try:
        for n, rec in iter_records(path, what=spec.what, hint=spec.fix):
            seen += 1
            for name in needed:
                value = rec.get(name)
                if not isinstance(value, str) or not value.strip():
                    keys = ", ".join(sorted(map(str, rec))[:8]) or "none"
                    return (f"{where(path, n)}: {spec.what} record has no non-empty string field {name!r} "
                            f"(its keys: {keys}){fix}")
            if spec.model is not None:
                try:
                    spec.model.model_validate(rec)
                except ValidationError as exc:
                    first = exc.errors()[0]
                    loc = ".".join(str(p) for p in first["loc"]) or "(record)"
                    return f"{where(path, n)}: {spec.what} record is not a {spec.model.__name__}: {loc}: {first['msg']}{fix}"
            if seen >= HEAD_RECORDS:
                break
    except InputError as exc:
        return f"{exc}{fix}" if spec.fix and spec.fix not in str(exc) else str(exc)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:  # past the sniffed head
        return f"{path}: {spec.what} is not UTF-8 JSON lines ({exc}){fix}"
    if seen == 0:
        return f"{path}: {spec.what} has no records{fix}"
    return None


def resolved_files(stage: Any, specs: Sequence[InputFile], pipeline: Any
                   ) -> Iterator[tuple[str, str, Path, InputFile, Any]]:
    """``(key path, value as configured, resolved path, spec, owner)`` of every input file a configured stage
    names: the config value, or the spec's default where the key is unset (preflight and the fingerprint)."""
    resolve = getattr(pipeline, "resolve_path", None)
    for spec in specs:
        for key, raw, owner in locate(stage, spec):
            value = raw if raw is not None else spec.default
            if value is not None:
                yield key, str(value), resolve_data_path(str(value), resolve), spec, owner


def preflight(stage: Any, specs: Sequence[InputFile], pipeline: Any) -> list[tuple[str, str]]:
    """``(key path, message)`` per bad input file of one configured stage (its class's ``input_files``)."""
    problems: list[tuple[str, str]] = []
    for key, _value, path, spec, owner in resolved_files(stage, specs, pipeline):
        problem = check_file(path, spec, owner)
        if problem is not None:
            problems.append((key, problem))
    return problems


__all__ = ["HEAD_RECORDS", "InputFile", "check_file", "locate", "preflight", "resolved_files"]
