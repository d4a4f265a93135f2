"""What an exception escaping stage code means for its item: the one failure taxonomy.

Every item of every stage ends in exactly one of three ways (DESIGN contract 8):

* **a verdict** on the data — rows, ``ok`` or ``rejected`` with a reason. Stage code returns
  them; nothing here is involved. Verdicts are stored and, like the answers behind them, cached.
* **transient / infrastructure** — the endpoint failed past its retries, a sandbox worker died,
  a reply was cut or badly framed, the host timed out, the disk hiccuped. Not a property of the
  item: it stays *pending* (no row), is retried a bounded number of times within the run
  (:data:`fabrika.pipeline.execute.TRANSIENT_ROUNDS`) and otherwise by the next run.
* **a bug or a configuration problem** — any other exception escaping stage code. The runner
  stops the stage at once, writes nothing for the item (its LLM answers stay in the cache: they
  are answers to requests, not the item's result), and the run exits non-zero with one line
  naming the stage, the item, the exception and the fix (:class:`fabrika.errors.StageFailure`).
  Configuration (exit 2): a :class:`~fabrika.errors.ConfigError` or
  :class:`~fabrika.errors.InputError` raised by the stage, a missing or unreadable file, an input
  row without a column the stage reads (``row["messages"]`` on an :class:`InputRow` without it: a
  stage wired to the wrong input). Bug (exit 4): everything else (a ``KeyError`` from any other
  dict too).

:func:`classify` is the one place that decides; the local loop and the Ray workers both call it
through :func:`fabrika.pipeline.execute.process_item`.
"""

from __future__ import annotations

import errno
import os
import traceback
from dataclasses import dataclass
from typing import Any, Literal

from fabrika.errors import (
    ConfigError,
    InputError,
    LLMError,
    SandboxError,
    StageFailure,
    StorageError,
    StoreError,
    TransientError,
)
from fabrika.llm.failures import leaves_item_pending

FailureKind = Literal["transient", "config", "bug"]

#: ``OSError`` numbers that are the host's trouble, not the item's or the config's (disk, memory, descriptors).
TRANSIENT_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EIO, errno.EAGAIN,
                                         errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EINTR) if e is not None)
#: Longest exception message kept in the one-line stop message.
MESSAGE_CHARS = 300


class MissingColumn(KeyError):
    """``row[column]`` on an input row that has no such column: the stage reads a column its input does
    not write (a stage wired to the wrong input), a configuration problem — unlike a ``KeyError`` from
    any other dict in stage code, which is a bug."""


class InputRow(dict[str, Any]):
    """The input row handed to ``process``: a plain dict whose missing keys raise :class:`MissingColumn`."""

    def __missing__(self, key: Any) -> Any:
        raise MissingColumn(key)


@dataclass(frozen=True)
class Failure:
    """An exception escaping stage code, classified."""

    kind: FailureKind
    error: str
    fix: str


def _text(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    if len(msg) > MESSAGE_CHARS:
        msg = msg[:MESSAGE_CHARS] + "…"
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _where(exc: BaseException) -> str:
    """``file.py:line`` of the innermost frame inside fabrika or the user's code (the likely culprit)."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if not frames:
        return ""
    last = frames[-1]
    return f" (raised at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"


def classify(exc: BaseException, stage: Any = None, row: Any = None) -> Failure:
    """The kind of ``exc`` (raised by ``stage.process`` on ``row``) and the fix to print.

    ``stage``/``row`` only sharpen the message: a :class:`MissingColumn` (``row[column]`` on an
    :class:`InputRow` without it) is a schema mismatch, named with the stage's ``input``.
    """
    text = _text(exc)
    kind_name = getattr(stage, "kind", None) or "the stage"
    if isinstance(exc, LLMError):
        if leaves_item_pending(exc):
            return Failure("transient", text, "the next attempt asks again")
        return Failure("bug", text, f"{kind_name} must record a failed answer as a rejection "
                       "(fabrika.llm.rejections.answer_problem), not raise it")
    if isinstance(exc, (TransientError, SandboxError, TimeoutError, ConnectionError)):
        return Failure("transient", text, "an infrastructure fault; the item is retried")
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        where = f" at {exc.filename}" if exc.filename else ""
        return Failure("transient", text, f"the host is out of a resource{where} (disk space, memory, "
                       "file descriptors); free it and rerun")
    if isinstance(exc, StorageError):  # it names its path and fix; exit 3 (disk full, I/O) is the host's fault
        if exc.exit_code == 3:
            return Failure("transient", text, exc.fix)
        return Failure("config", text, exc.fix)
    if isinstance(exc, StoreError):
        return Failure("config", text, "see the message: the run directory cannot be read or written")
    if isinstance(exc, ConfigError):
        fix = getattr(exc, "fix", None) or "correct the configuration the message names"
        return Failure("config", text, fix)
    if isinstance(exc, InputError):
        return Failure("config", text, "fix or create the input file the message names")
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        path = exc.filename or "the file"
        return Failure("config", text, f"create {path} or point the stage's config at an existing path")
    if isinstance(exc, PermissionError):
        path = exc.filename or "the path"
        return Failure("config", text, f"make {path} readable (and writable where the stage writes)")
    if isinstance(exc, MissingColumn) and exc.args:
        column = exc.args[0]
        cfg = getattr(stage, "config", None)
        name = getattr(cfg, "stage_name", None) or kind_name
        source = getattr(cfg, "input", None)
        wired = f"{name}.input is {source!r}, whose rows" if source else "its input rows"
        have = ", ".join(sorted(str(k) for k in row)[:12]) if isinstance(row, dict) else "?"
        return Failure("config", f"KeyError: input row has no column {column!r} (it has: {have})",
                       f"{wired} have no column {column!r}: set {name}.input to a stage that writes it")
    return Failure("bug", text + _where(exc), f"a bug in {kind_name}: fix the code (or report it); "
                   "the item's LLM answers stay cached, so the rerun asks nothing twice")


def stop(stage_name: str, item_id: str | None, failure: Failure) -> StageFailure:
    """The exception that stops ``stage_name`` (its ``str`` is the one line the CLI prints)."""
    return StageFailure(stage_name, item_id, failure.kind, failure.error, failure.fix)


def stage_failure(exc: BaseException, stage: Any, item_id: str | None = None) -> StageFailure | None:
    """``exc`` raised by a stage outside its items (``setup``, ``run_all``) as a :class:`StageFailure`,
    or ``None`` when it should propagate as it is: already a ``StageFailure``; a ``ConfigError``,
    ``InputError`` or ``StoreError``, whose message names the file or field and the fix (CLI exit 2);
    a transient fault."""
    if isinstance(exc, (StageFailure, StoreError, ConfigError, InputError)):  # already one line naming the fix
        return None
    failure = classify(exc, stage)
    if failure.kind == "transient":
        return None
    return stop(getattr(stage, "name", "?"), item_id, failure)


__all__ = ["Failure", "FailureKind", "InputRow", "MissingColumn", "TRANSIENT_ERRNOS", "classify", "stage_failure",
           "stop"]
