"""fc's argument checks: schema problems first, then formats; one cached validator per schema gives the same."""

from __future__ import annotations

from fabrika.generators.fc.common import argument_problems
from fabrika.schemas.tools import Tool

TOOL = Tool.model_validate({"function": {"name": "book", "description": "Бронь", "parameters": {
    "type": "object", "required": ["date", "guests"],
    "properties": {"date": {"type": "string", "format": "date"}, "guests": {"type": "integer", "minimum": 1},
                   "email": {"type": "string", "format": "email"}}}}})


def test_valid_schema_and_format_problems_in_their_order() -> None:
    for _ in range(2):  # the second pass runs on the cached validator
        assert argument_problems(TOOL, {"date": "2026-03-14", "guests": 2}) == []
        # a schema problem wins: formats are not reported alongside it
        assert argument_problems(TOOL, {"date": "14 марта", "guests": 0}) == [
            "guests: 0 is less than the minimum of 1"]
        assert argument_problems(TOOL, {"guests": 2}) == ["<root>: 'date' is a required property"]
        # formats only once the schema holds, sorted by path
        assert argument_problems(TOOL, {"date": "14 марта", "guests": 2, "email": "нет"}) == [
            "date: '14 марта' is not a 'date'", "email: 'нет' is not a 'email'"]


LIST_TOOL = Tool.model_validate({"function": {"name": "tag", "description": "Метки", "parameters": {
    "type": "object", "required": ["tags"], "properties": {"tags": {"type": "array", "items": {"type": "string"}},
                                                           "n": {"type": "integer"}}}}})


def test_remembered_problems_are_the_computed_ones_and_only_for_the_same_json_data() -> None:
    first = argument_problems(LIST_TOOL, {"tags": "a"})
    assert first == ["tags: 'a' is not of type 'array'"]
    first.append("changed by the caller")  # the caller's list is its own
    assert argument_problems(LIST_TOOL, {"tags": "a"}) == ["tags: 'a' is not of type 'array'"]
    assert argument_problems(LIST_TOOL, {"tags": ["a"]}) == []
    # the same JSON text, not the same data: a tuple is no JSON array to the schema, 1.0 is no integer, True no 1
    assert argument_problems(LIST_TOOL, {"tags": ("a",)}) == ["tags: ('a',) is not of type 'array'"]
    assert argument_problems(LIST_TOOL, {"tags": [], "n": 1}) == []
    assert argument_problems(LIST_TOOL, {"tags": [], "n": 1.5}) == ["n: 1.5 is not of type 'integer'"]
    assert argument_problems(LIST_TOOL, {"tags": [], "n": True}) == ["n: True is not of type 'integer'"]
