"""Each row's LLM requests: a per-stage sidecar of request keys, and the bodies keyed by request key.

Two parts, so that neither a shard nor the cache changes:

* **the sidecar** — ``stages/<stage>/requests/<shard name>``: one row per item of that shard,
  ``item`` (the input id, what resume keys by) and ``requests`` (JSON: the item's requests sorted by
  key, each with its key, role tag, model, backend, cached or fresh, attempts, the errors of failed
  attempts and the tokens). The runner hands it to the shard writer on the item's first row
  (:data:`fabrika.store.shards.REQUESTS_KEY`), so it travels through the journal with the rows and is
  written by :func:`fabrika.store.shards.write_shard` just before the shard itself: resume, a
  ``kill -9``, ``llm_workers: N`` and Ray workers keep it consistent with the shards by construction.
  A sidecar whose shard is not there (a crash between the two renames) is ignored. Nothing in it is
  read by a dataset, a fingerprint or a hash, and it holds no timestamps.
* **the bodies** — ``requests.sqlite`` in the run directory (:class:`RequestBodies`): per request key
  the request as sent (model and sampling settings after the engine's defaults; messages and tool
  lists stored once per distinct content, so the growing history of a dialogue costs each message
  once) and, only when the run has no response cache, the answer. Answers otherwise stay where they
  already are: the LLM cache, under the same key.

Readers: :func:`read_item_requests` (the sidecar rows of some items of one shard) and
:meth:`RequestBodies.bodies` (bodies and answers by key).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
import threading
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable

import orjson

from fabrika.errors import StoreError
from fabrika.store.shards import REQUESTS_DIR

if TYPE_CHECKING:
    from fabrika.llm.types import ChatRequest, ChatResponse

BODIES_FILE = "requests.sqlite"
#: Request fields stored beside the messages (what the cache key hashes, but ``messages`` and ``tools``).
PARAMS = ("model", "tool_choice", "temperature", "top_p", "max_tokens", "n", "seed", "sample_index", "stop",
          "extra_body", "tag")
_json_dumps = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode
#: dataclasses and datetimes go to ``default=str`` as :mod:`json` sends them
_ORJSON_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
                   | orjson.OPT_PASSTHROUGH_DATETIME)


def _dump_bytes(value: Any) -> bytes:
    """``value`` as compact JSON with sorted keys, UTF-8: the bytes :mod:`json` writes (``ensure_ascii=False``),
    by orjson — several times faster on a dialogue's messages; what orjson refuses (an int past 64 bits, a
    lone surrogate) goes through :mod:`json`."""
    try:
        return orjson.dumps(value, default=str, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return _json_dumps(value).encode("utf-8")


def _dumps(value: Any) -> str:
    return _dump_bytes(value).decode("utf-8")


@functools.cache
def _encode_response() -> Callable[["ChatResponse"], str]:
    """:func:`fabrika.llm.cache.encode_response`, imported on first use (not when the store is), once."""
    from fabrika.llm.cache import encode_response

    return encode_response


def sidecar_of(shard: Path) -> Path:
    """The request-log sidecar of a stage shard (it may not exist: a stage without LLM calls, an older run)."""
    return shard.parent / REQUESTS_DIR / shard.name


def read_item_requests(shard: Path, items: Collection[str]) -> dict[str, list[dict[str, Any]]]:
    """The request logs of ``items`` (input ids) in ``shard``'s sidecar; items without one are absent."""
    import polars as pl

    path = sidecar_of(shard)
    if not items or not path.is_file() or not shard.is_file():
        return {}
    try:
        frame = pl.scan_parquet(path).filter(pl.col("item").is_in(list(items))).collect()
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise StoreError(f"{path}: unreadable request log ({exc}); delete it (the rows stay) or run `fabrika fsck`"
                         ) from exc
    return {item: json.loads(text) for item, text in frame.iter_rows()}


#: Blobs longer than this (bytes of JSON) are stored zlib-compressed; JSON text never starts with zlib's 0x78.
ZLIB_FROM = 512


def _unblob(data: bytes) -> Any:
    return json.loads((zlib.decompress(data) if data[:1] == b"x" else data).decode("utf-8"))


class RequestBodies:
    """The run's request bodies by request key (SQLite, WAL; several processes may write at once).

    Writes are buffered and go out in one transaction per :meth:`flush`; the runner flushes before it
    journals finished items, so an item in the journal or a shard has its bodies on disk. One instance
    per process and file (:meth:`for_run`)."""

    _open: dict[Path, "RequestBodies"] = {}
    _open_lock = threading.Lock()

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        try:
            if readonly:
                self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            else:
                from fabrika.llm.cache import open_shared_db

                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = open_shared_db(self.path,
                                          "CREATE TABLE IF NOT EXISTS blobs (h TEXT PRIMARY KEY, z BLOB NOT NULL);"
                                          "CREATE TABLE IF NOT EXISTS requests (key TEXT PRIMARY KEY, body TEXT NOT NULL);"
                                          "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, body TEXT NOT NULL);")
            self._db.execute("PRAGMA busy_timeout=10000")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the request log {self.path}: {exc}; check the run directory is "
                             "writable") from exc
        self._lock = threading.Lock()
        self._blobs: dict[str, bytes] = {}
        self._requests: dict[str, str] = {}
        self._answers: dict[str, str] = {}
        #: keys and blob hashes already written by this process (bounded: cleared past a million)
        self._seen: set[str] = set()
        self._users = 0
        self._memo: dict[int, tuple[Any, str]] = {}

    @classmethod
    def for_run(cls, run_dir: Path) -> "RequestBodies":
        """The process's instance for ``run_dir`` (shared by the stages running at once); pair with :meth:`release`."""
        path = (Path(run_dir) / BODIES_FILE).resolve()
        with cls._open_lock:
            got = cls._open.get(path)
            if got is None or not path.exists():
                got = cls._open[path] = cls(path)
            got._users += 1
            return got

    def release(self) -> None:
        """One stage is done with it: flushed, and closed when no other stage of the process uses it."""
        with RequestBodies._open_lock:
            self._users -= 1
            if self._users > 0:
                self.flush()
                return
            if RequestBodies._open.get(self.path) is self:
                del RequestBodies._open[self.path]
        self.close()

    # -- writing --------------------------------------------------------------------
    def _ref(self, value: Any) -> str:
        """The content hash of ``value`` (a message, a tool list), stored once. A value object met again (the
        history of a dialogue is the same dicts turn after turn, a stage's tool list one tuple) is looked up
        by identity; the memo holds the object, so its id cannot be reused while it is there."""
        memo = self._memo.get(id(value))
        if memo is not None and memo[0] is value:
            return memo[1]
        data = _dump_bytes(value)
        h = hashlib.blake2b(data, digest_size=16).hexdigest()
        if h not in self._seen:  # small values stay as they are (compressing them costs more than it saves)
            self._blobs[h] = zlib.compress(data, 1) if len(data) > ZLIB_FROM else data
            self._seen.add(h)
        if len(self._memo) > 8192:
            self._memo.clear()
        self._memo[id(value)] = (value, h)
        return h

    def put(self, key: str, request: "ChatRequest", answer: "ChatResponse | None" = None) -> None:
        """Buffer ``request`` (as the engine sends it, defaults filled) under ``key``; ``answer`` too when given
        (a run without a response cache)."""
        if key in self._seen:
            return
        with self._lock:
            if len(self._seen) > 1_000_000:
                self._seen.clear()
            body: dict[str, Any] = {p: getattr(request, p) for p in PARAMS if getattr(request, p) is not None}
            body["messages"] = [self._ref(m) for m in request.messages]
            if request.tools:
                tools = request.tools  # the tuple itself (a stage sends one object again and again), looked up by identity
                body["tools"] = self._ref(tools if isinstance(tools, tuple) else list(tools))
            if request.response_format:
                body["response_format"] = self._ref(request.response_format)
            self._requests[key] = _dumps(body)
            if answer is not None and answer.error is None:
                self._answers[key] = _encode_response()(answer)
            self._seen.add(key)

    def flush(self) -> None:
        """Write what is buffered in one transaction."""
        if not (self._requests or self._blobs or self._answers):
            return
        with self._lock:
            blobs, reqs, answers = list(self._blobs.items()), list(self._requests.items()), list(self._answers.items())
            try:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR IGNORE INTO blobs (h, z) VALUES (?, ?)", blobs)
                self._db.executemany("INSERT OR IGNORE INTO requests (key, body) VALUES (?, ?)", reqs)
                self._db.executemany("INSERT OR IGNORE INTO answers (key, body) VALUES (?, ?)", answers)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise StoreError(f"cannot write the request log {self.path}: {exc}") from exc
            self._blobs.clear()
            self._requests.clear()
            self._answers.clear()

    def close(self) -> None:
        self.flush()
        self._db.close()

    # -- reading --------------------------------------------------------------------
    def _query(self, sql: str, keys: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            try:
                out.update(self._db.execute(sql.format(",".join("?" * len(chunk))), chunk).fetchall())
            except sqlite3.OperationalError:  # a table an older or foreign file lacks: nothing recorded there
                return out
        return out

    def bodies(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``key -> {model, tag, messages, tools, ..., answer?}`` for the keys that were recorded."""
        keys = sorted(set(keys))
        reqs = {k: json.loads(v) for k, v in self._query("SELECT key, body FROM requests WHERE key IN ({})",
                                                          keys).items()}
        refs = sorted({h for b in reqs.values() for h in [*b.get("messages", []), b.get("tools"),
                                                          b.get("response_format")] if isinstance(h, str)})
        blobs = {h: _unblob(z) for h, z in self._query("SELECT h, z FROM blobs WHERE h IN ({})", refs).items()}
        answers = self._query("SELECT key, body FROM answers WHERE key IN ({})", keys)
        out: dict[str, dict[str, Any]] = {}
        for key, body in reqs.items():
            body["messages"] = [blobs.get(h, {"role": "?", "content": "(not recorded)"}) for h in body["messages"]]
            for field in ("tools", "response_format"):
                if field in body:
                    body[field] = blobs.get(body[field])
            if key in answers:
                body["answer"] = answers[key]
            out[key] = body
        return out


__all__ = ["BODIES_FILE", "RequestBodies", "read_item_requests", "sidecar_of"]
