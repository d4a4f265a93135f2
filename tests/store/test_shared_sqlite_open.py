"""Several processes opening one fresh WAL file at once (``llm_workers: 2`` opening the run's request log and
LLM cache): SQLite answers ``database is locked`` at once to some of them where waiting could deadlock; the open
is retried, so no worker dies of it (before the fix this test failed in both cases, every time it was run)."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fabrika.llm.cache import ResponseCache
from fabrika.store.requests import RequestBodies

OPENERS = 6
TRIALS = 40


def _open(kind: str, path: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        if kind == "requests":
            RequestBodies(Path(path))
        else:
            ResponseCache(Path(path))
        results.put("ok")
    except BaseException as exc:  # noqa: BLE001 - the test reports what a worker would have died of
        results.put(repr(exc))


@pytest.mark.parametrize("kind", ["requests", "cache"])
def test_processes_opening_one_fresh_file_at_once_all_succeed(tmp_path: Path, kind: str) -> None:
    ctx = mp.get_context("fork")
    failures: list[str] = []
    for trial in range(TRIALS):
        path = tmp_path / f"{trial}.sqlite"
        barrier, results = ctx.Barrier(OPENERS), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(kind, str(path), barrier, results)) for _ in range(OPENERS)]
        for p in procs:
            p.start()
        outcome = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=120)
        failures += [o for o in outcome if o != "ok"]
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert failures == []


def test_an_open_that_keeps_meeting_a_lock_still_fails_with_the_store_error(tmp_path: Path, monkeypatch: Any) -> None:
    """The retry is bounded: a file that stays locked is the one-line store error, not a hang."""
    import fabrika.llm.cache as cache
    from fabrika.errors import StoreError

    calls = []

    def locked(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(cache.sqlite3, "connect", locked)
    monkeypatch.setattr(cache, "wait_exponential", lambda **kw: (lambda state: 0.0))
    with pytest.raises(StoreError, match="database is locked"):
        RequestBodies(tmp_path / "requests.sqlite")
    assert len(calls) > 1
