"""Request logs (JSON lines or parquet): one object per request with ``prompt`` or ``messages`` and optional labels.

Accepted fields: ``id`` (default ``L<line number>``), ``prompt`` (str) or
``messages`` (OpenAI chat messages; system and user contents are joined),
``model``, ``service``, ``task_type`` and ``tags`` (a list of strings, e.g.
from an LLM tagging stage). Unknown fields are kept in ``extra``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from fabrika.errors import InputError
from fabrika.inputs import iter_records

LABEL_FIELDS = ("model", "service", "task_type")


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One logged request."""

    id: str
    text: str
    model: str | None = None
    service: str | None = None
    task_type: str | None = None
    tags: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def label(self, name: str) -> str | None:
        return getattr(self, name)


def prompt_text(row: dict[str, Any]) -> str | None:
    """The text a request's template lives in: ``prompt``, or the system and user message contents."""
    if isinstance(row.get("prompt"), str):
        return row["prompt"]
    messages = row.get("messages")
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except json.JSONDecodeError:
            return None
    if not isinstance(messages, list):
        return None
    parts: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user"):
            continue
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str) and content.strip():
            parts.append(content)
    return "\n\n".join(parts) if parts else None


def record_from_row(row: dict[str, Any], default_id: str, where: str) -> LogRecord:
    text = prompt_text(row)
    if text is None:
        raise InputError(f"{where}: a log row needs a 'prompt' string or 'messages' with system/user content; "
                         f"got keys {sorted(row)[:8]}")
    tags = row.get("tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise InputError(f"{where}: 'tags' must be a list of strings, got {type(tags).__name__}")
    labels = {}
    for name in LABEL_FIELDS:
        v = row.get(name)
        labels[name] = None if v is None else str(v)
    known = {"id", "prompt", "messages", "tags", *LABEL_FIELDS}
    return LogRecord(id=str(row.get("id", default_id)), text=text, tags=tuple(tags) if tags is not None else None,
                     extra={k: v for k, v in row.items() if k not in known}, **labels)


def read_jsonl(path: Path, what: str = "eval input file") -> Iterable[tuple[int, dict[str, Any]]]:
    """(line or parquet row number, object) per record, via :func:`fabrika.inputs.iter_records`
    (JSON lines or ``.parquet``); a bad record is an :class:`InputError` naming it."""
    return iter_records(path, what=what)


def read_logs(path: Path) -> list[LogRecord]:
    """Every request of a JSONL log; ids must be unique."""
    out: list[LogRecord] = []
    seen: set[str] = set()
    for n, row in read_jsonl(path):
        rec = record_from_row(row, f"L{n}", f"{path}:{n}")
        if rec.id in seen:
            raise InputError(f"{path}:{n}: duplicate id {rec.id!r}; ids must be unique (or leave 'id' out)")
        seen.add(rec.id)
        out.append(rec)
    if not out:
        raise InputError(f"{path}: the log is empty")
    return out
