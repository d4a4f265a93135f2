"""The cache key's JSON text is the stdlib's, byte for byte, on the orjson path and off it."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from fabrika.llm import canonical
from fabrika.llm.cache import content_key, request_key
from fabrika.llm.types import ChatRequest

_stdlib = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode


def _ref(value: object) -> bytes:
    return _stdlib(value).encode("utf-8")


_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(_json)
def test_any_json_data_encodes_exactly_as_the_stdlib(value: object) -> None:
    assert canonical.canonical_bytes(value) == _ref(value)


def test_every_character_and_the_float_forms_orjson_writes_differently() -> None:
    text = "".join(chr(c) for c in range(0x3000)) + "\u2028\u2029\ufeff\U0001f600\U0010ffff"
    assert canonical.canonical_bytes({"t": text}) == _ref({"t": text})
    for x in (1e-05, 1e-07, 1e16, 1.5e300, 5e-324, -2.5e-9, 0.0001, 9999999999999998.0, -0.0, 0.7,
              math.nan, math.inf, -math.inf):
        assert canonical.canonical_bytes([x, {"v": x}]) == _ref([x, {"v": x}]), x
    assert canonical.plain([0.7, 1.0, 0.0001]) and not canonical.plain([1e-5]) and not canonical.plain(1e16)


def test_what_orjson_would_write_its_own_way_takes_the_stdlib() -> None:
    class Colour(enum.Enum):
        RED = "red"

    @dataclasses.dataclass
    class Point:
        x: int

    class Name(str):
        pass

    for value in ({1: "int key"}, {"e": Colour.RED}, [Point(1)], [Name("x")], {"big": 1 << 80},
                  [{"a": {"b": [1, 2, {"c": 3}]}}] * 2, {"b": 1, "a": 2, "ä": 3, "Z": 4}):
        assert canonical.canonical_bytes(value) == _ref(value), value
    assert not canonical.plain({"e": Colour.RED}) and not canonical.plain({1: "x"})


def test_request_keys_are_unchanged() -> None:
    """The key and the sim's content key hash the stdlib text: old caches and simulated data still match."""
    import hashlib

    req = ChatRequest(messages=({"role": "user", "content": "Привет, нужна бронь на 19:00"},),
                      tools=({"type": "function", "function": {"name": "book", "parameters": {
                          "type": "object", "properties": {"n": {"type": "integer", "minimum": 1e-05}}}}},),
                      temperature=0.7, max_tokens=64, seed=3)
    fields = (req.model, req.messages, req.tools, req.tool_choice, req.temperature, req.top_p, req.max_tokens,
              req.n, req.seed, req.sample_index, req.response_format, req.stop, req.extra_body)
    assert request_key(req, scope="openai") == hashlib.sha256(_ref((2, "openai", *fields))).hexdigest()
    assert content_key(req) == hashlib.sha256(_ref((1, *fields))).hexdigest()


def test_the_engines_request_copy_is_dataclasses_replace() -> None:
    from fabrika.llm.engine import _replaced

    assert not hasattr(ChatRequest, "__post_init__")  # _replaced skips __init__: it must stay a plain dataclass
    meta = {"sim_error_rate": 0.1}
    r = ChatRequest(messages=({"role": "user", "content": "x"},), temperature=0.2, tag="t", meta=meta,
                    routing_key="k", sample_index=3)
    for changes in ({"model": "m"}, {"model": "m", "seed": 7, "max_tokens": 9, "extra_body": {"a": 1}}, {"top_p": 0.5},
                    {"meta": {"stage": "s"}}, {"tag": None, "routing_key": None, "sample_index": 0},
                    {f.name: f"v{i}" for i, f in enumerate(dataclasses.fields(ChatRequest))}):
        got, want = _replaced(r, changes), dataclasses.replace(r, **changes)
        assert got == want and repr(got) == repr(want)
        assert got.meta is want.meta and got.messages is want.messages  # no field copied, none rebuilt
        assert all(getattr(got, f.name) is getattr(want, f.name) for f in dataclasses.fields(ChatRequest))


_texts = st.one_of(st.none(), st.text(max_size=40))
_calls = st.lists(st.fixed_dictionaries({"id": st.text(max_size=6), "name": st.text(max_size=8),
                                         "arguments": st.text(max_size=20)}), max_size=2)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_texts, _calls, st.sampled_from(["stop", "length", "tool_calls"]), _texts),
                min_size=1, max_size=3),
       st.integers(min_value=0, max_value=1 << 70), st.text(max_size=8))
def test_cached_answers_are_written_as_the_stdlib_wrote_them(choices: list, tokens: int, model: str) -> None:
    """The cache's (and the request log's) answer text is exactly ``json.dumps(ensure_ascii=False, compact)``."""
    from fabrika.llm.cache import decode_response, encode_response
    from fabrika.llm.types import ChatResponse, Choice, Usage

    resp = ChatResponse(choices=tuple(Choice(content=c, tool_calls=tuple(t), finish_reason=f, reasoning=r)
                                      for c, t, f, r in choices), usage=Usage(tokens, 3), model=model, backend="openai")
    want = json.dumps({"c": [[c.content, list(c.tool_calls), c.finish_reason, c.reasoning] for c in resp.choices],
                       "u": [tokens, 3], "m": model, "b": "openai"}, ensure_ascii=False, separators=(",", ":"))
    assert encode_response(resp) == want
    back = decode_response(want)
    assert back.choices == resp.choices and back.usage == resp.usage and back.cached


def test_prepare_with_is_prepare_of_the_replaced_request() -> None:
    """StageLLM's one-copy stamp: the engine's defaults and the changes, as two copies would make them."""
    from fabrika.llm.config import LLMConfig
    from fabrika.llm.engine import LLMEngine
    from fabrika.llm.sim import SimBackend

    base = ChatRequest(messages=({"role": "user", "content": "x"},), tag="t", meta={"k": 1}, temperature=0.1)
    for cfg in (LLMConfig(model="m", max_tokens=9, seed=4), LLMConfig(model="m", extra_body={"a": 1}), LLMConfig()):
        engine = LLMEngine(SimBackend(), config=cfg)
        for request in (base, dataclasses.replace(base, model="own", max_tokens=1, extra_body={"b": 2})):
            for changes in ({"meta": {"k": 1, "stage": "s"}}, {"max_tokens": 3, "meta": {}}):
                got = engine.prepare_with(request, changes)
                want = engine.prepare(dataclasses.replace(request, **changes))
                assert got == want and got.meta == want.meta and got.messages is request.messages
                assert engine.prepare(got) is got  # complete() sends it as it is
        asyncio.run(engine.aclose())  # releases the engine's GC tuning
