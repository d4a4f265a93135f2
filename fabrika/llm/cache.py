"""Request-keyed response cache in SQLite (WAL).

The key hashes only what changes the output:

    the backend scope, model, messages, tools, tool_choice, temperature, top_p,
    max_tokens, n, seed, sample_index, response_format, stop, extra_body

The *backend scope* says who answers: ``openai`` or ``vllm`` for real models,
``sim/<seed>/<tag>`` for the ``sim`` stand-in (its answers depend on its seed
and on the responder the tag selects). An answer made by ``sim`` is therefore
never returned to a real backend, nor one backend's answer to another.

Deliberately **excluded** (changing them must not re-ask the model): ``tag``
and ``meta`` for real backends (bookkeeping), ``routing_key`` (which server
answers), timeouts, retry and concurrency
settings, the endpoint URL and the API key (where a model is served does not
change what it says). Bump :data:`CACHE_KEY_VERSION` whenever the key's recipe
changes, so old entries stop matching instead of answering the wrong question.

Only finished answers are stored: no errors, and only choices whose
``finish_reason`` is in :data:`CACHEABLE_FINISH` (``stop``, ``length``,
``tool_calls``); an ``abort`` or an unknown reason is retried by the engine,
never cached. Writes are buffered and flushed with one ``executemany`` per
batch (every ``flush_every`` puts, every ``flush_interval_s`` seconds from the
event loop, and on close), so a crash loses at most the answers of the last
interval — they are re-asked on resume, never corrupted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterable

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from fabrika.errors import StoreError
from fabrika.llm.canonical import canonical_bytes
from fabrika.llm.types import ChatRequest, ChatResponse, Choice, Usage
from fabrika.textutil.jsontext import dumps_compact

CACHE_KEY_VERSION = 2
#: Finish reasons of answers that are complete enough to keep (``length``: truncated, kept on purpose).
CACHEABLE_FINISH = frozenset({"stop", "length", "tool_calls"})


def _fields(r: ChatRequest, default_model: str | None) -> tuple[object, ...]:
    return (r.model or default_model, r.messages, r.tools, r.tool_choice, r.temperature, r.top_p, r.max_tokens,
            r.n, r.seed, r.sample_index, r.response_format, r.stop, r.extra_body)


def request_key(request: ChatRequest, default_model: str | None = None, *, scope: str = "") -> str:
    """sha256 hex of ``scope`` (the backend that answers, see module docstring) and the output-relevant
    fields of ``request``, as the stdlib's ``sort_keys`` compact JSON (:mod:`fabrika.llm.canonical`).

    ``default_model`` stands in when the request names no model, so the key
    names the model that actually answers.
    """
    payload = (CACHE_KEY_VERSION, scope, *_fields(request, default_model))
    return hashlib.sha256(canonical_bytes(payload)).hexdigest()


def content_key(request: ChatRequest, default_model: str | None = None) -> str:
    """A hash of the request content alone, with a frozen recipe: the ``sim`` backend seeds its answers
    from it, so simulated data does not change when the cache key's recipe does."""
    return hashlib.sha256(canonical_bytes((1, *_fields(request, default_model)))).hexdigest()


def cacheable(response: ChatResponse) -> bool:
    """A successful response whose every choice finished in :data:`CACHEABLE_FINISH`."""
    return (response.error is None and bool(response.choices)
            and all(c.finish_reason in CACHEABLE_FINISH for c in response.choices))


def encode_response(resp: ChatResponse) -> str:
    """Serialise a successful response for the cache (compact JSON): exactly ``json.dumps(..., ensure_ascii=False,
    separators=(",", ":"))``, through orjson where it writes the same text (:func:`fabrika.textutil.jsontext.dumps_compact`)."""
    return dumps_compact(
        {
            "c": [[c.content, list(c.tool_calls), c.finish_reason, c.reasoning] for c in resp.choices],
            "u": [resp.usage.prompt_tokens, resp.usage.completion_tokens],
            "m": resp.model,
            "b": resp.backend,
        },
        default_str=False,
    )


def decode_response(blob: str) -> ChatResponse:
    data = json.loads(blob)
    choices = tuple(Choice(content=c[0], tool_calls=tuple(c[1]), finish_reason=c[2], reasoning=c[3])
                    for c in data["c"])
    return ChatResponse(choices=choices, usage=Usage(*data["u"]), model=data["m"], backend=data["b"],
                        cached=True, attempts=0)



def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def open_shared_db(path: Path, schema: str) -> sqlite3.Connection:
    """A WAL SQLite file that several processes may open at the same moment (``llm_workers``, Ray actors).

    The busy timeout is set at connect, before the journal-mode switch; SQLite still answers ``database is
    locked`` at once where waiting could deadlock (two openers switching a fresh file to WAL, or upgrading a
    read lock to create the tables), so the whole open is retried a few times with a short backoff."""
    for attempt in Retrying(retry=retry_if_exception(_locked), stop=stop_after_attempt(12),
                            wait=wait_exponential(multiplier=0.005, max=0.5), reraise=True):
        with attempt:
            db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=10.0)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(schema)
            except BaseException:
                db.close()
                raise
    return db

class ResponseCache:
    """SQLite-backed cache; one connection, used from the event loop's thread.

    Args:
        path: the database file (parent directories are created).
        flush_every: buffered puts that trigger a batched write.
        flush_interval_s: the longest a put waits in the buffer while a loop runs.
    """

    def __init__(self, path: Path | str, *, flush_every: int = 512, flush_interval_s: float = 1.0) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = open_shared_db(
                self.path, "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL);")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open LLM cache at {self.path}: {exc}; check the path is writable "
                             "or set llm.cache.enabled=false") from exc
        self._lock = threading.Lock()
        self._pending: dict[str, str] = {}
        self.flush_every = flush_every
        self.flush_interval_s = flush_interval_s
        self._timer: asyncio.TimerHandle | None = None
        self.closed = False

    def get(self, key: str) -> ChatResponse | None:
        blob = self._pending.get(key)
        if blob is None:
            row = self._db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            blob = row[0]
        return decode_response(blob)

    def get_many(self, keys: Iterable[str]) -> dict[str, ChatResponse]:
        """Look up many keys with a few ``IN`` queries (one round trip per 500 keys)."""
        found: dict[str, str] = {}
        todo: list[str] = []
        for k in keys:
            blob = self._pending.get(k)
            if blob is not None:
                found[k] = blob
            else:
                todo.append(k)
        for i in range(0, len(todo), 500):
            chunk = todo[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for key, value in self._db.execute(f"SELECT key, value FROM responses WHERE key IN ({marks})", chunk):
                found[key] = value
        return {k: decode_response(v) for k, v in found.items()}

    def put(self, key: str, response: ChatResponse) -> None:
        """Buffer a finished response; errors and unfinished answers are refused (never cached)."""
        if not cacheable(response):
            return
        self._pending[key] = encode_response(response)
        if len(self._pending) >= self.flush_every:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._timer = loop.call_later(self.flush_interval_s, self._timed_flush)

    def _timed_flush(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Write buffered entries in one transaction."""
        if not self._pending:
            return
        with self._lock:
            items = list(self._pending.items())
            try:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", items)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._db.execute("ROLLBACK") if self._db.in_transaction else None
                raise StoreError(f"cannot write LLM cache {self.path}: {exc}") from exc
            for k, _ in items:
                self._pending.pop(k, None)

    def __len__(self) -> int:
        self.flush()
        return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        if self.closed:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        self._db.close()
        self.closed = True

    def stats(self) -> dict[str, Any]:
        return {"path": str(self.path), "pending": len(self._pending)}
