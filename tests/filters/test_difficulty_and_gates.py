"""Difficulty pass rate through an LLM client, and the gate groups applied by the real gates module."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest

from fabrika.filters import gates as _gates  # noqa: F401 - registers the groups
from fabrika.filters.difficulty import DifficultyConfig, DifficultyScorer, pass_rate, resolve_reward
from fabrika.llm.config import LLMConfig
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.gates import apply_gates, parse_set
from fabrika.testing import ScriptedLLM, llm_error, stage_context


def weather_llm(good: set[int], fail: set[int] = frozenset()) -> ScriptedLLM:
    """Sample i answers with a correct call when i is in ``good``, else a wrong city; a timeout when in ``fail``."""
    def handler(r: ChatRequest) -> Any:
        if r.sample_index in fail:
            return llm_error("timeout")
        city = "Казань" if r.sample_index in good else "Москва"
        return {"content": "", "tool_calls": [{"id": "c", "name": "get_weather", "arguments": {"city": city}}]}

    return ScriptedLLM(handler, config=LLMConfig(max_retries=1))


ROW = {
    "id": "s1", "expert": "fc", "lang": "ru", "target_type": "tool_call",
    "prompt": json.dumps([{"role": "user", "content": "Погода в Казани?"}], ensure_ascii=False),
    "tools": json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]),
    "ground_truth": json.dumps({"calls": [{"name": "get_weather", "arguments": {"city": "Казань"}}]},
                               ensure_ascii=False),
}


async def test_pass_rate_over_k_samples_with_fc_reward():
    llm = weather_llm(good={0, 3, 5})
    stage = DifficultyScorer(DifficultyConfig(k=8), stage_context(llm))
    (out,) = await stage.process(ROW)
    assert out == {"id": "s1", "status": "ok", "reason": None, "difficulty_pass_rate": 3 / 8,
                   "difficulty_k": 8, "difficulty_errors": 0}
    assert [r.sample_index for r in llm.requests] == list(range(8))
    assert {r.tag for r in llm.requests} == {"filter.difficulty"} and llm.requests[0].tools[0]["function"]["name"]


async def test_a_failed_request_leaves_the_pass_rate_unmeasured_never_zero():
    for fail in ({7}, set(range(8))):  # one timeout, or an outage
        stage = DifficultyScorer(DifficultyConfig(k=8), stage_context(weather_llm(good=set(), fail=fail)))
        (out,) = await stage.process(ROW)
        assert out["difficulty_pass_rate"] is None and out["difficulty_errors"] == len(fail)
    kept, funnel = apply_gates(pl.LazyFrame({"id": ["x"], "status": ["ok"], "difficulty_pass_rate": [None],
                                             "difficulty_errors": [8]}, schema_overrides={
        "difficulty_pass_rate": pl.Float64}), {})
    assert kept.collect()["id"].to_list() == ["x"]  # not dropped as "never solved"
    assert funnel["kept_null_difficulty.min_pass_rate_exclusive"] == 1  # and not silently kept either


async def test_prompt_with_earlier_tool_calls_goes_out_in_wire_format():
    history = [{"role": "user", "content": "Погода в Казани?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "c1", "name": "get_weather", "arguments": {"city": "Казань"}}], "train": False},
               {"role": "tool", "content": "{\"t\": 3}", "tool_call_id": "c1", "name": "get_weather"},
               {"role": "user", "content": "А в Москве?"}]
    llm = weather_llm(good=set())
    stage = DifficultyScorer(DifficultyConfig(k=1), stage_context(llm))
    await stage.process({**ROW, "prompt": json.dumps(history, ensure_ascii=False)})
    sent = llm.requests[0].messages
    call = sent[1]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Казань"}  # a JSON string, as the API requires
    assert "train" not in sent[1] and sent[2]["tool_call_id"] == "c1"


async def test_reward_is_pluggable_per_expert():
    seen = []

    def always(prompts, completions, **cols):
        seen.append(cols["target_type"])
        return [1.0] * len(completions)

    responses = await weather_llm(good=set()).complete([ChatRequest(messages=(), sample_index=i) for i in range(4)])
    assert pass_rate(ROW, responses, always)["difficulty_pass_rate"] == 1.0 and seen == [["tool_call"] * 4]
    with pytest.raises(ValueError, match="module:function"):
        resolve_reward("nocolon")
    stage = DifficultyScorer(DifficultyConfig(k=2), stage_context(weather_llm(set())))
    (out,) = await stage.process({**ROW, "expert": "general"})  # no reward for the expert: not scored
    assert out["difficulty_pass_rate"] is None and out["difficulty_k"] == 0


def _scored() -> pl.LazyFrame:
    return pl.LazyFrame({
        "id": ["a", "b", "c", "d", "e", "f"],
        "status": ["ok"] * 6,
        "lang_detected": ["ru", "ru", "en", "ru", "ru", None],
        "lang_confidence": [0.99, 0.3, 0.99, 0.99, 0.99, None],
        "lang_matches": [True, True, False, True, True, None],
        "homoglyph_share": [0.0, 0.0, 0.0, 0.2, 0.0, None],
        "dup_is_representative": [True, True, True, True, False, True],
        "difficulty_pass_rate": [0.5, 0.5, 0.5, 0.5, 0.5, 1.0],
        "len_total_tokens": [10, 10, 10, 10, 10, 10],
    })


def test_gate_funnel_with_defaults_and_overrides():
    kept, funnel = apply_gates(_scored(), {})
    assert kept.collect()["id"].to_list() == ["a", "f"]
    assert funnel["dropped_language.min_confidence"] == 1  # b
    assert funnel["dropped_language.require_match"] == 1  # c
    assert funnel["dropped_language.max_homoglyph_share"] == 1  # d
    assert funnel["dropped_dedup.keep_representatives_only"] == 1  # e
    # f: too easy for GRPO, kept for SFT (the band is scoped to GRPO exports); unscored language is not a drop
    assert funnel["grpo.dropped_difficulty.max_pass_rate"] == 1 and "dropped_difficulty.max_pass_rate" not in funnel
    assert funnel["kept_null_language.min_confidence"] == 1  # f has no language score: counted, not hidden
    _, everywhere = apply_gates(_scored(), {"difficulty": {"apply_to": ["sft", "grpo"]}})
    assert everywhere["dropped_difficulty.max_pass_rate"] == 1
    relaxed = parse_set(["language.min_confidence=0.2", "language.max_homoglyph_share=0.5",
                         "difficulty.max_pass_rate=1.0", "dedup.keep_representatives_only=false",
                         "language.allowed=[ru]"])
    kept, funnel = apply_gates(_scored(), relaxed)
    assert kept.collect()["id"].to_list() == ["a", "b", "d", "e", "f"] and funnel["dropped_language.allowed"] == 1


@pytest.mark.parametrize("band", [{"min_pass_rate_exclusive": 0.8, "max_pass_rate": 0.2},
                                  {"min_pass_rate_exclusive": 0.5, "max_pass_rate": 0.5}])
def test_inverted_or_empty_difficulty_band_is_a_config_error(band):
    from fabrika.errors import ConfigError

    with pytest.raises(ConfigError, match="empty or inverted"):
        apply_gates(_scored(), {"difficulty": band})
    with pytest.raises(ConfigError, match="empty or inverted"):
        parse_set([f"difficulty.{k}={v}" for k, v in band.items()])


async def test_if_rows_use_the_if_verifier_reward():
    spec = {"id": "ru.punct.no_commas@1a2b", "library_id": "ru.punct.no_commas", "params": {}}
    row = {"id": "q1", "expert": "if", "lang": "ru", "target_type": "text",
           "prompt": json.dumps([{"role": "user", "content": "Опиши кота. Не используйте запятых."}], ensure_ascii=False),
           "ground_truth": json.dumps({"constraints": [spec]}, ensure_ascii=False)}
    answers = ["Кот спит.", "Кот спит, мурлычет.", "Кот ест.", "Кот, кошка."]
    stage = DifficultyScorer(DifficultyConfig(k=4), stage_context(ScriptedLLM(lambda r: answers[r.sample_index])))
    (out,) = await stage.process(row)
    assert out["difficulty_pass_rate"] == 0.5 and out["difficulty_errors"] == 0
