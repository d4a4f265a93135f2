"""Test stage kinds for the progress and raw-excerpt tests (imported as a pipeline plugin)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterator, Iterator

from pydantic import Field

from fabrika.llm.types import ChatRequest
from fabrika.pipeline.progress import phase
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id


def prose_answer(request: ChatRequest) -> str:
    """A ScriptedLLM handler that answers like a real model asked for JSON: a <think> block and prose
    around it (a long one for every third item, every fifth answer is valid JSON)."""
    i = int(request.messages[-1]["content"])
    if i % 5 == 0:
        return json.dumps({"answer": i})
    return f"<think>the user wants JSON for {i}</think>Конечно! Вот ответ: {{\"answer\": {i}" + (
        " бла" * 3000 if i % 3 == 0 else "")


class ParseConfig(StageConfig):
    n: int = Field(default=20, ge=0, description="Items.")


@register_stage
class ParseStage(Stage):
    """Asks for JSON and rejects what does not parse; every 4th item is passed over by a share."""

    kind = "ux.parse"
    Config = ParseConfig

    def input_rows(self) -> Iterator[Row]:
        for i in range(self.config.n):  # type: ignore[attr-defined]
            yield {"id": stable_id("ux", i), "i": i}

    async def process(self, row: Row) -> list[Row]:
        resp = await self.ctx.llm.complete_one(ChatRequest(messages=({"role": "user", "content": str(row["i"])},)))
        if row["i"] % 4 == 1:
            return [rejected(row["id"], "not_sampled: share=0.75")]
        try:
            value = json.loads(resp.text or "")
        except ValueError as exc:
            return [rejected(row["id"], f"invalid_json: {exc.msg}")]
        return [ok(row["id"], answer=value["answer"])]


class PhasedConfig(StageConfig):
    seconds: float = Field(default=1.0, ge=0, description="How long the blocking 'embedding' takes.")


@register_stage
class PhasedStage(Stage):
    """A global stage that blocks the event loop (like an embedding model) and names its phases."""

    kind = "ux.phased"
    Config = PhasedConfig
    global_stage = True

    def input_rows(self) -> Iterator[Row]:
        yield from ({"id": stable_id("p", i)} for i in range(10))

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        items = list(rows)
        steps = 5
        for k in range(steps):
            phase("embedding", k * 2, len(items))
            time.sleep(self.config.seconds / steps)  # type: ignore[attr-defined]  # holds the loop on purpose
        phase("clustering")
        await asyncio.sleep(0)
        yield [ok(r["id"], cluster=0) for r in items]


def rows_of(result: Any, stage: str) -> list[dict[str, Any]]:
    from fabrika.store import RunStore

    return RunStore(result.run_dir).scan_raw(stage).collect().to_dicts()
