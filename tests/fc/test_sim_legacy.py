"""The sim's legacy convention for imported tools: clarification plans for tools with no required parameters."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from fabrika.agents.prompts import prompt_text
from fabrika.generators.fc.plan_checks import parse_steps
from fabrika.generators.fc.sim_legacy import _legacy_clarify
from fabrika.generators.fc.sim_responders import planner_responder
from fabrika.generators.fc.tool_sources import candidates_from, load_document
from fabrika.llm.types import ChatRequest

SPECS = Path(__file__).resolve().parents[1] / "tools_import" / "data" / "openapi"


def readme_tools() -> list[dict[str, Any]]:
    """The ``readme-extensions`` spec's imported operations without a required parameter (most have none at all;
    a topic made of such tools is where the sim planner's clarification raised IndexError)."""
    path = SPECS / "readme-extensions.json"
    cands = candidates_from(load_document(path), "openapi", path.stem, base_dir=path.parent,
                            uri=path.resolve().as_uri())
    tools = [{"name": c.name, "description": c.description, "parameters": c.parameters} for c in cands
             if not c.parameters.get("required")]
    assert len(tools) >= 5
    return tools


def plan(tools: list[dict[str, Any]], seed: int, lang: str = "ru") -> list[Any]:
    task = json.dumps({"sample_type": "clarification", "lang": lang, "tools": tools}, ensure_ascii=False)
    req = ChatRequest(messages=({"role": "user", "content": prompt_text("planner", lang).format(task=task)},),
                      tag="fc.planner")
    steps, problems = parse_steps(json.loads(planner_responder(req, random.Random(seed))))
    assert steps is not None, problems
    return steps


def test_a_tool_without_required_parameters_is_answered_without_a_clarification() -> None:
    optional = {"name": "list_items", "description": "Показать товары. Список товаров магазина.",
                "parameters": {"type": "object", "properties": {
                    "count": {"type": "integer", "description": "количество"},
                    "city": {"type": "string", "description": "город"}}}}
    for fn in [*readme_tools(), optional]:
        for seed in range(10):
            for lang in ("ru", "en"):
                steps = _legacy_clarify(fn, lang, random.Random(seed), "")
                assert [s["kind"] for s in steps] == ["tool_call"]  # nothing is withheld: the call is made
                (call,) = steps[0]["rounds"][0]
                assert call["name"] == fn["name"]
                assert set(call["arguments"]) <= set(fn["parameters"].get("properties", {}))
                assert set(steps[0]["slots"]) == set(call["arguments"])


def test_clarification_plans_over_the_readme_spec_do_not_crash_the_sim_planner() -> None:
    for seed in range(20):
        steps = plan(readme_tools(), seed)
        assert [s.kind for s in steps] == ["tool_call"]


def test_a_tool_with_a_required_parameter_still_gets_its_clarification() -> None:
    needy = {"name": "track_order", "description": "Отследить заказ. Статус заказа по номеру.",
             "parameters": {"type": "object", "required": ["order_id"], "properties": {
                 "order_id": {"type": "string", "description": "номер заказа"}}}}
    for seed in range(10):
        steps = plan([*readme_tools(), needy], seed)
        assert [s.kind for s in steps] == ["clarification", "tool_call"]
        assert steps[0].withheld == ["order_id"]
        assert [c.name for c in steps[1].calls()] == ["track_order"]
