"""Property test: every generated instance validates against its schema."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from fabrika.llm.schema_gen import generate_instance

names = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    integer = st.tuples(st.integers(-50, 50), st.integers(0, 50)).map(
        lambda t: {"type": "integer", "minimum": t[0], "maximum": t[0] + t[1]})
    number = st.tuples(st.floats(-10, 10), st.floats(0.01, 10)).map(
        lambda t: {"type": "number", "minimum": t[0], "maximum": t[0] + t[1]})
    string = st.tuples(st.integers(0, 5), st.integers(5, 40)).map(
        lambda t: {"type": "string", "minLength": t[0], "maxLength": t[1]})
    enum = st.lists(st.one_of(st.integers(), st.text(max_size=5)), min_size=1, max_size=4, unique=True).map(
        lambda v: {"enum": v})
    fmt = st.sampled_from(["date", "date-time", "email"]).map(lambda f: {"type": "string", "format": f})
    return st.one_of(integer, number, string, enum, fmt, st.just({"type": "boolean"}), st.just({"type": "null"}),
                     st.just({"type": ["string", "null"]}))


def _extend(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    obj = st.dictionaries(names, inner, max_size=4).flatmap(
        lambda props: st.sets(st.sampled_from(sorted(props)) if props else st.nothing(), max_size=len(props)).map(
            lambda req: {"type": "object", "properties": props, "required": sorted(req), "additionalProperties": False}))
    arr = st.tuples(inner, st.integers(0, 2), st.integers(0, 3)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1], "maxItems": t[1] + t[2]})
    any_of = st.lists(inner, min_size=1, max_size=3).map(lambda s: {"anyOf": s})
    return st.one_of(obj, arr, any_of)


schemas = st.recursive(_leaf(), _extend, max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(schema=schemas, seed=st.integers(0, 2**32))
def test_generated_instances_validate(schema: dict[str, Any], seed: int) -> None:
    value = generate_instance(schema, random.Random(seed))
    jsonschema.validate(value, schema)
