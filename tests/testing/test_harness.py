"""The shipped stage-test harness: ScriptedLLM under the real engine, stage_context and run_stage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from pydantic import BaseModel, ConfigDict, Field

from fabrika.errors import LLMError
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.llm.config import LLMConfig
from fabrika.llm.engine import LLMEngine
from fabrika.llm.types import ChatRequest, ChatResponse, Choice
from fabrika.pipeline.config import PipelineConfig
from fabrika.pipeline.context import item_rng
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, rejected
from fabrika.schemas.ids import stable_id
from fabrika.testing import (
    ScriptedLLM,
    StageInternalError,
    UnscriptedRequest,
    by_tag,
    llm_error,
    run_stage,
    sequence,
    stage_context,
)


def ask(text: str, **kw: Any) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": text},), **kw)


# -- ScriptedLLM under the real engine ------------------------------------------------------------

async def test_text_answer_goes_through_the_engine_with_its_defaults():
    llm = ScriptedLLM(lambda r: f"эхо: {r.messages[-1]['content']}",
                      config=LLMConfig(model="qwen3-8b", temperature=0.6))
    [resp] = await llm.complete([ask("привет", tag="t")])
    assert resp.ok and resp.text == "эхо: привет" and resp.backend == "scripted"
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0
    [seen] = llm.requests
    assert (seen.model, seen.temperature) == ("qwen3-8b", 0.6)  # the engine filled its defaults
    assert llm.accounting.snapshot()["totals"]["requests"] == 1


async def test_dict_answer_with_tool_calls_is_in_openai_shape():
    llm = ScriptedLLM(lambda r: {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Казань"}}]})
    resp = await llm.complete_one(ask("погода?"))
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.content is None
    assert json.loads(choice.tool_calls[0]["arguments"]) == {"city": "Казань"} and choice.tool_calls[0]["id"]


async def test_truncated_answer_is_kept_and_counted_as_truncated():
    llm = ScriptedLLM(lambda r: {"content": '{"steps": [', "finish_reason": "length"})
    resp = await llm.complete_one(ask("длинный план", max_tokens=8))
    assert resp.ok and resp.choices[0].truncated
    assert llm.accounting.snapshot()["totals"]["truncated"] == 1


async def test_retryable_errors_are_retried_by_the_engine():
    llm = ScriptedLLM(sequence(llm_error("rate_limit"), llm_error("server"), "готово"))
    resp = await llm.complete_one(ask("x"))
    assert resp.ok and resp.text == "готово" and resp.attempts == 3 and llm.calls == 3


async def test_raised_errors_behave_like_returned_ones():
    def handler(request: ChatRequest) -> str:
        raise llm_error("bad_request")

    llm = ScriptedLLM(handler)
    resp = await llm.complete_one(ask("x"))
    assert resp.error is not None and resp.error.kind == "bad_request" and resp.error.status_code == 400
    assert llm.calls == 1  # terminal: not retried


async def test_an_outage_exhausts_the_retries_then_fails_the_request():
    llm = ScriptedLLM(lambda r: llm_error("timeout"), config=LLMConfig(max_retries=2))
    resp = await llm.complete_one(ask("x"))
    assert resp.error is not None and resp.error.kind == "timeout" and llm.calls == 3


async def test_unfinished_answer_is_retried_and_content_filter_is_terminal():
    llm = ScriptedLLM(sequence({"content": "на полу", "finish_reason": "abort"}, "целый ответ"))
    resp = await llm.complete_one(ask("x"))
    assert resp.text == "целый ответ" and llm.calls == 2
    filtered = ScriptedLLM(lambda r: {"content": "", "finish_reason": "content_filter"})
    resp = await filtered.complete_one(ask("x"))
    assert resp.error is not None and resp.error.kind == "bad_request" and filtered.calls == 1


async def test_repeated_samples_go_out_as_one_n_request_when_supported():
    seen: list[int] = []

    def handler(request: ChatRequest) -> str:
        assert request.n == 1
        seen.append(request.sample_index)
        return f"образец {request.sample_index}"

    llm = ScriptedLLM(handler, supports_n=True)
    resps = await llm.complete([ask("реши", sample_index=i, seed=3) for i in range(4)])
    assert [r.text for r in resps] == [f"образец {i}" for i in range(4)]
    assert llm.calls == 1 and llm.requests[0].n == 4 and seen == [0, 1, 2, 3]
    plain = ScriptedLLM(handler)
    await plain.complete([ask("реши", sample_index=i) for i in range(4)])
    assert plain.calls == 4 and {r.n for r in plain.requests} == {1}


async def test_a_server_answering_the_wrong_number_of_choices_is_a_server_error():
    llm = ScriptedLLM(lambda r: ["один", "лишний"], supports_n=True, config=LLMConfig(max_retries=0))
    resps = await llm.complete([ask("x", sample_index=i) for i in range(3)])
    assert all(r.error is not None and r.error.kind == "server" for r in resps)


async def test_the_cache_answers_a_second_engine_without_calls(tmp_path: Path):
    first = ScriptedLLM(lambda r: "ответ", cache=tmp_path / "cache.sqlite")
    await first.complete([ask("a"), ask("b")])
    await first.aclose()
    second = ScriptedLLM(lambda r: pytest.fail("the cache should answer"), cache=tmp_path / "cache.sqlite")
    resps = await second.complete([ask("a"), ask("b")])
    assert [r.text for r in resps] == ["ответ", "ответ"] and all(r.cached for r in resps) and second.calls == 0
    await second.aclose()


async def test_identical_requests_in_flight_share_one_call_with_the_cache(tmp_path: Path):
    llm = ScriptedLLM(lambda r: "один раз", cache=tmp_path / "c.sqlite", delay_s=0.01)
    resps = await llm.complete([ask("same"), ask("same"), ask("same")])
    assert {r.text for r in resps} == {"один раз"} and llm.calls == 1
    await llm.aclose()


async def test_a_script_bug_fails_the_test_instead_of_hiding_as_a_failed_request():
    llm = ScriptedLLM(by_tag({"fc.user": "привет"}))
    assert (await llm.complete_one(ask("x", tag="fc.user.turn"))).text == "привет"
    with pytest.raises(UnscriptedRequest, match="fc.planner"):
        await llm.complete_one(ask("x", tag="fc.planner"))
    bad = ScriptedLLM(lambda r: 42)
    with pytest.raises(TypeError, match="returned int"):
        await bad.complete_one(ask("x"))


async def test_async_handler_and_peak_concurrency():
    async def handler(request: ChatRequest) -> str:
        await asyncio.sleep(0.01)
        return "ok"

    llm = ScriptedLLM(handler)
    await llm.complete([ask(str(i)) for i in range(5)])
    assert llm.peak_in_flight == 5


async def test_plugs_into_an_engine_of_ones_own():
    backend = ScriptedLLM(lambda r: ChatResponse(choices=(Choice(content="x"),)))
    engine = LLMEngine(backend, config=LLMConfig())
    resp = await engine.complete_one(ask("x"))
    assert resp.text == "x" and resp.backend == "scripted"
    await engine.aclose()


def test_one_scripted_llm_serves_several_event_loops():
    llm = ScriptedLLM(lambda r: "ok")
    assert asyncio.run(llm.complete_one(ask("a"))).ok
    assert asyncio.run(llm.complete_one(ask("b"))).ok and llm.calls == 2


# -- stage_context and run_stage ------------------------------------------------------------------

class GuessConfig(StageConfig):
    kind: str = "test.harness_guess"
    k: int = Field(default=1, ge=1, description="Samples per row.")


class GuessStage(Stage):
    """Asks for a JSON object ``{"city": ...}`` per row; rejections name the reason."""

    kind = "test.harness_guess"
    Config = GuessConfig

    async def process(self, row: Row) -> list[Row]:
        if row.get("explode"):
            raise ValueError("stage bug")
        if row.get("nothing"):
            return []
        resp = await self.ctx.llm.complete_one(ChatRequest(
            messages=({"role": "user", "content": f"Город для: {row['q']}"},), tag="test.guess"))
        out_id = stable_id(row["id"], "guess")
        if resp.error is not None:
            return [rejected(out_id, f"llm_error: {resp.error.kind}")]
        if resp.choices[0].truncated:
            return [rejected(out_id, "truncated: finish_reason=length")]
        try:
            city = json.loads(resp.text or "")["city"]
        except (ValueError, KeyError, TypeError) as exc:
            return [rejected(out_id, f"invalid_json: {exc}")]
        return [ok(out_id, city=city, pick=self.ctx.rng(row["id"]).random())]


def handler(request: ChatRequest) -> Any:
    q = request.messages[-1]["content"].split(": ", 1)[1]
    return {"казань": '{"city": "Казань"}', "проза": "Конечно! Вот ответ: Казань",
            "обрыв": {"content": '{"city": "Каз', "finish_reason": "length"},
            "сбой": llm_error("connection"), "плохой": llm_error("context_length")}[q]


def rows(*qs: str, **extra: Any) -> list[Row]:
    return [{"id": f"r{i}", "status": "ok", "q": q, **extra} for i, q in enumerate(qs)]


async def test_run_stage_records_rejections_and_leaves_outages_pending():
    llm = ScriptedLLM(handler, config=LLMConfig(max_retries=1))
    async with stage_context(llm=llm, rows={"up": rows("казань", "проза", "обрыв", "сбой", "плохой")}) as ctx:
        result = await run_stage(GuessStage, {"input": "up"}, ctx)
    assert result.reasons() == {"invalid_json": 1, "truncated": 1, "llm_error": 1}
    assert result.pending == ["r3"]  # connection error after retries: nothing written, asked again next run
    assert [r["input_id"] for r in result.rows] == ["r0", "r1", "r2", "r4"]
    [good] = result.ok
    assert good["city"] == "Казань" and good["llm_backend"] == "scripted"
    assert result.by_id(stable_id("r4", "guess"))["reason"] == "llm_error: context_length"
    assert result.stats.pending == 1 and result.stats.processed == 4
    assert {r.meta["stage"] for r in llm.requests} == {"test.harness_guess"}


async def test_rejection_rows_carry_the_raw_answer_that_caused_them():
    async with stage_context(llm=ScriptedLLM(handler), rows={"up": rows("проза")}) as ctx:
        result = await run_stage(GuessStage, {"input": "up"}, ctx)
    assert result.rejected[0]["raw_excerpt"] == "Конечно! Вот ответ: Казань"


async def test_a_stage_exception_raises_in_strict_mode_and_is_never_a_row_otherwise():
    inputs = rows("казань") + [{"id": "boom", "status": "ok", "q": "x", "explode": True}]
    async with stage_context(llm=ScriptedLLM(handler), rows={"up": inputs}) as ctx:
        with pytest.raises(StageInternalError, match="boom") as info:
            await run_stage(GuessStage, {"input": "up"}, ctx)
        assert isinstance(info.value.__cause__, ValueError)
    async with stage_context(llm=ScriptedLLM(handler), rows={"up": inputs}) as ctx:
        result = await run_stage(GuessStage, {"input": "up"}, ctx, strict=False)
    [bug] = result.failures
    assert bug.item_id == "boom" and bug.kind == "bug" and bug.error.startswith("ValueError: stage bug")
    assert "boom" not in {r.get("input_id") for r in result.rows}  # nothing is written for it


async def test_an_empty_answer_becomes_no_output():
    async with stage_context(rows={"up": [{"id": "n", "q": "", "nothing": True}]}) as ctx:
        result = await run_stage(GuessStage, {"input": "up"}, ctx)
    assert result.reasons() == {"no_output": 1}


async def test_resume_and_max_items_follow_the_runner():
    async with stage_context(llm=ScriptedLLM(handler), rows={"up": rows("казань", "казань", "казань")}) as ctx:
        result = await run_stage(GuessStage, {"input": "up", "max_items": 2}, ctx, done={"r0"})
    assert [r["input_id"] for r in result.rows] == ["r1"] and result.stats.skipped == 1


async def test_gated_rows_drop_rejections_and_apply_the_pipeline_gates():
    register_gate_group("harness_test", _Band, _band)
    up = [{"id": "a", "status": "ok", "q": "казань", "harness_score": 0.9},
          {"id": "b", "status": "rejected", "q": "казань", "harness_score": 0.9},
          {"id": "c", "status": "ok", "q": "казань", "harness_score": 0.1}]
    pipeline = PipelineConfig(name="t", stages=[], filters={"harness_test": {"min": 0.5}})
    ctx = stage_context(rows={"up": up}, pipeline=pipeline)
    assert [r["id"] for r in ctx.iter_rows("up")] == ["a"]
    assert [r["id"] for r in ctx.iter_rows("up", gated=False)] == ["a", "b", "c"]
    assert list(ctx.iter_rows("up", columns=["id"])) == [{"id": "a"}]
    loose = stage_context(rows={"up": up}, pipeline=PipelineConfig(name="t", stages=[],
                                                                 filters={"harness_test": {"min": 0.0}}))
    assert loose.count_rows("up") == 2
    with pytest.raises(KeyError, match="rows="):
        list(ctx.iter_rows("missing"))


class _Band(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min: float = Field(default=0.0, description="Rows with harness_score below are dropped.")


def _band(p: _Band) -> list[GatePredicate]:
    return [GatePredicate("low_harness_score", pl.col("harness_score") >= p.min, ("harness_score",))]


async def test_rows_of_a_table_all_have_its_columns():
    ctx = stage_context(rows={"up": [{"id": "a", "x": 1}, {"id": "b", "y": "z"}]})
    assert list(ctx.iter_rows("up")) == [{"id": "a", "x": 1, "y": None}, {"id": "b", "x": None, "y": "z"}]


async def test_rng_is_the_runners_per_item_rng(tmp_path: Path):
    async with stage_context(llm=ScriptedLLM(handler), rows={"up": rows("казань")}, seed=7) as ctx:
        result = await run_stage(GuessStage, {"input": "up", "name": "guess"}, ctx)
    assert result.ok[0]["pick"] == item_rng(7, "guess", "r0").random()


async def test_resources_reports_and_stage_dirs(tmp_path: Path):
    class Pool:
        closed = False

        def close(self) -> None:
            self.closed = True

    given, made = Pool(), []
    ctx = stage_context(resources={"sandbox": given}, run_dir=tmp_path)
    assert ctx.resource("sandbox", lambda: pytest.fail("given resources are not rebuilt")) is given
    other = ctx.resource("embedder", lambda: made.append(Pool()) or made[-1])
    assert ctx.resource("embedder", Pool) is other and len(made) == 1
    ctx.report("sandbox_isolation", "rlimits")
    assert ctx.reports == {"sandbox_isolation": "rlimits"}
    assert ctx.stage_dir("topics") == tmp_path / "stages" / "topics" and (tmp_path / "stages" / "topics").is_dir()
    await ctx.aclose()
    assert given.closed and other.closed and not ctx.resources


class CollectConfig(StageConfig):
    kind: str = "test.harness_collect"


class CollectStage(Stage):
    kind = "test.harness_collect"
    Config = CollectConfig
    global_stage = True

    async def run_all(self, rows):  # type: ignore[no-untyped-def, override]
        ids = sorted(r["id"] for r in rows)
        yield [ok(stable_id(ids), n=len(ids))]


async def test_global_stages_run_all_over_the_gated_input():
    ctx = stage_context(rows={"up": rows("a", "b") + [{"id": "x", "status": "rejected", "q": "c"}]})
    result = await run_stage(CollectStage, {"input": "up"}, ctx)
    [row] = result.rows
    assert row["n"] == 2 and row["status"] == "ok" and row["llm_backend"] == "scripted"


async def test_a_real_engine_can_stand_behind_the_context():
    from fabrika.llm.factory import build_engine

    engine = build_engine(LLMConfig(backend="sim"))
    ctx = stage_context(llm=engine, rows={"up": rows("казань")})
    result = await run_stage(GuessStage, {"input": "up"}, ctx)
    assert result.rows[0]["llm_backend"] == "sim" and result.reasons() == {"invalid_json": 1}
    await engine.aclose()


def test_errors_keep_their_kind_and_http_status():
    for kind, status in [("rate_limit", 429), ("server", 503), ("context_length", 400), ("timeout", None)]:
        err = llm_error(kind)
        assert isinstance(err, LLMError) and err.kind == kind and err.status_code == status


async def test_a_server_that_ignores_n_is_a_retried_server_error_in_the_engine():
    llm = ScriptedLLM(lambda r: f"один из {r.n}", split_samples=False, config=LLMConfig(max_retries=1))
    resp = await llm.complete_one(ask("x", n=3))
    assert resp.error is not None and resp.error.kind == "server" and "n=3" in resp.error.message
    assert [r.n for r in llm.requests] == [3, 3]  # asked again once, then failed
    honest = ScriptedLLM(lambda r: f"образец {r.sample_index}")
    resp = await honest.complete_one(ask("x", n=3))
    assert [c.content for c in resp.choices] == ["образец 0", "образец 1", "образец 2"] and honest.calls == 1


def test_relative_paths_resolve_against_the_config_directory(tmp_path: Path):
    ctx = stage_context(base_dir=tmp_path)
    assert ctx.pipeline.resolve_path("seeds/a.jsonl") == tmp_path / "seeds" / "a.jsonl"
    assert stage_context().pipeline.resolve_path("/abs/x") == Path("/abs/x")


async def test_each_run_of_a_stage_counts_afresh_and_the_instance_is_left_as_it_was():
    ctx = stage_context(llm=ScriptedLLM(handler), rows={"up": rows("казань", "проза")})
    stage = GuessStage(GuessConfig(input="up"), ctx)
    first = await run_stage(stage)
    second = await run_stage(stage)
    assert first.stats.processed == second.stats.processed == 2 and second.stats.llm.requests == 2
    assert "process" not in vars(stage)  # the capturing wrapper is gone
    await ctx.aclose()


async def test_stored_rows_join_the_annotators_scores_and_are_gated_on_them(tmp_path: Path):
    register_gate_group("harness_test", _Band, _band)
    up = [{"id": i, "status": "ok", "q": "казань"} for i in ("a", "b", "c")]
    judge = [{"id": "a", "status": "ok", "reason": None, "harness_score": 0.9},
             {"id": "b", "status": "ok", "reason": None, "harness_score": 0.1},
             {"id": "c", "status": "rejected", "reason": "judge_failed: unparsable", "harness_score": None}]
    pipeline = PipelineConfig(name="t", stages=[], filters={"harness_test": {"min": 0.5}})
    ctx = stage_context(rows={"up": up, "judge": judge}, annotators={"up": ["judge"]}, pipeline=pipeline,
                        run_dir=tmp_path)
    assert [(r["id"], r["harness_score"]) for r in ctx.iter_rows("up")] == [("a", 0.9)]
    everything = {r["id"]: r for r in ctx.iter_rows("up", gated=False)}
    assert everything["c"]["status__judge"] == "rejected" and everything["c"]["status"] == "ok"
    assert (tmp_path / "stages" / "up").is_dir()  # real shards of a real run store
    result = await run_stage(GuessStage, {"input": "up"}, stage_context(
        llm=ScriptedLLM(handler), rows={"up": up, "judge": judge}, annotators={"up": ["judge"]},
        pipeline=pipeline, run_dir=tmp_path / "r2"))
    assert [r["input_id"] for r in result.rows] == ["a"]


def test_stored_rows_read_back_as_a_run_reads_them(tmp_path: Path):
    up = [{"id": "b", "tags": {"город": "Тверь"}}, {"id": "a", "n": 1}]
    stored = stage_context(rows={"up": up}, stored=True, run_dir=tmp_path)
    assert list(stored.iter_rows("up")) == [{"id": "a", "n": 1, "tags": None},
                                            {"id": "b", "n": None, "tags": '{"город":"Тверь"}'}]
    by_id = {r["id"]: r for r in stored.iter_rows("up", gated=False)}
    assert json.loads(by_id["b"]["tags"]) == {"город": "Тверь"}  # nested values come back as JSON text
    assert by_id["a"]["tags"] is None and by_id["b"]["n"] is None  # every row has the table's columns
    assert [r["id"] for r in stored.iter_rows("up", gated=False)] == ["a", "b"]  # shard content is in id order


async def test_a_partial_config_keeps_the_quick_retries_and_the_scripted_model():
    llm = ScriptedLLM(sequence(llm_error("rate_limit", retry_after=30), "ok"), config=LLMConfig(max_retries=1))
    resp = await asyncio.wait_for(llm.complete_one(ask("x")), timeout=5)  # Retry-After is not waited out
    assert resp.text == "ok" and llm.requests[0].model == "scripted"
    own = ScriptedLLM(lambda r: "ok", config=LLMConfig(model="qwen3"))
    await own.complete_one(ask("x"))
    assert own.requests[0].model == "qwen3"
