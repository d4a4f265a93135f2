"""Difficulty pass rate through an LLM client, and the gate groups applied by the real gates module."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Sequence

import polars as pl
import pytest

from fabrika.filters import gates as _gates  # noqa: F401 - registers the groups
from fabrika.filters.difficulty import DifficultyConfig, DifficultyScorer, pass_rate, resolve_reward
from fabrika.llm.types import ChatRequest, ChatResponse, Choice
from fabrika.errors import LLMError
from fabrika.pipeline.gates import apply_gates, parse_set


class ScriptedLLM:
    """Answers sample i with a correct call when i is in ``good``; records the requests."""

    def __init__(self, good: set[int], fail: set[int] = frozenset()) -> None:
        self.good, self.fail, self.requests = good, fail, []

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.requests.extend(requests)
        out = []
        for r in requests:
            if r.sample_index in self.fail:
                out.append(ChatResponse(error=LLMError("timeout", "slow")))
                continue
            city = "Казань" if r.sample_index in self.good else "Москва"
            call = {"id": "c", "name": "get_weather", "arguments": json.dumps({"city": city}, ensure_ascii=False)}
            out.append(ChatResponse(choices=(Choice(content="", tool_calls=(call,)),), backend="sim"))
        return out


ROW = {
    "id": "s1", "expert": "fc", "lang": "ru", "target_type": "tool_call",
    "prompt": json.dumps([{"role": "user", "content": "Погода в Казани?"}], ensure_ascii=False),
    "tools": json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]),
    "ground_truth": json.dumps({"calls": [{"name": "get_weather", "arguments": {"city": "Казань"}}]},
                               ensure_ascii=False),
}


async def test_pass_rate_over_k_samples_with_fc_reward():
    llm = ScriptedLLM(good={0, 3, 5}, fail={7})
    stage = DifficultyScorer(DifficultyConfig(k=8), SimpleNamespace(llm=llm))
    (out,) = await stage.process(ROW)
    assert out == {"id": "s1", "status": "ok", "reason": None, "difficulty_pass_rate": 3 / 8,
                   "difficulty_k": 8, "difficulty_errors": 1}
    assert [r.sample_index for r in llm.requests] == list(range(8))
    assert {r.tag for r in llm.requests} == {"filter.difficulty"} and llm.requests[0].tools[0]["function"]["name"]


async def test_reward_is_pluggable_per_expert():
    seen = []

    def always(prompts, completions, **cols):
        seen.append(cols["target_type"])
        return [1.0] * len(completions)

    responses = await ScriptedLLM(good=set()).complete([ChatRequest(messages=(), sample_index=i) for i in range(4)])
    assert pass_rate(ROW, responses, always)["difficulty_pass_rate"] == 1.0 and seen == [["tool_call"] * 4]
    with pytest.raises(ValueError, match="module:function"):
        resolve_reward("nocolon")
    stage = DifficultyScorer(DifficultyConfig(k=2), SimpleNamespace(llm=ScriptedLLM(set())))
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
    assert kept.collect()["id"].to_list() == ["a"]
    assert funnel["dropped_language.min_confidence"] == 1  # b
    assert funnel["dropped_language.require_match"] == 1  # c
    assert funnel["dropped_language.max_homoglyph_share"] == 1  # d
    assert funnel["dropped_dedup.keep_representatives_only"] == 1  # e
    assert funnel["dropped_difficulty.max_pass_rate"] == 1  # f (unscored language is not a drop)
    relaxed = parse_set(["language.min_confidence=0.2", "language.max_homoglyph_share=0.5",
                         "difficulty.max_pass_rate=1.0", "dedup.keep_representatives_only=false",
                         "language.allowed=[ru]"])
    kept, funnel = apply_gates(_scored(), relaxed)
    assert kept.collect()["id"].to_list() == ["a", "b", "d", "e", "f"] and funnel["dropped_language.allowed"] == 1


class TextLLM:
    """Answers sample i with ``answers[i]``."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        return [ChatResponse(choices=(Choice(content=self.answers[r.sample_index]),)) for r in requests]


async def test_if_rows_use_the_if_verifier_reward():
    spec = {"id": "ru.punct.no_commas@1a2b", "library_id": "ru.punct.no_commas", "params": {}}
    row = {"id": "q1", "expert": "if", "lang": "ru", "target_type": "text",
           "prompt": json.dumps([{"role": "user", "content": "Опиши кота. Не используйте запятых."}], ensure_ascii=False),
           "ground_truth": json.dumps({"constraints": [spec]}, ensure_ascii=False)}
    answers = ["Кот спит.", "Кот спит, мурлычет.", "Кот ест.", "Кот, кошка."]
    stage = DifficultyScorer(DifficultyConfig(k=4), SimpleNamespace(llm=TextLLM(answers)))
    (out,) = await stage.process(row)
    assert out["difficulty_pass_rate"] == 0.5 and out["difficulty_errors"] == 0
