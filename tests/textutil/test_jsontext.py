"""dumps_indent1 writes exactly the stdlib's ``json.dumps(..., ensure_ascii=False, indent=1)``."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabrika.textutil.jsontext import dumps_indent1, dumps_sorted_indent2


def _std(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_same_text_as_the_stdlib(value: Any) -> None:
    assert dumps_indent1(value) == _std(value)


@pytest.mark.parametrize("value", [
    {"город": "Санкт-Петербург", "q": 'кавычки " и \\ и\nперевод\tстроки \x01 \u2028 ё'},
    {"a": [], "b": {}, "c": [[]], "d": [{}], "e": (1, "x"), "f": -0.0, "g": 1e16, "h": 1e-7, "i": 10 ** 30},
    {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")},
    [True, False, None, 0, 1.5],
    "строка", 3, None,
])
def test_edge_values(value: Any) -> None:
    assert dumps_indent1(value) == _std(value)


def test_what_it_does_not_handle_goes_to_the_stdlib() -> None:
    # non-string keys, dict subclasses and deep nesting: the stdlib's text, exactly
    for value in ({2: "a", True: "b", None: "c", 1.5: "d"}, OrderedDict(b=1, a=2), {"x": [{"y": 1}] * 2},
                  _nested(300)):
        assert dumps_indent1(value) == _std(value)
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular"):
        dumps_indent1(circular)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indent1({"x": object()})


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": [value]}
    return value


# --- dumps_sorted_indent2: the run manifest's form ------------------------------------------------


def _std2(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


@settings(max_examples=150, deadline=None)
@given(JSON)
def test_manifest_form_same_text_as_the_stdlib(value: Any) -> None:
    assert dumps_sorted_indent2(value) == _std2(value)


def test_manifest_form_defaults_subclasses_and_keys() -> None:
    from pathlib import Path

    class Name(str):
        pass

    class Table(dict):  # type: ignore[type-arg]
        pass

    for value in ({"path": Path("/tmp/x"), "set": {1}, "b": 1, "a": {"я": 2, "Z": [3, (4,)]}},
                  {"s": Name("x")}, {"t": Table(b=1, a=2)}, {2: "a", 1: "b"}, _nested(300),
                  {"nan": float("nan"), "e": 1e-07, "big": 10 ** 30}):
        assert dumps_sorted_indent2(value) == _std2(value), value
    with pytest.raises(TypeError):  # mixed keys cannot be sorted: the stdlib's own error
        dumps_sorted_indent2({2: "a", "b": 1})


# --- dumps_compact: the stdlib's compact form, through orjson where the bytes are provably the same ------

def _compact(value: Any, **kw: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), **kw)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_compact_is_the_stdlibs_text(value: Any) -> None:
    from fabrika.textutil.jsontext import dumps_compact, dumps_compact_bytes

    assert dumps_compact(value) == _compact(value, default=str)
    assert dumps_compact_bytes(value) == _compact(value, default=str).encode("utf-8")
    assert dumps_compact(value, default_str=False) == _compact(value)


@pytest.mark.parametrize("value", [
    {"город": "Санкт-Петербург", "q": 'кавычки " и \\ и\nперевод\tстроки \x01 \x1f \x7f \u2028 ё 😀'},
    {"f": [1e-7, 1e16, 1e-05, -0.0, 0.1, 123456789.125], "big": 10 ** 30, "neg": -(1 << 63) - 1},
    {"nan": float("nan"), "inf": float("inf")},
    {"lone": "\ud800"}, {1: "int key"}, ("tuple", [1, (2, 3)]),
])
def test_compact_edge_values(value: Any) -> None:
    from fabrika.textutil.jsontext import dumps_compact

    assert dumps_compact(value) == _compact(value, default=str)


def test_compact_keeps_the_stdlibs_handling_of_odd_values() -> None:
    from fabrika.textutil.jsontext import dumps_compact

    class Odd:
        def __str__(self) -> str:
            return "odd!"

    class Sub(str):
        pass

    assert dumps_compact({"o": Odd(), "s": Sub("x")}) == _compact({"o": Odd(), "s": Sub("x")}, default=str)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_compact({"o": Odd()}, default_str=False)


# --- Rendered: a wrapped value's indent-1 text written once per depth ---------------------------------------

@settings(max_examples=200, deadline=None)
@given(JSON, JSON)
def test_rendered_reads_as_its_value_at_every_depth(inner: Any, other: Any) -> None:
    from fabrika.textutil.jsontext import Rendered

    r = Rendered(inner)
    wrapped = {"a": r, "b": [other, r, {"c": [r]}]}
    plain = {"a": inner, "b": [other, inner, {"c": [inner]}]}
    assert dumps_indent1(wrapped) == _std(plain)
    assert dumps_indent1(wrapped) == _std(plain)  # second time from the cached text


def test_rendered_inside_data_only_the_stdlib_writes() -> None:
    from fabrika.textutil.jsontext import Rendered

    r = Rendered({"name": "f", "parameters": {"type": "object"}})
    value = {"tools": [r], "odd_key": {1: "x"}}  # a non-str key: the whole value goes to the stdlib
    assert dumps_indent1(value) == _std({"tools": [r.value], "odd_key": {1: "x"}})
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        dumps_indent1({"r": r, "x": object()})
