"""fabrika's exception tree.

    FabrikaError
    ├── ConfigError          bad pipeline YAML / CLI values (CLI exit code 2)
    │   └── StageConfigError stage code says "the configuration is wrong" (with a fix)
    ├── InputError           a missing or malformed input file (seeds, pools)
    ├── LLMError             one failed LLM request; ``kind`` says why
    │   └── CacheMissError   ``--cache-only`` and the answer is not cached
    ├── StoreError           a run directory that cannot be read or written
    │   └── StorageError     a storage fault with its ``path`` and ``fix`` (exit 2: unwritable,
    │       │                damaged; exit 3: disk full or I/O error, rerun after the fix)
    │       ├── JournalCorruptError  a stage journal damaged before its tail
    │       └── ShardCorruptError    a parquet shard that does not read (truncated, garbled)
    ├── SandboxError         the sandbox itself failed (not a verifier's verdict)
    │   └── SandboxInfrastructureError  no verdict for reasons of the host (worker death,
    │                                   framing, wall ceiling): transient, the item stays pending
    ├── TransientError       an infrastructure fault in stage code: the item stays pending
    └── StageFailure         the runner stopped a stage: a bug or a configuration problem
                             in one item (CLI exit 2 for configuration, 4 for a bug)

Rejections of untrusted LLM output are *data* (rows with ``status="rejected"``
and a ``reason``), never exceptions. What an exception escaping stage code means
for its item (verdict, transient, bug or configuration) is decided in one place,
:mod:`fabrika.pipeline.taxonomy`.
"""

from __future__ import annotations

import errno as _errno
from typing import Any, Literal

LLMErrorKind = Literal[
    "rate_limit",
    "timeout",
    "connection",
    "server",
    "bad_request",
    "auth",
    "not_found",
    "context_length",
    "truncated",
    "cache_miss",
    "unavailable",
]

RETRYABLE_KINDS: frozenset[str] = frozenset({"rate_limit", "timeout", "connection", "server"})


class FabrikaError(Exception):
    """Base class of every error fabrika raises on purpose."""


class ConfigError(FabrikaError, ValueError):
    """A configuration value is wrong; the message names the field, the value and the fix."""


class StageConfigError(ConfigError):
    """Raised by stage code: the stage cannot work with the configuration it was given.

    ``fix`` says what to change (``"set if.responses.input to a stage that writes 'messages'"``);
    the runner stops the stage and prints it (CLI exit 2).
    """

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message if fix is None else f"{message}; {fix}")
        self.message = message
        self.fix = fix


class InputError(FabrikaError):
    """An input file is missing or malformed."""


class StoreError(FabrikaError):
    """A run directory cannot be read or written."""


class StorageError(StoreError):
    """A file or directory of a run cannot be written or read back intact.

    ``str()`` is one line: what happened, to which path, and the fix. ``exit_code`` is what the
    CLI exits with: 2 for a problem a person must fix first (a read-only or unwritable directory,
    damaged files), 3 for one that leaves the run unfinished and a rerun continues once it is
    gone (a full disk, an I/O error).
    """

    def __init__(self, path: object, problem: str, fix: str, exit_code: int = 2) -> None:
        super().__init__(f"{path}: {problem}; {fix}")
        self.path = str(path)
        self.problem = problem
        self.fix = fix
        self.exit_code = exit_code

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled whole (Ray workers, multiprocessing): the default would call __init__(message)
        return (type(self), (self.path, self.problem, self.fix, self.exit_code))

    @classmethod
    def from_os(cls, exc: OSError, path: object, action: str = "cannot write") -> StorageError:
        """Name an ``OSError`` of a store write: disk full → exit 3; permission, read-only → exit 2."""
        code = exc.errno
        if code in (_errno.ENOSPC, _errno.EDQUOT):
            return cls(path, f"{action}: no space left on the device",
                       "free disk space (or move run_dir), then rerun the same command to continue", 3)
        if code in (_errno.EACCES, _errno.EPERM):
            return cls(path, f"{action}: permission denied",
                       "make the run directory writable by this user (or set run_dir elsewhere) and rerun")
        if code == _errno.EROFS:
            return cls(path, f"{action}: read-only file system",
                       "set run_dir to a writable location (or remount it read-write) and rerun")
        reason = exc.strerror or str(exc) or type(exc).__name__
        return cls(path, f"{action}: {reason}", "check the disk and the run directory, then rerun", 3)


class JournalCorruptError(StorageError):
    """A stage journal holds a damaged record that is not its torn tail (a crash cannot explain it)."""


class ShardCorruptError(StorageError):
    """A parquet shard of a run is truncated or garbled."""


class SandboxError(FabrikaError):
    """The sandbox machinery failed (distinct from a verifier's error verdict)."""


class TransientError(FabrikaError):
    """An infrastructure fault met by stage code (a worker died, a reply was cut, the disk hiccuped).

    Not a property of the item: the runner leaves the item pending, retries it a bounded number
    of times within the run and otherwise leaves it to the next run; it never becomes a row.
    """


class StageFailure(FabrikaError):
    """The runner stopped a stage because one item hit a bug or a configuration problem.

    Nothing was written or cached for that item. ``kind`` is ``"config"`` (a missing input file,
    a :class:`ConfigError` or :class:`InputError` raised by the stage, a row without a column the
    stage reads: CLI exit 2) or ``"bug"`` (any other exception escaping stage code: exit 4).
    ``str()`` is the one line the CLI prints: stage, item, exception, fix.
    """

    EXIT_CODES = {"config": 2, "bug": 4}

    def __init__(self, stage: str, item_id: str | None, kind: str, error: str, fix: str) -> None:
        where = f"stage {stage}" + (f", item {item_id}" if item_id is not None else "")
        what = "configuration problem" if kind == "config" else "bug in the stage"
        super().__init__(f"{where}: {what}: {error}; fix: {fix}; nothing was written for this item, "
                         "rerun the same command after the fix")
        self.stage = stage
        self.item_id = item_id
        self.kind = kind
        self.error = error
        self.fix = fix

    @property
    def exit_code(self) -> int:
        return self.EXIT_CODES.get(self.kind, 4)

    def __reduce__(self) -> tuple[type["StageFailure"], tuple[str, str | None, str, str, str]]:
        return type(self), (self.stage, self.item_id, self.kind, self.error, self.fix)


class SandboxInfrastructureError(SandboxError):
    """The sandbox could not reach a verdict for reasons of the host, not of the verifier: a worker
    died or sent a garbled stream, or the host starved a verifier past the wall ceiling — on a fresh
    worker as well. Transient: the item must stay pending (retried), never become a verdict."""


class LLMError(FabrikaError):
    """One LLM request failed. ``kind`` is one of :data:`LLMErrorKind`.

    ``retry_after`` carries the server's Retry-After (seconds) when it sent one;
    ``attempts`` is how many tries the retry loop made before giving up.
    """

    def __init__(self, kind: LLMErrorKind, message: str, *, retry_after: float | None = None,
                 status_code: int | None = None) -> None:
        super().__init__(f"[{kind}] {message}")
        self.kind: LLMErrorKind = kind
        self.message = message
        self.retry_after = retry_after
        self.status_code = status_code
        self.attempts = 1
        #: the server that answered with this error (``public_url`` of its base URL), when one did
        self.endpoint: str | None = None

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS


class CacheMissError(LLMError):
    """``--cache-only`` was set and a request is not in the cache."""

    def __init__(self, message: str) -> None:
        super().__init__("cache_miss", message)
