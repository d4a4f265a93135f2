"""fc.tools: untrusted tool definitions become ok rows or rejections with reasons; dedup is order-free."""

from __future__ import annotations

import asyncio
import json

from fabrika.testing import ScriptedLLM, stage_context

from fabrika.generators.fc.common import language_ok
from fabrika.generators.fc.tools import ToolsConfig, ToolsDedupConfig, ToolsDedupStage, ToolsStage
from fabrika.schemas.fc import ToolSpec

TOPIC = {"id": "topic-1", "topic": "Доставка", "description": "Доставка еды", "keywords": '["еда"]', "lang": "ru"}
TIERS = ["Заказ еды", "Заказ еды на дом", "Заказ еды на дом из ресторана", "Заказ еды на дом из ресторана с оплатой картой"]


def tool(name="order_food", tiers=TIERS, **params):
    schema = params or {"type": "object", "properties": {"dish": {"type": "string", "description": "Блюдо"}},
                        "required": ["dish"]}
    return {"name": name, "parameters": schema, "tiers": tiers}


def run_parse(answer: str) -> list[dict]:
    stage = ToolsStage(ToolsConfig(kind="fc.tools"), stage_context(ScriptedLLM({})))
    return stage.parse(TOPIC, answer)


def test_fenced_json_with_trailing_text_is_parsed():
    rows = run_parse("Вот инструменты:\n```json\n" + json.dumps({"tools": [tool()]}, ensure_ascii=False) + "\n```\nГотово!")
    assert [r["status"] for r in rows] == ["ok"]
    spec = ToolSpec.model_validate_json(rows[0]["spec"])
    assert spec.at_tier(0).function.description == "Заказ еды" and spec.topic_id == "topic-1"
    assert rows[0]["signature"] and rows[0]["name"] == "order_food"


def test_each_invalid_tool_is_a_rejection_with_reason():
    bad = [
        tool(name="OrderFood"),
        tool(name="order_x", tiers=TIERS[:3]),
        tool(name="order_y", tiers=[TIERS[1], TIERS[0], TIERS[2], TIERS[3]]),
        tool(name="order_z", type="object", properties={"n": {"type": "integer"}}, required=["m"]),
        tool(name="order_w", type="object", properties={"n": {"type": "integer", "enum": ["a"]}}),
        tool(name="order_en", tiers=["Order food", "Order food home", "Order food home now", "Order food at home now ok"]),
        tool(), tool(),  # duplicate name in one topic
    ]
    rows = run_parse(json.dumps({"tools": bad}, ensure_ascii=False))
    reasons = [r["reason"] for r in rows]
    assert [r["status"] for r in rows] == ["rejected"] * 6 + ["ok", "rejected"]
    for want, got in zip(["invalid_name", "invalid_tiers", "tiers_not_increasing", "invalid_schema", "invalid_schema",
                          "wrong_language", None, "duplicate_name"], reasons):
        assert (got or "").startswith(want or ""), (want, got)
    assert len({r["id"] for r in rows}) == len(rows)


def test_invalid_json_and_missing_list_are_rejections():
    for answer, reason in [("{не json", "invalid_json"), ('{"items": []}', "invalid_json: no 'tools'"), ("", "empty_answer")]:
        rows = run_parse(answer)
        assert len(rows) == 1 and rows[0]["status"] == "rejected" and rows[0]["reason"].startswith(reason)


def test_process_uses_llm_and_topic_language():
    llm = ScriptedLLM({"fc.tools": lambda req: json.dumps({"tools": [tool()]}, ensure_ascii=False)})
    stage = ToolsStage(ToolsConfig(kind="fc.tools", tools_per_topic=3), stage_context(llm))
    rows = asyncio.run(stage.process(TOPIC))
    assert rows[0]["status"] == "ok"
    prompt = llm.requests[0].messages[0]["content"]
    assert "всего функций: 3" in prompt and "Доставка еды" in prompt
    assert llm.requests[0].response_format["json_schema"]["name"] == "fc_tools"


def test_dedup_keeps_smallest_id_regardless_of_order():
    rows = run_parse(json.dumps({"tools": [tool()]}, ensure_ascii=False))
    twin = {**rows[0], "id": "tool-000", "topic_id": "topic-2"}
    other = {**rows[0], "id": "tool-zzz", "signature": "different"}
    for order in ([rows[0], twin, other], [other, twin, rows[0]]):
        stage = ToolsDedupStage(ToolsDedupConfig(kind="fc.tools_dedup", input="fc.tools"),
                                stage_context(None, rows={"fc.tools": order}))

        async def collect():
            return [r async for chunk in stage.run_all(stage.input_rows()) for r in chunk]

        out = {r["id"]: (r["status"], r["reason"]) for r in asyncio.run(collect())}
        assert out == {"tool-000": ("ok", None), rows[0]["id"]: ("rejected", "duplicate_of: tool-000"),
                       "tool-zzz": ("ok", None)}


def test_language_check():
    assert language_ok("Найти билеты на поезд", "ru") and not language_ok("Find train tickets", "ru")
    assert language_ok("Find train tickets", "en") and not language_ok("Найти билеты", "en")
    assert language_ok("2025-03-14", "ru")
