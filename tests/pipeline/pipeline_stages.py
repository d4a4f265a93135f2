"""Test stage kinds, a test gate group and the echoing scripted model of the pipeline tests (also a plugin)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Iterator

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from fabrika.errors import TransientError
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id
from fabrika.testing import ScriptedLLM


class StageOverlap:
    """A ScriptedLLM handler: answers ``echo: <last user message>`` after ``delay`` seconds and keeps
    the most stages that had a request at the backend at the same time (``peak``)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.in_flight: dict[str, int] = {}
        self.peak = 0

    async def __call__(self, request: ChatRequest) -> str:
        stage = request.meta.get("stage", "?")
        self.in_flight[stage] = self.in_flight.get(stage, 0) + 1
        self.peak = max(self.peak, sum(1 for v in self.in_flight.values() if v))
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight[stage] -= 1
        return f"echo: {request.messages[-1]['content']}"


def echo_llm(delay: float = 0.0, **kw: Any) -> ScriptedLLM:
    """The pipeline tests' model: ``echo: <last user message>`` through the real engine (``kw``: ScriptedLLM's)."""
    return ScriptedLLM(StageOverlap(delay), **kw)


def stages_seen(llm: ScriptedLLM) -> set[str]:
    """The stages the runner stamped on the requests that reached the backend (``meta["stage"]``)."""
    return {r.meta.get("stage", "?") for r in llm.requests}


class CountConfig(StageConfig):
    n: int = Field(default=10, ge=0, description="How many numbered items to emit.")
    delay: float = Field(default=0.0, ge=0, description="Sleep per item (seconds), to widen crash windows.")
    raise_on: list[int] = Field(default_factory=list, description="Items whose process raises RuntimeError (a bug).")
    transient_on: dict[int, int] = Field(default_factory=dict, description="Item -> how many of its attempts raise "
                                         "TransientError before it succeeds.")


#: Attempts per item of ``test.count`` that met a TransientError so far (``transient_on``).
TRANSIENT_SEEN: dict[int, int] = {}


#: Items handed out by the last ``test.count`` input generator (streaming check).
PULLED: list[int] = []


@register_stage
class CountStage(Stage):
    """Source of ``n`` items with stable ids; every 7th is rejected; item 13 is "unlucky" (rejected);
    ``raise_on`` items raise (a bug), ``transient_on`` items meet infrastructure faults first."""

    kind = "test.count"
    Config = CountConfig
    config: CountConfig

    def input_rows(self) -> Iterator[Row]:
        PULLED.clear()
        for i in range(self.config.n):
            PULLED.append(i)
            yield {"id": stable_id("count", i), "i": i}

    async def process(self, row: Row) -> list[Row]:
        if self.config.delay:
            await asyncio.sleep(self.config.delay * (1 + (row["i"] * 7919) % 5) / 3)
        if row["i"] in self.config.raise_on:
            raise RuntimeError(f"boom on {row['i']}")
        if TRANSIENT_SEEN.get(row["i"], 0) < self.config.transient_on.get(row["i"], 0):
            TRANSIENT_SEEN[row["i"]] = TRANSIENT_SEEN.get(row["i"], 0) + 1
            raise TransientError(f"worker died under item {row['i']}")
        if row["i"] == 13:
            return [rejected(row["id"], "unlucky: 13", i=row["i"])]
        if row["i"] % 7 == 3:
            return [rejected(row["id"], "too_odd: i % 7 == 3", i=row["i"])]
        return [ok(row["id"], i=row["i"], text=f"число {row['i']}", tags=["a", str(row["i"])])]


@register_stage
class AskStage(Stage):
    """One LLM call per row through ``ctx.llm``."""

    kind = "test.ask"

    async def process(self, row: Row) -> list[Row]:
        prompt = {"role": "user", "content": row.get("text") or row["answer"]}
        resp = await self.ctx.llm.complete_one(ChatRequest(messages=(prompt,), tag="test"))
        if not resp.ok:
            return [rejected(stable_id(row["id"], "ask"), f"llm_error: {resp.error.kind}")]
        return [ok(stable_id(row["id"], "ask"), i=row["i"], answer=resp.text)]


class AskThenFailConfig(StageConfig):
    fail_on: list[int] = Field(default_factory=list, description="Items whose process raises after its LLM call.")


@register_stage
class AskThenFailStage(Stage[AskThenFailConfig]):
    """``test.ask``, but ``fail_on`` items raise (a bug) after their answer came back (and was cached)."""

    kind = "test.ask_then_fail"

    async def process(self, row: Row) -> list[Row]:
        prompt = {"role": "user", "content": row["text"]}
        resp = await self.ctx.llm.complete_one(ChatRequest(messages=(prompt,), tag="test"))
        if row["i"] in self.config.fail_on:
            raise RuntimeError(f"bug after the answer to {row['i']}")
        return [ok(stable_id(row["id"], "ask"), i=row["i"], answer=resp.text)]


@register_stage
class ScoreStage(Stage):
    """Annotating scorer: ``score = i / 100`` keyed by the scored row's id; i == 5 fails to score."""

    kind = "test.score"
    annotates = True

    async def process(self, row: Row) -> list[Row]:
        if row["i"] == 5:
            return [rejected(row["id"], "judge_failed: unparsable")]
        return [ok(row["id"], score=row["i"] / 100)]


class CollectConfig(StageConfig):
    pass


@register_stage
class CollectStage(Stage):
    """Global stage: one row with the count of its input."""

    kind = "test.collect"
    global_stage = True

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        ids = sorted(r["id"] for r in rows)
        self.ctx.report("sandbox_isolation", "rlimits")
        yield [ok(stable_id(ids), n=len(ids))]


class ScoreParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_score: float = Field(default=0.0, ge=0, le=1, description="Rows with score below are dropped.")
    max_i: int | None = Field(default=None, description="Rows with i above are dropped (None: off).")


def _score_predicates(p: ScoreParams) -> list[GatePredicate]:
    preds = [GatePredicate("low_score", pl.col("score") >= p.min_score, ("score",))]
    if p.max_i is not None:
        preds.append(GatePredicate("big_i", pl.col("i") <= p.max_i, ("i",)))
    return preds


register_gate_group("testscore", ScoreParams, _score_predicates)


def dataset_rows(run_dir: Any, version: str = "v1") -> list[dict[str, Any]]:
    """Order-independent content of a version: rows sorted by id."""
    from fabrika.store.versions import scan_version

    lf = scan_version(run_dir, version)
    return [] if lf is None else lf.sort("id").collect().to_dicts()


@register_stage
class BadSourceStage(Stage):
    """A source whose seed file turns out malformed only while streaming."""

    kind = "test.badsource"

    def input_rows(self) -> Iterator[Row]:
        from fabrika.errors import InputError

        yield {"id": "fine"}
        raise InputError("seeds.jsonl:2: invalid JSON (Expecting value); one JSON object per line")

    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"])]


class Pool:
    """A run-wide resource that must be closed by the runner, not by the stages."""

    instances: list["Pool"] = []

    def __init__(self) -> None:
        self.used = 0
        self.closed = False
        Pool.instances.append(self)

    def close(self) -> None:
        self.closed = True


@register_stage
class PooledStage(Stage):
    kind = "test.pooled"

    async def process(self, row: Row) -> list[Row]:
        pool = self.ctx.resource("pool", Pool)
        assert not pool.closed
        pool.used += 1
        return [ok(stable_id(row["id"], self.name))]
