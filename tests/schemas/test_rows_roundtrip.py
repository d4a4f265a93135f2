"""Record ↔ row round trips are lossless (Cyrillic, nested args, ints vs floats, empty and null)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabrika.schemas import Constraint, Message, Sample, TestCase, Tool, ToolCall, Verifier, from_row, to_row

_text = st.text(alphabet=st.sampled_from(list("абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВЁЯ abcXYZ0123456789«»—,.!?\n\"'\\{}")),
                max_size=30)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=False, allow_infinity=False, width=64), _text)
_json = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_text, inner, max_size=4)), max_leaves=12)
_args = st.dictionaries(st.from_regex(r"[a-zа-я_]{1,8}", fullmatch=True), _json, max_size=5)


@st.composite
def _tools(draw):
    names = draw(st.lists(st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True), min_size=0, max_size=3, unique=True))
    tools = []
    for n in names:
        props = draw(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True),
                                     st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "number"},
                                                      {"type": "object", "properties": {"вложено": {"type": "string"}}},
                                                      {"type": "string", "enum": ["да", "нет"]}]), max_size=3))
        req = draw(st.lists(st.sampled_from(sorted(props)), unique=True)) if props else []
        tools.append(Tool(function={"name": n, "description": draw(_text),
                                    "parameters": {"type": "object", "properties": props, "required": req}}))
    return tools


@st.composite
def _messages(draw):
    msgs = [Message(role="system", content=draw(st.one_of(st.none(), _text)))]
    for _ in range(draw(st.integers(0, 3))):
        msgs.append(Message(role="user", content=draw(_text)))
        calls = draw(st.lists(st.builds(ToolCall, id=st.one_of(st.none(), _text), name=st.just("f"), arguments=_args),
                              max_size=2))
        msgs.append(Message(role="assistant", content=draw(st.one_of(st.none(), _text)), tool_calls=calls or None,
                            flag=draw(st.sampled_from([None, "wrong"]))))
    return msgs


@settings(max_examples=60, deadline=None)
@given(prompt=_messages(), tools=_tools(), gt=st.one_of(st.none(), st.dictionaries(_text, _json, max_size=3)),
       meta=st.dictionaries(_text, _json, max_size=3), args=_args)
def test_sample_roundtrip_through_a_polars_table(prompt, tools, gt, meta, args):
    completion = [Message(role="assistant", tool_calls=[ToolCall(name="f", arguments=args)], train=True)]
    sample = Sample(id="s-1", expert="fc", lang="ru", prompt=prompt, completion=completion, tools=tools,
                    target_type="tool_call", ground_truth=gt, meta=meta)
    row = to_row(sample)
    # through a real table (parquet-compatible column types), then back
    table_row = pl.DataFrame([row]).row(0, named=True)
    back = from_row(Sample, table_row)
    assert back == sample
    # ints stay ints and floats stay floats inside nested arguments
    assert json.loads(row["completion"])[0]["tool_calls"][0]["arguments"] == args
    assert "\\u04" not in row["prompt"], "Cyrillic must be stored as is, not \\u-escaped"


def test_int_and_float_are_not_merged():
    call = ToolCall(name="pay", arguments={"amount": 1, "rate": 1.0, "пусто": "", "ничего": None, "список": []})
    sample = Sample(id="x", expert="fc", lang="ru", prompt=[], completion=[Message(role="assistant", tool_calls=[call])])
    back = from_row(Sample, to_row(sample))
    args = back.completion[0].tool_calls[0].arguments
    assert type(args["amount"]) is int and type(args["rate"]) is float
    assert args["пусто"] == "" and args["ничего"] is None and args["список"] == []


@pytest.mark.parametrize("record", [
    Constraint(id="c1", text="Ответь ровно тремя предложениями.", params={"n": 3}),
    Verifier(id="v1", constraint_id="c1", code="def evaluate(response):\n    return True\n",
             test_cases=[TestCase(response="Да.", label=True), TestCase(response="", label=False)]),
])
def test_other_records_roundtrip(record):
    assert from_row(type(record), to_row(record)) == record


def test_tool_call_parses_string_arguments_and_rejects_non_objects():
    assert ToolCall(name="f", arguments='{"город": "Москва"}').arguments == {"город": "Москва"}
    assert ToolCall.model_validate({"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}).arguments == {"a": 1}
    with pytest.raises(ValueError, match="not valid JSON"):
        ToolCall(name="f", arguments="{oops")
    with pytest.raises(ValueError, match="must be a JSON object"):
        ToolCall(name="f", arguments="[1, 2]")


def test_tool_schema_checks():
    bad = [
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "required"),
        ({"type": "object", "properties": {"u": {"type": "string", "enum": ["c", 1]}}}, "enum value 1"),
        ({"type": "object", "properties": {"n": {"type": "integer", "default": "пять"}}}, "default of 'n'"),
        ({"type": "objekt"}, "not a valid JSON Schema"),
        ({"type": "array"}, "must be 'object'"),
    ]
    for params, needle in bad:
        with pytest.raises(ValueError, match=needle):
            Tool(function={"name": "f", "parameters": params})


def test_wrong_turns_can_never_be_targets():
    with pytest.raises(ValueError, match="never be a training target"):
        Message(role="assistant", content="x", train=True, flag="wrong")
    with pytest.raises(ValueError, match="only assistant"):
        Message(role="user", content="x", train=True)
