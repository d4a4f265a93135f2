"""A global stage for the request-log tests (a plugin: a killed run's subprocess imports it by name).

``test.glog`` reads ``test.numbers``' rows and, in ``run_all``: sends one set-up request outside any scope
(the stage's shared record), then per row one request in its own :func:`request_scope` that makes that row,
and one request claimed by a row it never writes (so it must land in the shared record too); it yields a
shard every ``per_chunk`` rows and can ``kill -9`` its own process after the first one (once, counted in
``marker``) once the second chunk is asked for (the first is written by then).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import AsyncIterator, Iterator

from pydantic import Field

from fabrika.llm.types import ChatRequest
from fabrika.pipeline.request_log import request_scope
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage


class GlobalLogConfig(StageConfig):
    per_chunk: int = Field(default=3, ge=1, description="Rows per yielded chunk (one shard each).")
    kill_after_first: bool = Field(default=False, description="SIGKILL the process once the first shard is written.")
    marker: str | None = Field(default=None, description="File that records the kill (it happens once).")


def ask(text: str, tag: str) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": text},), tag=tag)


@register_stage
class GlobalLogStage(Stage[GlobalLogConfig]):
    kind = "test.glog"
    Config = GlobalLogConfig
    global_stage = True

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        cfg = self.config
        await self.ctx.llm.complete_one(ask("подготовка: общий запрос", "test.glog.setup"))
        chunk: list[Row] = []
        chunks = 0
        for row in sorted(rows, key=lambda r: r["id"]):
            with request_scope() as scope:
                resp = await self.ctx.llm.complete_one(ask(f"строка {row['i']}", "test.glog.row"))
            out = ok(f"g-{row['id']}", i=row["i"], text=resp.text or "")
            scope.made([out])
            chunk.append(out)
            if len(chunk) >= cfg.per_chunk:
                yield chunk
                chunk = []
                chunks += 1
                if chunks == 2 and cfg.kill_after_first and cfg.marker and not Path(cfg.marker).exists():
                    Path(cfg.marker).write_text("1")
                    os.kill(os.getpid(), signal.SIGKILL)
        with request_scope() as scope:
            await self.ctx.llm.complete_one(ask("запрос без строки", "test.glog.orphan"))
        scope.made(["g-never-written"])
        if chunk:
            yield chunk


def pipeline_doc(run_dir: Path, n: int = 8, **glog: object) -> dict[str, object]:
    """numbers → glog, ``dataset: [glog]``; ``glog`` goes into the global stage's config."""
    return {
        "name": "g",
        "run_dir": str(run_dir),
        "plugins": ["tests.pipeline.request_log_global_stages", "tests.pipeline.llm_worker_stages"],
        "llm": {"backend": "sim"},
        "stages": [{"kind": "test.numbers", "n": n}, {"kind": "test.glog", "input": "test.numbers", **glog}],
        "dataset": {"stages": ["test.glog"]},
    }
