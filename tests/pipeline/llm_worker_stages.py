"""Stage kinds for the ``llm_workers`` tests (a plugin: the worker processes import it by name).

``test.numbers`` is a source that never calls the LLM (it stays in the driver); ``test.wask`` asks the
LLM once per row and can kill its own process (``kill -9``) or raise (a bug) on chosen items, logging
every ``process`` call with its pid so a test can see which items were done twice. ``test.wask_global``
is a global stage (so it runs in the driver) that asks the LLM once per row, all at once, optionally
after a file appears (so that it overlaps a split stage for sure).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import polars as pl
from pydantic import Field

from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id

#: When set, every process that imports this module appends its pid to this file (a worker imports it as it
#: starts, before its first job: :func:`fabrika.pipeline.llm_worker.preload`).
IMPORT_LOG = "FABRIKA_TEST_WORKER_IMPORT_LOG"
if os.environ.get(IMPORT_LOG):
    with open(os.environ[IMPORT_LOG], "a", encoding="utf-8") as _fh:
        _fh.write(f"{os.getpid()}\n")


class NumbersConfig(StageConfig):
    n: int = Field(default=20, ge=0, description="How many numbered items to emit.")
    await_imports: str | None = Field(default=None, description="In setup, wait until this import log has "
                                      "`imports` lines (60 s at most); the report says how many it saw.")
    imports: int = Field(default=1, ge=1, description="Lines `await_imports` must have.")


@register_stage
class NumbersStage(Stage):
    """``n`` numbered items with stable ids; no LLM (so it stays in the driver)."""

    kind = "test.numbers"
    Config = NumbersConfig
    config: NumbersConfig
    calls_llm = False

    async def setup(self) -> None:
        if self.config.await_imports is None:
            return
        path = Path(self.config.await_imports)
        seen: list[str] = []
        for _ in range(1200):  # a bounded poll: workers started with the run import this module meanwhile
            seen = path.read_text().split() if path.exists() else []
            if len(seen) >= self.config.imports:
                break
            await asyncio.sleep(0.05)
        self.ctx.report("worker_imports_seen", sorted(int(p) for p in seen))

    def input_rows(self) -> Iterator[Row]:
        for i in range(self.config.n):
            yield {"id": stable_id("numbers", i), "i": i}

    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"], i=row["i"], text=f"число {row['i']}: скажи что-нибудь")]


class WorkerAskConfig(StageConfig):
    log: str | None = Field(default=None, description="File that gets one line 'pid item' per process() call.")
    kill_on: int | None = Field(default=None, description="Item whose process() SIGKILLs its own worker process.")
    kills: int = Field(default=1, ge=0, description="How many times kill_on kills (counted in `marker`).")
    marker: str | None = Field(default=None, description="File counting the kills so far.")
    driver_pid: int | None = Field(default=None, description="Never kill this process (the test's own).")
    raise_on: int | None = Field(default=None, description="Item whose process() raises RuntimeError (a bug).")


@register_stage
class WorkerAskStage(Stage[WorkerAskConfig]):
    """One LLM call per row; see the module docs for the faults it can inject."""

    kind = "test.wask"
    Config = WorkerAskConfig

    def _kill_now(self, i: int) -> bool:
        cfg = self.config
        if cfg.kill_on != i or cfg.marker is None or os.getpid() == cfg.driver_pid:
            return False
        marker = Path(cfg.marker)
        done = int(marker.read_text() or 0) if marker.exists() else 0
        if done >= cfg.kills:
            return False
        marker.write_text(str(done + 1))
        return True

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        i = row["i"]
        if cfg.log is not None:
            with open(cfg.log, "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()} {i}\n")
        if self._kill_now(i):
            os.kill(os.getpid(), signal.SIGKILL)
        if cfg.raise_on == i:
            raise RuntimeError(f"boom on {i}")
        resp = await self.ctx.llm.complete_one(ChatRequest(messages=({"role": "user", "content": row["text"]},),
                                                           tag="test.wask", routing_key=str(row["id"])))
        if not resp.ok:
            return [rejected(stable_id(row["id"], "wask"), f"llm_error: {resp.error.kind}")]
        return [ok(stable_id(row["id"], "wask"), i=i, answer=resp.text)]


class GlobalAskConfig(StageConfig):
    wait_for: str | None = Field(default=None, description="Start asking once this file has `wait_lines` lines "
                                "(60 s at most).")
    wait_lines: int = Field(default=1, ge=1, description="Lines `wait_for` must have.")


@register_stage
class GlobalAskStage(Stage[GlobalAskConfig]):
    """A global stage: every row's question in one ``complete`` call, from the driver's engine."""

    kind = "test.wask_global"
    Config = GlobalAskConfig
    global_stage = True

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        items = list(rows)
        if self.config.wait_for is not None:
            for _ in range(1200):  # a bounded poll: the test's split stage has started its items
                path = Path(self.config.wait_for)
                if path.exists() and len(path.read_text().splitlines()) >= self.config.wait_lines:
                    break
                await asyncio.sleep(0.05)
        answers = await self.ctx.llm.complete([ChatRequest(messages=({"role": "user", "content": r["text"]},),
                                                           tag="test.wask_global", routing_key=str(r["id"]))
                                               for r in items])
        yield [ok(stable_id(r["id"], "global"), i=r["i"], answer=a.text) if a.ok
               else rejected(stable_id(r["id"], "global"), f"llm_error: {a.error.kind}")
               for r, a in zip(items, answers, strict=True)]


def dataset_digest(run_dir: Path, version: str = "v1") -> tuple[str, int]:
    """Order-independent hash of a materialised version's rows (as ``bench/determinism.py`` computes it)."""
    top = hashlib.sha256()
    rows = 0
    data = run_dir / "versions" / version / "data"
    for path in sorted(data.glob("*.parquet")):
        digests = sorted(hashlib.sha256(json.dumps(r, sort_keys=True, ensure_ascii=False, default=str).encode())
                         .hexdigest() for r in pl.read_parquet(path).to_dicts())
        rows += len(digests)
        top.update(path.name.encode())
        for d in digests:
            top.update(d.encode())
    return top.hexdigest()[:16], rows


def calls(log: Path) -> list[tuple[int, int]]:
    """``(pid, item)`` per ``process`` call logged by ``test.wask``."""
    if not log.exists():
        return []
    return [(int(p), int(i)) for p, i in (line.split() for line in log.read_text().splitlines())]


def pipeline_doc(run_dir: Path, workers: int, n: int = 24, llm: dict[str, Any] | None = None,
                 **ask: Any) -> dict[str, Any]:
    """numbers → wask, ``dataset: [wask]``; ``ask`` goes into the wask stage's config."""
    return {
        "name": "w",
        "run_dir": str(run_dir),
        "plugins": ["tests.pipeline.llm_worker_stages"],
        "llm": llm or {"backend": "sim"},
        "llm_workers": workers,
        "max_in_flight": 4,
        "stages": [{"kind": "test.numbers", "n": n},
                   {"kind": "test.wask", "input": "test.numbers", "chunk_size": 1000, **ask}],
        "dataset": {"stages": ["test.wask"]},
    }
