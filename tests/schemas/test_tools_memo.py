"""The memoised schema check and compiled argument validators answer as uncached ones do."""

from __future__ import annotations

import jsonschema

from fabrika.schemas import tools as tools_mod
from fabrika.schemas.tools import FunctionSpec, Tool, check_parameters_schema


def _tool(params: dict) -> Tool:
    return Tool(function=FunctionSpec(name="book", parameters=params))


PARAMS = {"type": "object", "required": ["city", "n"], "additionalProperties": False,
          "properties": {"city": {"type": "string", "enum": ["Казань", "Москва"]},
                         "n": {"type": "integer", "minimum": 1}}}


def _fresh(params: dict, args: dict) -> list[str]:
    v = jsonschema.Draft202012Validator(params)
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in sorted(v.iter_errors(args), key=lambda e: list(e.absolute_path))]


def test_cached_validator_gives_the_uncached_errors_in_order() -> None:
    tool = _tool(PARAMS)
    for args in ({"city": "Казань", "n": 2}, {"city": "Сочи", "n": 0, "extra": 1}, {}, {"n": "два"}):
        assert tool.validate_arguments(args) == _fresh(PARAMS, args)
    # a second tool with an equal schema shares the compiled validator, a different one does not
    assert tools_mod._arguments_validator(dict(PARAMS)) is tools_mod._arguments_validator(PARAMS)
    other = {**PARAMS, "required": ["city"]}
    assert tools_mod._arguments_validator(other) is not tools_mod._arguments_validator(PARAMS)
    assert _tool(other).validate_arguments({"city": "Москва"}) == []


def test_schema_keys_keep_apart_what_orjson_would_merge() -> None:
    # orjson writes NaN as null: such schemas are keyed on the stdlib's JSON, never confused
    nan_default = {"type": "object", "properties": {"x": {"type": "number", "default": float("nan")}}}
    null_default = {"type": "object", "properties": {"x": {"type": "number", "default": None}}}
    assert tools_mod._schema_key(nan_default, sort=True) is None
    assert check_parameters_schema(null_default) == ["default of 'x' is invalid: None is not of type 'number'"]
    assert check_parameters_schema(nan_default) == []
    big = {"type": "object", "properties": {"x": {"type": "integer", "maximum": 10 ** 30}}}
    assert tools_mod._schema_key(big, sort=True) is None and check_parameters_schema(big) == []
    bad = {"type": "object", "properties": {"x": {"type": "string", "enum": [1]}}}
    assert check_parameters_schema(bad) == ["enum value 1 of 'x' does not match type 'string'"]
