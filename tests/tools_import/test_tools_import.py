"""fc.tools_import: OpenAPI (with $refs, enums, nested bodies, one broken operation), MCP tool lists and
a live MCP server, OpenAI tool files; refusals are recorded with their reason, repairs with a warning,
and an FC run on the imported tools produces samples."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabrika.generators.fc.tools_import import import_tools
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas import Sample, from_row
from fabrika.schemas.fc import ToolSpec
from fabrika.schemas.tools import Tool
from fabrika.store import RunStore
from fabrika.testing import ScriptedLLM

ROOT = Path(__file__).parents[2]
HERE = Path(__file__).parent

PETSTORE: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Pet clinic", "version": "1"},
    "paths": {
        "/pets": {
            "get": {"operationId": "listPets", "summary": "List pets",
                    "description": "Lists the pets of the clinic, optionally filtered by species and status.",
                    "parameters": [{"$ref": "#/components/parameters/Species"},
                                   {"name": "status", "in": "query", "description": "Visit status",
                                    "schema": {"$ref": "#/components/schemas/Status"}},
                                   {"name": "limit", "in": "query", "description": "Page size",
                                    "schema": {"type": "integer", "minimum": 0, "exclusiveMinimum": True}}]},
            "post": {"operationId": "createPet", "summary": "Register a pet",
                     "description": "Registers a new pet with its owner and an optional vaccination record.",
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/NewPet"}}}}},
        },
        "/pets/{pet_id}/visits": {
            "parameters": [{"name": "pet_id", "in": "path", "required": True, "description": "Pet id",
                            "schema": {"type": "string"}}],
            "post": {"operationId": "book-visit", "summary": "Book a visit",
                     "description": "Books a visit for a pet at the given time with a vet of the chosen specialty.",
                     "parameters": [{"name": "X-Trace", "in": "header", "schema": {"type": "string"}}],
                     "requestBody": {"required": True, "content": {"application/vnd.clinic+json": {"schema": {
                         "type": "object", "required": ["slot"],
                         "properties": {"slot": {"$ref": "#/components/schemas/Slot"},
                                        "pet_id": {"type": "string", "description": "clashes with the path"}}}}}}},
        },
        "/owners/{owner_id}": {
            "get": {"operationId": "getOwner", "summary": "Get an owner",
                    "description": "Returns an owner with the tree of their referrals.",
                    "parameters": [{"name": "owner_id", "in": "path", "required": True, "description": "Owner id",
                                    "schema": {"type": "string"}}]},
        },
        "/broken": {
            "get": {"operationId": "brokenOp", "summary": "Broken",
                    "description": "This operation points at a schema that does not exist.",
                    "parameters": [{"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/Nope"}}]},
        },
    },
    "components": {
        "parameters": {"Species": {"name": "species", "in": "query", "description": "Species",
                                   "schema": {"$ref": "#/components/schemas/Species"}}},
        "schemas": {
            "Species": {"type": "string", "enum": ["cat", "dog", "parrot"]},
            "Status": {"type": "string", "enum": ["new", "done"], "nullable": True},
            "Slot": {"type": "object", "required": ["time"], "description": "When and with whom",
                     "properties": {"time": {"type": "string", "format": "date-time", "description": "Start"},
                                    "specialty": {"type": "string", "enum": ["surgeon", "dentist"],
                                                  "description": "Vet specialty"}}},
            "Owner": {"type": "object", "properties": {
                "name": {"type": "string", "description": "Name"},
                "referred_by": {"$ref": "#/components/schemas/Owner"}}},
            "a/b": {"type": "string", "description": "A name with a slash (JSON pointer ~1)", "example": "x"},
            "NewPet": {"type": "object", "required": ["name", "species", "owner"], "properties": {
                "id": {"type": "string", "readOnly": True, "description": "Server id"},
                "name": {"type": "string", "description": "Pet name"},
                "species": {"$ref": "#/components/schemas/Species"},
                "nickname": {"$ref": "#/components/schemas/a~1b"},
                "owner": {"$ref": "#/components/schemas/Owner"},
                "vaccinations": {"type": "array", "description": "Vaccinations", "items": {
                    "type": "object", "properties": {"vaccine": {"type": "string", "description": "Vaccine"},
                                                     "date": {"type": "string", "format": "date",
                                                              "description": "Date"}}}}}},
        },
    },
}


def _config(tmp_path: Path, stages: list[dict[str, Any]], **over: Any):
    doc = {"name": "imp", "run_dir": str(tmp_path / "run"), "seed": 3, "llm": {"backend": "sim"},
           "stages": stages, **over}
    cfg, issues = validate_data(doc, str(tmp_path / "t.yaml"), tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    return cfg


def _rows(result: Any, stage: str = "fc.tools_import") -> dict[str, dict[str, Any]]:
    rows = RunStore(result.run_dir).scan_raw(stage).collect().to_dicts()
    return {r["source"]: r for r in rows}


def test_openapi_operations_become_valid_tools_and_the_broken_one_is_a_recorded_rejection(tmp_path: Path):
    path = tmp_path / "petstore.yaml"
    path.write_text(yaml.safe_dump(PETSTORE, allow_unicode=True), encoding="utf-8")
    cfg = _config(tmp_path, [{"kind": "fc.tools_import", "sources": [{"path": str(path)}]}])
    rows = _rows(run_pipeline(cfg, resume=False, progress=False))
    assert len(rows) == 5
    broken = rows["openapi:GET /broken"]
    assert broken["status"] == "rejected" and broken["reason"].startswith("unresolved_ref: #/components/schemas/Nope")
    ok = {k: r for k, r in rows.items() if r["status"] == "ok"}
    assert len(ok) == 4
    tools = {}
    for r in ok.values():
        spec = ToolSpec.model_validate_json(r["spec"])
        tools[spec.name] = Tool.model_validate(spec.tool.model_dump())  # passes Tool validation as is
        assert len(spec.tiers) == 4 and spec.tiers[3] == next(
            op["description"] for item in PETSTORE["paths"].values() for op in item.values()
            if isinstance(op, dict) and "operationId" in op and op["description"] == spec.tiers[3])
    assert set(tools) == {"listPets", "createPet", "book-visit", "getOwner"}  # operationIds, byte for byte
    p = tools["listPets"].function.parameters["properties"]
    assert p["species"]["enum"] == ["cat", "dog", "parrot"]  # parameter $ref -> schema $ref
    assert p["status"]["type"] == ["string", "null"]  # 3.0 nullable
    assert p["limit"] == {"type": "integer", "exclusiveMinimum": 0, "description": "Page size"}
    body = tools["createPet"].function.parameters
    assert "id" not in body["properties"] and set(body["required"]) == {"name", "species", "owner"}  # readOnly out
    assert body["properties"]["nickname"]["description"].startswith("A name with a slash")  # ~1 pointer escape
    assert "example" not in body["properties"]["nickname"]
    owner = body["properties"]["owner"]
    assert owner["properties"]["referred_by"]["type"] == "object"  # recursion cut, not infinite
    assert body["properties"]["vaccinations"]["items"]["properties"]["vaccine"]["type"] == "string"  # nested
    assert "recursive $ref" in ok["openapi:POST /pets"]["warnings"]
    visit = tools["book-visit"].function.parameters
    assert visit["required"] == ["pet_id", "body"] and visit["properties"]["body"]["properties"]["slot"][
        "properties"]["specialty"]["enum"] == ["surgeon", "dentist"]  # clash -> body kept whole
    assert "X-Trace" not in visit["properties"] and "header parameter 'X-Trace' left out" in ok[
        "openapi:POST /pets/{pet_id}/visits"]["warnings"]
    # a call the schema allows validates; one it forbids does not
    assert not tools["listPets"].validate_arguments({"species": "cat", "status": None, "limit": 5})
    assert tools["listPets"].validate_arguments({"species": "hamster", "limit": 0})


def test_fc_run_on_imported_tools_produces_samples(tmp_path: Path):
    data = yaml.safe_load((ROOT / "configs" / "fc_import_demo.yaml").read_text(encoding="utf-8"))
    data["run_dir"] = str(tmp_path / "run")
    cfg, issues = validate_data(data, str(ROOT / "configs" / "fc_import_demo.yaml"), ROOT / "configs")
    assert cfg is not None, [str(i) for i in issues]
    result = run_pipeline(cfg, resume=False, progress=False)
    rows = _rows(result)
    assert rows["openapi:GET /fines"]["reason"].startswith("unresolved_ref:")
    assert rows["mcp:broken_tool"]["reason"].startswith("invalid_schema: broken_tool")
    assert rows["openapi:GET /readers/{reader_id}/card"]["reason"].startswith("deprecated:")
    assert rows["mcp:convert currency"]["reason"].startswith(  # never silently renamed
        "invalid_name: 'convert currency': the openai API takes tool names matching")
    assert sum(r["status"] == "ok" for r in rows.values()) == 7
    imported = {ToolSpec.model_validate_json(r["spec"]).name for r in rows.values() if r["status"] == "ok"}
    assert result.version is not None and result.version.rows > 0
    samples = [from_row(Sample, r) for r in RunStore(result.run_dir).scan_raw("fc.samples").collect()
               .filter(status="ok").iter_rows(named=True)]
    assert samples and all({t.name for t in s.tools} & imported for s in samples)
    called = {c.name for s in samples for m in s.completion for c in m.tool_calls or []}
    assert called and called <= imported


SLOPPY = [
    {"type": "function", "function": {"name": "setAlarm", "description": "Ставит будильник на заданное время.",
                                      "parameters": {"type": "object", "properties": {
                                          "time": {"type": "str", "description": "Время", "required": True},
                                          "repeat": {"type": "boolean", "description": "Повторять",
                                                     "default": "false"},
                                          "volume": {"type": "integer", "enum": ["1", "2", "3"], "default": "2"},
                                      }, "required": ["time", "label"]}}},
    {"name": "ok_tool", "description": "Показывает заметки пользователя за выбранный день недели.",
     "parameters": {"type": "object", "properties": {"day": {"type": "string", "description": "День недели"}}},
     "tiers": ["Заметки", "Заметки за день", "Заметки за выбранный день", "Показывает заметки пользователя."]},
]


@pytest.mark.parametrize("repair", [True, False])
def test_repair_fixes_sloppy_schemas_with_warnings_or_refuses_them(tmp_path: Path, repair: bool):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(SLOPPY, ensure_ascii=False), encoding="utf-8")
    cfg = _config(tmp_path, [{"kind": "fc.tools_import", "lang": "ru", "repair": repair,
                              "sources": [{"path": str(path)}]}])
    rows = _rows(run_pipeline(cfg, resume=False, progress=False))
    alarm, given = rows["openai:#0"], rows["openai:#1"]
    assert given["status"] == "ok" and ToolSpec.model_validate_json(given["spec"]).tiers == SLOPPY[1]["tiers"]
    if not repair:
        assert alarm["status"] == "rejected" and alarm["reason"].startswith("invalid_schema: setAlarm")
        return
    assert alarm["status"] == "ok", alarm["reason"]
    spec = ToolSpec.model_validate_json(alarm["spec"])
    params = spec.tool.function.parameters
    assert spec.name == "setAlarm" and params["required"] == ["time"]  # the name is the server's
    assert params["properties"]["time"] == {"type": "string", "description": "Время"}
    assert params["properties"]["repeat"]["default"] is False
    volume = params["properties"]["volume"]  # the enum values are what the server takes: kept, the type follows
    assert volume["enum"] == ["1", "2", "3"] and volume["default"] == "2" and volume["type"] == "string"
    warnings = json.loads(alarm["warnings"])
    assert any('default "false" (a string) read as false' in w for w in warnings)
    assert any("required names no property: ['label']" in w for w in warnings)
    assert any("'required: true' inside the property" in w for w in warnings) and len(warnings) >= 5
    assert params["properties"]["volume"]["description"] == "значение параметра volume"  # written by the (sim) LLM


def picky_writer(request: ChatRequest) -> str:
    """A tier writer that misbehaves like real models: prose around JSON, a rewritten given tier,
    or no JSON at all."""
    task = json.loads(request.messages[-1]["content"].split("```json\n", 1)[1].rsplit("```", 1)[0])
    if task["name"] == "get_weather":
        return ('<think>черновик: {"tiers": ["x", "y", "z", "w"]}</think>Вот: {"tiers": ["Погода", '
                '"Погода в городе", "Погода в городе на дни", '
                '"ПЕРЕПИСАННОЕ описание, которое модель не должна была менять вовсе"]}')
    return "Извините, не могу помочь с этим."


def test_llm_writes_only_missing_tiers_and_a_bad_answer_is_a_rejection(tmp_path: Path):
    cfg = _config(tmp_path, [{"kind": "fc.tools_import", "lang": "ru",
                              "sources": [{"path": "package://fc/mcp_tools_demo.json"}]}])
    rows = _rows(run_pipeline(cfg, resume=False, progress=False, engine=ScriptedLLM(picky_writer)))
    weather = rows["mcp:get_weather"]
    assert weather["status"] == "ok"
    tiers = ToolSpec.model_validate_json(weather["spec"]).tiers
    assert tiers[3] == "Прогноз погоды в городе на ближайшие дни: температура, осадки и ветер."  # given, kept
    assert tiers[0] == "Погода" and tiers[1:3] == ["Погода в городе", "Погода в городе на дни"]  # MCP title = tier 0
    taxi = rows["mcp:find_taxi"]
    assert taxi["status"] == "rejected" and taxi["reason"] == "invalid_json: no JSON value found", taxi["reason"]
    assert taxi["raw_excerpt"] == "Извините, не могу помочь с этим."  # the answer behind the rejection


def test_describe_off_refuses_tools_without_tiers(tmp_path: Path):
    cfg = _config(tmp_path, [{"kind": "fc.tools_import", "lang": "ru", "describe": False,
                              "sources": [{"path": "package://fc/mcp_tools_demo.json"}]}])
    result = run_pipeline(cfg, resume=False, progress=False)
    rows = _rows(result)
    assert rows["mcp:get_weather"]["reason"].startswith("missing_tiers: get_weather has 2 of 4")
    assert result.stats["fc.tools_import"].llm.requests == 0


def test_bad_sources_are_config_errors_before_any_llm_call(tmp_path: Path):
    (tmp_path / "notes.json").write_text('{"hello": 1}', encoding="utf-8")
    (tmp_path / "swagger.json").write_text('{"swagger": "2.0", "paths": {}}', encoding="utf-8")
    for src, needle in (({"path": "missing.yaml"}, "tools source not found"),
                        ({"path": "notes.json"}, "not a tools source"),
                        ({"path": "swagger.json"}, "Swagger 2.0"),
                        ({}, "exactly one of 'path'")):
        doc = {"name": "imp", "run_dir": str(tmp_path / "run"), "llm": {"backend": "sim"},
               "stages": [{"kind": "fc.tools_import", "sources": [src]}]}
        cfg, issues = validate_data(doc, str(tmp_path / "t.yaml"), tmp_path)
        assert cfg is None and any(needle in str(i) for i in issues), [str(i) for i in issues]


def test_tools_from_a_running_mcp_server_over_stdio(tmp_path: Path):
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    cfg = _config(tmp_path, [{"kind": "fc.tools_import", "lang": "ru", "sources": [
        {"command": [sys.executable, str(HERE / "mcp_demo_server.py")], "timeout_s": 60}]}])
    rows = _rows(run_pipeline(cfg, resume=False, progress=False))
    assert set(rows) == {"mcp:get_forecast", "mcp:air_quality"}
    forecast = ToolSpec.model_validate_json(rows["mcp:get_forecast"]["spec"])
    props = forecast.tool.function.parameters["properties"]
    assert forecast.tool.function.parameters["required"] == ["city"] and props["units"]["enum"] == ["metric", "imperial"]
    assert props["days"]["default"] == 3 and rows["mcp:get_forecast"]["topic"] == "погодный сервис"


def test_import_tools_reads_openai_jsonl(tmp_path: Path):
    path = tmp_path / "tools.jsonl"
    path.write_text("\n".join(json.dumps(t, ensure_ascii=False) for t in SLOPPY), encoding="utf-8")
    cands = import_tools(path)
    assert [c.name for c in cands] == ["setAlarm", "ok_tool"] and cands[1].tiers == SLOPPY[1]["tiers"]


def test_openapi_refs_into_another_local_file_are_followed(tmp_path: Path):
    (tmp_path / "common.yaml").write_text(yaml.safe_dump({
        "Color": {"type": "string", "enum": ["red", "green"], "description": "Colour"},
        "Box": {"type": "object", "required": ["color"], "description": "A box",
                "properties": {"color": {"$ref": "#/Color"}, "size": {"type": "integer", "description": "Size"}}}}),
        encoding="utf-8")
    doc = {"openapi": "3.1.0", "info": {"title": "Boxes", "version": "1"}, "paths": {"/boxes": {"post": {
        "operationId": "createBox", "summary": "Create a box", "description": "Creates a box of a colour and size.",
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "common.yaml#/Box"}}}}}}}}
    path = tmp_path / "api.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    (cand,) = import_tools(path)
    assert cand.error is None and cand.parameters["required"] == ["color"]
    assert cand.parameters["properties"]["color"]["enum"] == ["red", "green"]  # a $ref inside the other file
