"""One writer per run directory: an exclusive ``flock`` on ``<run_dir>/.lock``.

``run``, ``refilter`` and ``export`` into a run directory hold it for their
whole duration; a second process gets :class:`RunDirBusy` (CLI exit 2) naming
the holder: ``run dir runs/x is in use by pid 4242 (fabrika run x.yaml)``.
The kernel releases a ``flock`` when its process dies, so a ``kill -9`` leaves
no stale lock; the pid and command written into the file are only for the
message. Re-entrant within one process (``run`` materialises under its own lock).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from fabrika.errors import StorageError, StoreError

LOCK_NAME = ".lock"
_HELD: dict[str, list[int]] = {}  # resolved path -> [fd, depth]


class RunDirBusy(StoreError):
    """Another process holds the run directory's lock."""


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode("utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    pid = info.get("pid", "?")
    command = info.get("command", "unknown command")
    host = info.get("host")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    return f"pid {pid}{where} ({command})"


@contextmanager
def hold_run_dir(run_dir: str | Path, command: str) -> Iterator[None]:
    """Hold the run directory's exclusive lock for the ``with`` block (created if missing)."""
    path = Path(run_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError.from_os(exc, path) from exc
    key = str((path / LOCK_NAME).resolve())
    held = _HELD.get(key)
    if held is not None:
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    try:
        fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StorageError.from_os(exc, key) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        who = _holder(fd)
        os.close(fd)
        raise RunDirBusy(f"run dir {path} is in use by {who}; wait for it to finish or stop it, "
                         "then rerun") from None
    try:
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps({"pid": os.getpid(), "command": command, "host": socket.gethostname()}).encode())
        except OSError as exc:  # a full disk shows here first: one line, not a traceback
            raise StorageError.from_os(exc, key) from exc
        _HELD[key] = [fd, 1]
        yield
    finally:
        _HELD.pop(key, None)
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
