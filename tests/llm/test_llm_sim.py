"""The sim backend: determinism, responder registry, schema-valid output, injected errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest

from fabrika.llm import ChatRequest, LLMConfig, build_engine, register_sim_responder, unregister_sim_responder
from fabrika.llm.sim import SimBackend, find_sim_responder
from fabrika.llm.types import Choice
from tests.llm.llm_helpers import req

PARAMS = {"type": "object", "properties": {
    "city": {"type": "string", "minLength": 2}, "unit": {"type": "string", "enum": ["c", "f"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}, "tags": {"type": "array", "items": {"type": "string"}},
    "when": {"$ref": "#/$defs/when"}, "flag": {"type": ["boolean", "null"]},
    "filter": {"anyOf": [{"type": "number", "maximum": 5}, {"type": "string", "maxLength": 3}]}},
    "required": ["city", "days", "when"], "additionalProperties": False,
    "$defs": {"when": {"type": "object", "properties": {"date": {"type": "string", "format": "date"}},
                       "required": ["date"]}}}
TOOLS = ({"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}},
         {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}})


@pytest.fixture
def sim() -> SimBackend:
    return SimBackend(seed=0)


async def test_same_request_same_answer_and_seed_changes_it(sim: SimBackend) -> None:
    r = req("расскажи", model="sim", temperature=1.0)
    a, b = await sim.send(r), await sim.send(r)
    assert a.choices == b.choices and a.backend == "sim" and a.text.startswith("[sim]")
    other = await SimBackend(seed=1).send(r)
    assert other.text != a.text
    assert (await sim.send(ChatRequest(messages=r.messages, sample_index=1))).text != a.text


async def test_tool_call_args_are_schema_valid(sim: SimBackend) -> None:
    names = set()
    for i in range(40):
        resp = await sim.send(req(f"погода {i}", tools=TOOLS))
        [call] = resp.choices[0].tool_calls
        names.add(call["name"])
        schema = PARAMS if call["name"] == "get_weather" else TOOLS[1]["function"]["parameters"]
        jsonschema.validate(json.loads(call["arguments"]), schema)
        assert resp.choices[0].finish_reason == "tool_calls"
    assert names == {"get_weather", "noop"}
    forced = await sim.send(req("x", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "noop"}}))
    assert forced.choices[0].tool_calls[0]["name"] == "noop"
    text = await sim.send(req("x", tools=TOOLS, tool_choice="none"))
    assert text.choices[0].tool_calls == () and text.text.startswith("[sim]")


async def test_json_schema_response_format_is_valid(sim: SimBackend) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "schema": PARAMS}}
    for i in range(20):
        jsonschema.validate(json.loads((await sim.send(req(f"q{i}", response_format=fmt))).text), PARAMS)
    assert isinstance(json.loads((await sim.send(req("o", response_format={"type": "json_object"}))).text), dict)


async def test_responder_longest_prefix_wins_and_n(sim: SimBackend) -> None:
    register_sim_responder("t_fc", lambda r, rng: "общий")
    register_sim_responder("t_fc.user", lambda r, rng: Choice(content=f"user {rng.randint(0, 10**9)}"))
    try:
        assert (await sim.send(req("x", tag="t_fc.planner"))).text == "общий"
        many = await sim.send(req("x", tag="t_fc.user.turn", n=3))
        texts = [c.content for c in many.choices]
        assert len(set(texts)) == 3 and all(t.startswith("user ") for t in texts)
        assert find_sim_responder("t_if") is None
        register_sim_responder("t_bad", lambda r, rng: 42)  # type: ignore[arg-type, return-value]
        with pytest.raises(TypeError, match="t_bad"):
            await sim.send(req("x", tag="t_bad"))
    finally:
        for p in ("t_fc", "t_fc.user", "t_bad"):
            unregister_sim_responder(p)


def test_register_rejects_non_callables() -> None:
    with pytest.raises(TypeError):
        register_sim_responder("x", "not callable")  # type: ignore[arg-type]


async def test_error_rate_is_deterministic_and_retried_by_engine() -> None:
    async def outcomes() -> list[tuple[bool, int]]:
        cfg = LLMConfig(sim={"error_rate": 0.4, "seed": 5}, max_retries=8, backoff_initial_s=0,
                        backoff_jitter_s=0, cache={"enabled": False})
        async with build_engine(cfg, None) as eng:
            resps = await eng.complete([req(f"q{i}") for i in range(100)])
            t = eng.accounting.totals()
            assert t["retries"] == sum(r.attempts - 1 for r in resps) > 0
        return [(r.ok, r.attempts) for r in resps]

    a = await outcomes()
    assert a == await outcomes()
    assert all(ok for ok, _ in a) and any(n > 1 for _, n in a)


async def test_no_retries_surface_injected_errors() -> None:
    cfg = LLMConfig(sim={"error_rate": 1.0}, max_retries=0, cache={"enabled": False})
    async with build_engine(cfg, None) as eng:
        resp = await eng.complete_one(req("x"))
    assert resp.error is not None and resp.error.retryable and "sim: injected" in resp.error.message


async def test_sim_engine_with_cache_is_stable(tmp_path: Path) -> None:
    async with build_engine(LLMConfig(), tmp_path) as eng:
        first = await eng.complete([req(f"q{i}") for i in range(5)])
    async with build_engine(LLMConfig(), tmp_path) as eng:
        second = await eng.complete([req(f"q{i}") for i in range(5)])
    assert [r.text for r in first] == [r.text for r in second] and all(r.cached for r in second)
    assert (tmp_path / "cache.sqlite").exists()


def test_schema_gen_handles_bounds_and_rejects_false() -> None:
    from fabrika.llm.schema_gen import generate_instance

    rng = random.Random(0)
    for _ in range(50):
        v = generate_instance({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 6}, rng)
        assert 3 < v < 6
        s = generate_instance({"type": "string", "maxLength": 4}, rng)
        assert len(s) <= 4
    with pytest.raises(ValueError):
        generate_instance(False, rng)


async def test_responder_bug_through_engine_is_a_logged_failure(caplog: pytest.LogCaptureFixture) -> None:
    def broken(request: ChatRequest, rng: random.Random) -> str:
        raise KeyError("missing field")

    register_sim_responder("t_broken", broken)
    try:
        async with build_engine(LLMConfig(), None) as eng:
            ok, bad = await eng.complete([req("fine"), req("x", tag="t_broken.role")])
    finally:
        unregister_sim_responder("t_broken")
    assert ok.ok and not bad.ok and isinstance(bad.error.__cause__, KeyError)
    assert "t_broken.role" in caplog.text and "KeyError" in caplog.text
