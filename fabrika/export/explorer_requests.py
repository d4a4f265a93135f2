"""The run explorer's view of each row's LLM requests: the sidecar entries, excerpts and full bodies.

A row's own item has its requests in its stage's request-log sidecar (:mod:`fabrika.store.requests`);
the rows it was made from (``input_id`` → the upstream row with that id, along the run's layout) have
theirs in their stages' sidecars. :class:`RequestView` reads both, in batches per shard, and joins
the bodies: the request as sent from ``requests.sqlite``, the answer from the run's LLM cache (the
same key; read-only) or, for a run without a cache, from the request log itself.

Each step of a row's chain is ``{"stage", "row", "item", "requests": [entry…]}`` (``shared: true`` and item
``""``: a global stage's requests made for no one row, shown on each of its rows); an entry is the
sidecar's (key, tag, model, backend, cached, attempts, errors, tokens) plus ``sent`` (the last
message sent, cut) and ``answer`` (the answer, cut); :meth:`RequestView.full` gives one request whole.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from fabrika.store.requests import BODIES_FILE, RequestBodies, read_item_requests

if TYPE_CHECKING:
    import polars as pl

#: Characters of the last message sent and of the answer shown in a request's excerpt.
EXCERPT_CHARS = 400
#: Steps followed up a row's lineage (the rows it was made from, and theirs).
MAX_DEPTH = 8


def _cut(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + f"… [{len(text)} chars]"


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False) if content is not None else ""
    calls = message.get("tool_calls")
    if calls:
        content += ("\n" if content else "") + "tool_calls: " + json.dumps(calls, ensure_ascii=False, default=str)
    return content


def _answer_text(answer: Mapping[str, Any] | None) -> str | None:
    if not answer:
        return None
    parts = []
    for content, calls, finish, _reasoning in answer.get("c", []):
        text = content or ""
        if calls:
            text += ("\n" if text else "") + "tool_calls: " + json.dumps(calls, ensure_ascii=False, default=str)
        if finish == "length":
            text += " [truncated: finish_reason=length]"
        parts.append(text)
    return "\n---\n".join(parts)


class RequestView:
    """Read-only access to a run's request log and answers (see module docs)."""

    def __init__(self, run_dir: Path, manifest: Mapping[str, Any]) -> None:
        self.run_dir = Path(run_dir)
        cache = ((manifest.get("config") or {}).get("llm") or {}).get("cache") or {}
        path = cache.get("path")
        self.cache_path: Path | None = None
        if cache.get("enabled", True):
            self.cache_path = Path(path) if path else self.run_dir / "cache.sqlite"
        self._bodies: RequestBodies | None = None
        self._cache: sqlite3.Connection | None = None

    # -- stores ---------------------------------------------------------------------
    def _log(self) -> RequestBodies | None:
        if self._bodies is None and (self.run_dir / BODIES_FILE).is_file():
            self._bodies = RequestBodies(self.run_dir / BODIES_FILE, readonly=True)
        return self._bodies

    def _answers(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """Cached answers by key (``encode_response``'s JSON), read-only."""
        if self.cache_path is None or not self.cache_path.is_file() or not keys:
            return {}
        if self._cache is None:
            self._cache = sqlite3.connect(f"file:{self.cache_path}?mode=ro", uri=True, check_same_thread=False)
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            try:
                rows = self._cache.execute(f"SELECT key, value FROM responses WHERE key IN ({','.join('?' * len(chunk))})",
                                           chunk).fetchall()
            except sqlite3.Error:
                return out
            out.update((k, json.loads(v)) for k, v in rows)
        return out

    def _joined(self, keys: Iterable[str]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        keys = sorted(set(keys))
        log = self._log()
        bodies = log.bodies(keys) if log is not None else {}
        answers = self._answers(keys)
        for key, body in bodies.items():
            if "answer" in body and key not in answers:
                answers[key] = json.loads(body["answer"])
        return bodies, answers

    # -- entries --------------------------------------------------------------------
    @staticmethod
    def in_call_order(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Entries as the item made its calls (the sidecar keeps them sorted by key)."""
        return sorted(entries, key=lambda e: (e.get("call", 0), e.get("i", 0), e["key"]))

    def excerpts(self, entries: list[dict[str, Any]], keep_order: bool = False) -> list[dict[str, Any]]:
        """``entries`` (in call order unless ``keep_order``), each with ``sent`` and ``answer`` excerpts
        (``recorded``: the request's body is in the log)."""
        bodies, answers = self._joined(e["key"] for e in entries)
        out = []
        for e in entries if keep_order else self.in_call_order(entries):
            body = bodies.get(e["key"])
            e = dict(e)
            e["recorded"] = body is not None
            if body is not None and body.get("messages"):
                last = body["messages"][-1]
                e["sent"] = f"{last.get('role', '?')}: " + _cut(_message_text(last))
            answer = _answer_text(answers.get(e["key"]))
            if answer is not None:
                e["answer"] = _cut(answer)
            out.append(e)
        return out

    def full(self, key: str) -> dict[str, Any]:
        """One request whole: the body as sent (messages, tools, settings) and the answer, each ``None`` if not
        recorded (a request answered from a cache shared with another run, an older run)."""
        return self.full_many([key])[key]

    def full_many(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """:meth:`full` of many keys, in three queries."""
        keys = sorted(set(keys))
        bodies, answers = self._joined(keys)
        out = {}
        for key in keys:
            answer = answers.get(key)
            body = bodies.get(key)
            if body is not None:
                body.pop("answer", None)
            out[key] = {"key": key, "request": body, "answer": None if answer is None else {
                "choices": [{"content": c[0], "tool_calls": c[1], "finish_reason": c[2], "reasoning": c[3]}
                            for c in answer.get("c", [])],
                "usage": answer.get("u"), "model": answer.get("m"), "backend": answer.get("b")}}
        return out


def sidecar_steps(files: list[Path], wanted: Iterable[tuple[int, str]]) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """Sidecar entries of ``(shard number, item)`` pairs, one read per shard."""
    by_shard: dict[int, set[str]] = {}
    for shard, item in wanted:
        by_shard.setdefault(shard, set()).add(item)
    out: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for shard, items in by_shard.items():
        for item, entries in read_item_requests(files[shard], items).items():
            out[(shard, item)] = entries
    return out


#: Ids :func:`named_ids` takes from one row at most (a long list in a JSON column is not a lineage).
MAX_NAMED = 64


def named_ids(row: Mapping[str, Any]) -> list[str]:
    """The ids a row names besides its item: its string ``*_id`` columns, and the ``id`` values inside its JSON
    columns (objects and lists, three levels deep), first seen first. The explorer keeps those that are rows
    of the stage's inputs: the rows it was made from when its item is not one (an ``fc.plans`` row names its
    tools in its ``plan``)."""
    out: dict[str, None] = {}

    def walk(value: Any, depth: int) -> None:
        if depth > 3 or len(out) >= MAX_NAMED:
            return
        if isinstance(value, dict):
            got = value.get("id")
            if isinstance(got, str) and got:
                out.setdefault(got)
            for v in value.values():
                if isinstance(v, (dict, list)):
                    walk(v, depth + 1)
        elif isinstance(value, list):
            for v in value:
                walk(v, depth + 1)

    for name, value in row.items():
        if not isinstance(value, str) or not value or name in ("id", "input_id"):
            continue
        if name.endswith("_id"):
            out.setdefault(value)
        elif value[0] in "{[":
            try:
                walk(json.loads(value), 0)
            except ValueError:
                continue
    own = row.get("id")
    return [i for i in out if i != own][:MAX_NAMED]


def locate(frame: "pl.DataFrame", ids: list[str]) -> dict[str, tuple[int, int]]:
    """``id -> (_shard, _off)`` in a stage's index for the ``ids`` it holds (first occurrence)."""
    import polars as pl

    found = frame.filter(pl.col("id").is_in(ids)).select("id", "_shard", "_off").unique("id", keep="first")
    return {i: (int(s), int(o)) for i, s, o in found.iter_rows()}


__all__ = ["EXCERPT_CHARS", "MAX_DEPTH", "MAX_NAMED", "RequestView", "locate", "named_ids", "sidecar_steps"]
