"""Tool import fidelity on public specs and MCP servers (tests/tools_import/data, see its README):
names, parameter names and enum values byte for byte, a name the target API cannot carry refused with
its reason (renamed only on request, with a mapping that restores calls), no ``x-*`` keys in schemas,
no LLM call spent on tools in the wrong language, and ``translate_descriptions: ru`` turning English
APIs into Russian tools checked by back-translation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabrika.generators.fc.tool_sources import load_document
from fabrika.generators.fc.tools_import import MAPPING_FILE, load_name_mapping, restore_call_names
from fabrika.generators.fc.tools_translate import TAG_BACK, TAG_TRANSLATE, sim_transliterate
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas.fc import ToolSpec
from fabrika.schemas.tools import ToolCall
from fabrika.store import RunStore
from fabrika.testing import ScriptedLLM

DATA = Path(__file__).parent / "data"
SOURCES = sorted(DATA.glob("openapi/*.json")) + sorted(DATA.glob("mcp/*.json")) + sorted(DATA.glob("openai/*.json"))


def _validate(tmp_path: Path, stage: dict[str, Any]):
    doc = {"name": "fid", "run_dir": str(tmp_path / "run"), "seed": 5, "llm": {"backend": "sim"}, "stages": [stage]}
    return validate_data(doc, str(tmp_path / "t.yaml"), tmp_path)


def _run(tmp_path: Path, stage: dict[str, Any], **kw: Any):
    cfg, issues = _validate(tmp_path, stage)
    assert cfg is not None, [str(i) for i in issues]
    result = run_pipeline(cfg, resume=False, progress=False, **kw)
    rows = RunStore(result.run_dir).scan_raw("fc.tools_import").collect().to_dicts()
    return result, {r["source"]: r for r in rows}


def _spec(row: dict[str, Any]) -> ToolSpec:
    assert row["status"] == "ok", row["reason"]
    return ToolSpec.model_validate_json(row["spec"])


def _walk(node: Any):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def _vendor_keywords(schema: Any) -> list[str]:
    """``x-*`` keywords at any depth; the keys of ``properties`` are parameter names, not keywords."""
    if isinstance(schema, list):
        return [k for v in schema for k in _vendor_keywords(v)]
    if not isinstance(schema, dict):
        return []
    out = [k for k in schema if k.startswith("x-")]
    for k, v in schema.items():
        if k == "properties" and isinstance(v, dict):
            out += [x for sub in v.values() for x in _vendor_keywords(sub)]
        elif not k.startswith("x-"):
            out += _vendor_keywords(v)
    return out


def test_fixtures_cover_ten_openapi_specs_and_five_mcp_servers():
    assert len(list(DATA.glob("openapi/*.json"))) >= 10 and len(list(DATA.glob("mcp/*.json"))) >= 5


def test_everything_server_keeps_all_thirteen_hyphenated_names(tmp_path: Path):
    _, rows = _run(tmp_path, {"kind": "fc.tools_import", "sources": [{"path": str(DATA / "mcp" / "everything.json")}]})
    source = load_document(DATA / "mcp" / "everything.json")["tools"]
    assert len(rows) == 13
    for tool in source:
        spec = _spec(rows[f"mcp:{tool['name']}"])
        assert spec.name == tool["name"]  # get-sum stays get-sum
        assert list(spec.tool.function.parameters.get("properties", {})) == list(
            tool["inputSchema"].get("properties", {}))  # parameter names, in order
    assert _spec(rows["mcp:get-sum"]).name == "get-sum"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_imported_name_enum_and_parameter_is_the_sources(tmp_path: Path, path: Path):
    _, rows = _run(tmp_path, {"kind": "fc.tools_import", "sources": [{"path": str(path)}]})
    doc = load_document(path)
    ok = [r for r in rows.values() if r["status"] == "ok"]
    assert ok or all(r["reason"].startswith("deprecated:") for r in rows.values())
    if "tools" in doc and isinstance(doc, dict):
        names = {f"mcp:{t['name']}": t["name"] for t in doc["tools"]}
    elif isinstance(doc, list):
        names = {f"openai:#{i}": t["function"]["name"] for i, t in enumerate(doc)}
    else:
        names = {f"openapi:{m.upper()} {p}": op["operationId"] for p, item in doc["paths"].items()
                 for m, op in item.items() if isinstance(op, dict) and "operationId" in op}
    source_enums = {json.dumps(n["enum"]) for n in _walk(doc) if isinstance(n.get("enum"), list)}
    for row in ok:
        spec = _spec(row)
        if row["source"] in names:
            assert spec.name == names[row["source"]]
        params = spec.tool.function.parameters
        assert _vendor_keywords(params) == []
        for node in _walk(params):
            if isinstance(node.get("enum"), list):  # no enum value rewritten (3.0 nullable may add null)
                values = [v for v in node["enum"] if v is not None]
                assert any(json.dumps(values) == e or json.dumps(node["enum"]) == e for e in source_enums), node


def test_openai_file_names_vendor_keys_and_string_enums(tmp_path: Path):
    _, rows = _run(tmp_path, {"kind": "fc.tools_import",
                              "sources": [{"path": str(DATA / "openai" / "restaurant_tools.json")}]})
    menu, order, status = rows["openai:#0"], rows["openai:#1"], rows["openai:#2"]
    params = _spec(menu).tool.function.parameters
    assert _spec(menu).name == "getMenu" and "x-internal-id" not in params
    assert "x-order" not in params["properties"]["meal"]
    assert params["properties"]["meal"]["enum"] == ["Breakfast", "lunch-special", "DINNER"]
    assert "x-locale" in params["properties"]  # a parameter named x-…, not a vendor key
    assert "vendor keys dropped from the schema: x-internal-id, x-order" in menu["warnings"]
    size = _spec(order).tool.function.parameters["properties"]["size"]
    assert _spec(order).name == "place-order" and size["enum"] == ["1", "2", "3"] and size["type"] == "string"
    assert status["status"] == "rejected" and status["reason"] == (
        "invalid_name: 'order status': the openai API takes tool names matching ^[a-zA-Z0-9_-]{1,64}$; "
        "rename: true exports it as 'order_status' with a mapping")


def test_rename_is_opt_in_writes_a_mapping_and_calls_are_restored(tmp_path: Path):
    result, rows = _run(tmp_path, {"kind": "fc.tools_import", "rename": True,
                                   "sources": [{"path": str(DATA / "openai" / "restaurant_tools.json")}]})
    assert _spec(rows["openai:#2"]).name == "order_status" and _spec(rows["openai:#0"]).name == "getMenu"
    stage_dir = Path(result.run_dir) / "stages" / "fc.tools_import"
    mapping = load_name_mapping(stage_dir)
    assert mapping == {"order_status": "order status"}
    assert json.loads((stage_dir / MAPPING_FILE).read_text(encoding="utf-8")) == mapping
    calls = restore_call_names([{"name": "order_status", "arguments": {"orderNo": "7"}},
                                ToolCall(name="getMenu", arguments={})], mapping)
    assert [c.name for c in calls] == ["order status", "getMenu"] and calls[0].arguments == {"orderNo": "7"}


def test_english_spec_with_lang_ru_is_a_config_error_before_any_llm_call(tmp_path: Path):
    cfg, issues = _validate(tmp_path, {"kind": "fc.tools_import", "lang": "ru",
                                       "sources": [{"path": str(DATA / "openapi" / "petstore-3.0.json")}]})
    assert cfg is None
    assert any("another language than lang 'ru'" in str(i) and "translate_descriptions: ru" in str(i) for i in issues)


def test_a_tool_in_another_language_is_refused_without_an_llm_call(tmp_path: Path):
    tools = [{"name": "ru_tool", "description": "Показывает заметки пользователя за выбранный день.",
              "parameters": {"type": "object", "properties": {"day": {"type": "string", "description": "День"}}}},
             {"name": "en_tool", "description": "Shows the notes of the user for the chosen day.",
              "parameters": {"type": "object", "properties": {"day": {"type": "string", "description": "Day"}}}}]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools, ensure_ascii=False), encoding="utf-8")
    llm = ScriptedLLM(lambda r: json.dumps({"tiers": ["Заметки", "Заметки за день", "Заметки пользователя за день",
                                                      "Показывает заметки пользователя за выбранный день."]}))
    _, rows = _run(tmp_path, {"kind": "fc.tools_import", "lang": "ru", "sources": [{"path": str(path)}]}, engine=llm)
    assert rows["openai:#0"]["status"] == "ok"
    assert rows["openai:#1"]["reason"].startswith("wrong_language: en_tool description not in 'ru'")
    assert "translate_descriptions: ru" in rows["openai:#1"]["reason"]
    assert len(llm.requests) == 1  # only the Russian tool's tiers were asked for


def test_translate_descriptions_makes_russian_tools_and_keeps_names_and_enums(tmp_path: Path):
    path = DATA / "openapi" / "petstore-3.0.json"
    result, rows = _run(tmp_path, {"kind": "fc.tools_import", "translate_descriptions": "ru",
                                   "sources": [{"path": str(path)}]})
    doc = load_document(path)
    find = doc["paths"]["/pet/findByStatus"]["get"]
    spec = _spec(rows["openapi:GET /pet/findByStatus"])
    assert spec.lang == "ru" and spec.name == find["operationId"] == "findPetsByStatus"
    status = spec.tool.function.parameters["properties"]["status"]
    assert status["items"]["enum"] == find["parameters"][0]["schema"]["items"]["enum"]  # available, pending, sold
    assert all(sum("а" <= ch.lower() <= "я" for ch in t) > len(t) / 3 for t in spec.tiers)
    assert status["description"] == sim_transliterate(find["parameters"][0]["description"], "ru",
                                                      ["status", "available", "pending", "sold", "findPetsByStatus"])
    ok = [r for r in rows.values() if r["status"] == "ok"]
    assert len(ok) == 19 and all("translated into ru" in r["warnings"] for r in ok)
    stats = result.stats["fc.tools_import"].llm
    assert stats.requests >= 2 * len(ok)
    # a second run asks the cache, not the model
    cfg, _ = _validate(tmp_path, {"kind": "fc.tools_import", "translate_descriptions": "ru",
                                  "sources": [{"path": str(path)}]})
    again = run_pipeline(cfg, resume=False, progress=False, cache_only=True)
    assert again.stats["fc.tools_import"].llm.cached >= 2 * len(ok)


def _writer(back: str) -> ScriptedLLM:
    def translate(request: ChatRequest) -> str:
        task = json.loads(request.messages[-1]["content"].split("```json\n", 1)[1].rsplit("```", 1)[0])
        return json.dumps({"texts": {k: "Заказывает пиццу с доставкой" for k in task["texts"]}}, ensure_ascii=False)

    def backtranslate(request: ChatRequest) -> str:
        task = json.loads(request.messages[-1]["content"].split("```json\n", 1)[1].rsplit("```", 1)[0])
        return json.dumps({"texts": {k: back for k in task["texts"]}})

    tiers = json.dumps({"tiers": ["Пицца", "Заказ пиццы", "Заказ пиццы на дом", "Заказывает пиццу с доставкой"]},
                       ensure_ascii=False)
    return ScriptedLLM({TAG_TRANSLATE: translate, TAG_BACK: backtranslate, "fc.tools_import": tiers})


@pytest.mark.parametrize("back,reason", [
    ("Orders a pizza with delivery", None),
    ("Cancels every flight of the airline tomorrow", "backtranslation_mismatch: description similarity"),
])
def test_back_translation_decides(tmp_path: Path, back: str, reason: str | None):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"name": "orderPizza", "description": "Orders a pizza with delivery",
                                 "parameters": {"type": "object", "properties": {}}}]), encoding="utf-8")
    _, rows = _run(tmp_path, {"kind": "fc.tools_import", "translate_descriptions": "ru",
                              "sources": [{"path": str(path)}]}, engine=_writer(back))
    row = rows["openai:#0"]
    if reason is None:
        assert _spec(row).name == "orderPizza" and _spec(row).tiers[3] == "Заказывает пиццу с доставкой"
    else:
        assert row["status"] == "rejected" and row["reason"].startswith(reason), row["reason"]


def test_a_translation_that_drops_a_parameter_name_is_refused(tmp_path: Path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"name": "orderPizza", "description": "Orders a pizza; pass `size` as sizeCode",
                                 "parameters": {"type": "object", "properties": {
                                     "sizeCode": {"type": "string", "description": "Size"}}}}]), encoding="utf-8")
    _, rows = _run(tmp_path, {"kind": "fc.tools_import", "translate_descriptions": "ru",
                              "sources": [{"path": str(path)}]}, engine=_writer("Orders a pizza"))
    assert rows["openai:#0"]["reason"].startswith("translation_lost_name: description lost 'sizeCode'")


def test_translate_and_lang_must_agree(tmp_path: Path):
    cfg, issues = _validate(tmp_path, {"kind": "fc.tools_import", "lang": "en", "translate_descriptions": "ru",
                                       "sources": [{"path": str(DATA / "mcp" / "time.json")}]})
    assert cfg is None and any("translate_descriptions: ru" in str(i) and "lang is 'en'" in str(i) for i in issues)


def test_an_english_mcp_server_yields_russian_dialogues_calling_its_own_names(tmp_path: Path):
    from fabrika.generators.fc.common import cyrillic_share
    from fabrika.schemas import Sample, from_row

    doc = {"name": "ru", "run_dir": str(tmp_path / "run"), "seed": 7, "llm": {"backend": "sim", "sim": {"seed": 7}},
           "stages": [{"kind": "fc.tools_import", "translate_descriptions": "ru",
                       "sources": [{"path": str(DATA / "mcp" / "everything.json")}]},
                      {"kind": "fc.plans", "input": "fc.tools_import", "plans_per_topic": 6},
                      {"kind": "fc.dialogues", "input": "fc.plans"},
                      {"kind": "fc.samples", "input": "fc.dialogues"}],
           "dataset": {"stages": ["fc.samples"]}}
    cfg, issues = validate_data(doc, str(tmp_path / "t.yaml"), tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    result = run_pipeline(cfg, resume=False, progress=False)
    samples = [from_row(Sample, r) for r in RunStore(result.run_dir).scan_raw("fc.samples").collect()
               .filter(status="ok").iter_rows(named=True)]
    server = {t["name"] for t in load_document(DATA / "mcp" / "everything.json")["tools"]}
    called = {c.name for s in samples for m in s.completion for c in m.tool_calls or []}
    assert samples and called and called <= server and any("-" in n for n in called)
    users = [m.content for s in samples for m in s.prompt if m.role == "user" and m.content]
    assert users and all(cyrillic_share(u) > 0.5 for u in users)


def test_a_live_mcp_server_in_another_language_stops_before_any_llm_call(tmp_path: Path):
    import sys

    from fabrika.errors import InputError

    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    server = Path(__file__).parent / "mcp_demo_server.py"  # Russian descriptions
    cfg, issues = _validate(tmp_path, {"kind": "fc.tools_import", "lang": "en",
                                       "sources": [{"command": [sys.executable, str(server)], "timeout_s": 60}]})
    assert cfg is not None, [str(i) for i in issues]
    llm = ScriptedLLM(lambda r: "{}")
    with pytest.raises(InputError, match=r"all 2 tools are described in another language than lang 'en'; "
                                         r"set translate_descriptions: en"):
        run_pipeline(cfg, resume=False, progress=False, engine=llm)
    assert llm.requests == []


def test_the_export_ships_the_name_mapping_and_it_restores_every_renamed_call(tmp_path: Path):
    from fabrika.export.source import open_version
    from fabrika.export.writer import ExportConfig, export, read_export

    path = DATA / "openai" / "restaurant_tools.json"
    tools = load_document(path)
    doc = {"name": "ren", "run_dir": str(tmp_path / "run"), "seed": 7, "llm": {"backend": "sim", "sim": {"seed": 7}},
           "stages": [{"kind": "fc.tools_import", "rename": True, "sources": [{"path": str(path)}]},
                      {"kind": "fc.plans", "input": "fc.tools_import", "plans_per_topic": 6},
                      {"kind": "fc.dialogues", "input": "fc.plans"},
                      {"kind": "fc.samples", "input": "fc.dialogues"}],
           "dataset": {"stages": ["fc.samples"]}}
    cfg, issues = validate_data(doc, str(tmp_path / "t.yaml"), tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    result = run_pipeline(cfg, resume=False, progress=False)
    out = tmp_path / "export"
    export(open_version(result.run_dir), ExportConfig(out=str(out), kind="sft", format="jsonl"))
    mapping = json.loads((out / MAPPING_FILE).read_text(encoding="utf-8"))
    assert mapping == {"order_status": "order status"}
    calls = [c for rec in read_export(out, "jsonl") for m in rec["prompt"] + rec["completion"]
             if m.get("tool_calls") for c in m["tool_calls"]]
    assert calls and {c["function"]["name"] for c in calls} <= {"getMenu", "place-order", "order_status"}
    restored = restore_call_names(calls, mapping)  # what executes them puts the server's names back
    assert {c.name for c in restored} <= {t["function"]["name"] for t in tools}
    assert "order status" in {c.name for c in restored}


def test_generated_calls_can_be_checked_against_the_live_mcp_server():
    import asyncio
    import sys

    from fabrika.generators.fc.tool_sources import mcp_call_tools

    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    server = [sys.executable, str(Path(__file__).parent / "mcp_demo_server.py")]
    verdicts = asyncio.run(mcp_call_tools(server, [("get_forecast", {"city": "Казань", "days": 2}),
                                                   ("get_forecast", {"city": "Казань", "days": "много"}),
                                                   ("get_forcast", {"city": "Казань"})], timeout_s=60))
    assert [v.ok for v in verdicts] == [True, False, False], verdicts
    assert "солнечно" in verdicts[0].detail and "get_forcast" in verdicts[2].detail


def test_translator_prompts_are_data_with_the_same_fields_in_both_languages():
    from fabrika.generators.fc.tools_translate import CATALOGUE
    from fabrika.prompts import template_fields

    assert set(CATALOGUE.data) == {"translate"}
    ru, en = (CATALOGUE.template("translate", lang) for lang in ("ru", "en"))
    assert template_fields(ru) == template_fields(en) == {"task"}
    assert "Переведи на русский" in ru and "Translate into English" in en


def test_a_renamed_name_that_another_tool_has_is_a_duplicate_not_a_clash(tmp_path: Path):
    tools = [{"name": n, "description": f"Shows the status of an order ({n}).",
              "parameters": {"type": "object", "properties": {}}} for n in ("order status", "order_status")]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    result, rows = _run(tmp_path, {"kind": "fc.tools_import", "rename": True, "sources": [{"path": str(path)}]})
    assert _spec(rows["openai:#1"]).name == "order_status"
    assert rows["openai:#0"]["reason"] == ("duplicate_name: order status is already taken by openai:#1 "
                                           "(as 'order_status')")
    assert load_name_mapping(Path(result.run_dir) / "stages" / "fc.tools_import") == {}
