"""calls_match accepts what the schema makes equivalent and nothing more; the goal card says how to convey values."""

from __future__ import annotations

import unicodedata

from fabrika.rewards.fc import calls_match
from fabrika.schemas import Tool
from fabrika.schemas.fc import Fact, PlanStep, ToolSpec, goal_card
from tests.agents.test_visibility import PLAN

SCHEMA = {"type": "object", "required": ["city"], "properties": {
    "city": {"type": "string"},
    "when": {"type": "string", "format": "date-time"},
    "tags": {"type": "array", "uniqueItems": True, "items": {"type": "string", "enum": ["a", "b", "c"]}},
    "stops": {"type": "array", "items": {"type": "string"}},
    "guest": {"type": "object", "properties": {"name": {"type": "string"},
                                               "vip": {"type": "boolean", "default": False}}},
    "seats": {"type": "number"}}}
TOOLS = [Tool.model_validate({"function": {"name": "book", "parameters": SCHEMA}})]


def same(a: dict, b: dict) -> bool:
    return calls_match([{"name": "book", "arguments": a}], [{"name": "book", "arguments": b}], TOOLS)


def test_equivalent_by_the_schema():
    assert same({"city": "Казань", "when": "2025-03-14T10:00:00Z"}, {"city": "Казань", "when": "2025-03-14T13:00:00+03:00"})
    assert same({"city": "Казань", "tags": ["b", "a"]}, {"city": "Казань", "tags": ["a", "b"]})  # uniqueItems: a set
    assert same({"city": "Казань", "guest": {"name": "Анна", "vip": False}}, {"city": "Казань", "guest": {"name": "Анна"}})
    assert same({"city": "Казань", "seats": 2}, {"city": "Казань", "seats": 2.0})
    assert same({"city": unicodedata.normalize("NFD", "Йошкар-Ола")}, {"city": "Йошкар-Ола"})  # «й» decomposed


def test_not_equivalent():
    assert not same({"city": "Казани"}, {"city": "Казань"})  # an inflected form is another value
    assert not same({"city": "казань"}, {"city": "Казань"})
    assert not same({"city": "г. Казань"}, {"city": "Казань"})
    assert not same({"city": "Казань", "stops": ["Тверь", "Клин"]}, {"city": "Казань", "stops": ["Клин", "Тверь"]})
    assert not same({"city": "Казань", "seats": "2"}, {"city": "Казань", "seats": 2})
    assert not same({"city": "Казань", "guest": {"name": "Анна", "vip": True}}, {"city": "Казань", "guest": {"name": "Анна"}})


def test_goal_card_carries_values_and_how_to_say_them():
    by_value = {f.value: f for f in goal_card(PLAN, 0).facts}
    assert by_value["coupe"] == Fact(value="coupe", say="coupe", verbatim=True)  # an enum literal: verbatim
    legacy = PlanStep.model_validate({"kind": "tool_call", "intent": "Найти билеты", "slots": {"station_code": "из Твери"},
                                      "rounds": [[{"name": "search_train_tickets",
                                                   "arguments": {"station_code": "TVR", "carriage_class": "coupe"}}]]})
    # a legacy slot (words only): the call's value, the planner's words as the surface form
    assert goal_card(PLAN.model_copy(update={"steps": [legacy]}), 0).facts == [
        Fact(value="TVR", say="из Твери", verbatim=True)]
    free = PlanStep.model_validate({**PLAN.steps[0].model_dump(), "enum_phrases": {},
                                    "slots": {"station_code": {"value": "Тверь", "say": "из Твери"}}})
    spec = ToolSpec.model_validate({**PLAN.tools[0].model_dump(), "tool": Tool.model_validate({"function": {
        "name": "search_train_tickets", "parameters": {"type": "object", "properties": {
            "station_code": {"type": "string"}, "carriage_class": {"type": "string", "enum": ["coupe"]}}}}})})
    free.rounds[0][0].arguments["station_code"] = "Тверь"
    assert isinstance(spec, ToolSpec)
    plan = PLAN.model_copy(update={"steps": [free], "tools": [spec]})
    assert goal_card(plan, 0).facts == [Fact(value="Тверь", say="из Твери", verbatim=False)]
