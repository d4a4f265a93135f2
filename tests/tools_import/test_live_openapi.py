"""``fc.live_calls`` against OpenAPI operations: each call sent as the HTTP request the spec defines, to a
loopback mock built from the spec (openapi-core validates it) or to a given base URL (loopback only here).

Over every public spec of tests/tools_import/data/openapi: a call that the imported tool's schema admits
passes the mock (except where the spec itself is stricter than any schema the import can show: pinned
below), and a call with a wrong type, a missing required parameter or an unknown enum value is refused
with the validator's reason. 5xx, 429 and a dead server leave the item pending; a server that cannot be
reached or a spec that cannot be served stops the stage (exit 2)."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import polars as pl
import pytest
from pydantic import ValidationError

from fabrika.errors import StageConfigError
from fabrika.gates import gate_lazy
from fabrika.generators.fc.live_calls import SPEC_PROBLEMS_FILE, LiveCallsConfig, LiveCallsStage
from fabrika.generators.fc.live_openapi import HttpCall, MockedOpenApi, OpenApiExecutor
from fabrika.generators.fc.openapi_mock import OpenApiMock, example_value
from fabrika.generators.fc.tool_sources import Candidate, Operation
from fabrika.generators.fc.tools_import import OPERATIONS_FILE, import_tools, repair_schema
from fabrika.schemas.tools import Tool
from fabrika.testing import run_stage, stage_context

pytest.importorskip("openapi_core", reason="the openapi extra is not installed")
DATA = Path(__file__).parent / "data" / "openapi"
SPECS = sorted(DATA.glob("*.json"))
PETSTORE = DATA / "petstore-3.0.json"

#: Tools whose spec refuses every call their imported schema admits, with the spec's reason: a recursive
#: ``$ref`` the import cuts to ``{"type": "object"}`` while the spec requires fields in it (``parent``
#: even requires a ``parent``: no finite value is valid), and a ``required`` naming no property (the
#: import drops it, the spec keeps it). The mock catching these is the point of running it.
STRICTER_SPEC = {"directCircular": "'id' is a required property (at parent)",
                 "multipleCircular": "'id' is a required property (at prev)",
                 "boolean_enumSupport": "'enum (with example) *required' is a required property"}


def imported(path: Path) -> list[tuple[Candidate, dict[str, Any], Operation]]:
    """The tools ``fc.tools_import`` would show models (repaired schema; refused ones left out) with their operations."""
    out = []
    for cand in import_tools(path):
        if cand.error or not cand.name or cand.operation is None:  # deprecated ones too (include_deprecated)
            continue
        params = repair_schema(cand.parameters, [])
        try:
            Tool.model_validate({"function": {"name": cand.name, "description": "d", "parameters": params}})
        except ValidationError:
            continue
        out.append((cand, params, Operation.from_dict(cand.operation)))
    return out


def _typed(schema: dict[str, Any]) -> str | None:
    t = schema.get("type")
    return next((x for x in t if x != "null"), None) if isinstance(t, list) else t


def mutants(params: dict[str, Any], args: dict[str, Any], op: Operation) -> dict[str, dict[str, Any]]:
    """Broken copies of a valid call: ``missing`` (a required argument dropped), ``type`` (a value of the
    wrong type, where HTTP can tell: numbers and booleans anywhere, strings in a JSON body) and ``enum``
    (a value outside the enum)."""
    props = params.get("properties") or {}
    out: dict[str, dict[str, Any]] = {}
    required = [r for r in params.get("required") or [] if r in args]
    if required:
        out["missing"] = {k: v for k, v in args.items() if k != required[0]}
    for name, sub in props.items():
        where = op.params.get(name, "body")
        kind = _typed(sub)
        if "type" not in out and where != "header" and kind in ("integer", "number", "boolean") and not sub.get("enum"):
            out["type"] = {**args, name: "not-a-number"}
        elif "type" not in out and where == "body" and kind == "string" and op.media and "json" in op.media:
            out["type"] = {**args, name: 12345}
        values = sub.get("enum") or (sub.get("items") or {}).get("enum")
        if "enum" not in out and values and all(isinstance(v, str) for v in values if v is not None):
            bad = "no_such_value_zz"
            out["enum"] = {**args, name: [bad] if kind == "array" else bad}
    return out


async def _check_spec(path: Path) -> dict[str, Any]:
    tools = imported(path)
    ops = {c.name: op for c, _, op in tools if c.name}
    report: dict[str, Any] = {"passed": [], "refused": {}, "mutants": {}}
    async with MockedOpenApi(ops, timeout_s=30) as ex:
        for cand, params, op in tools:
            args = example_value(params)
            name = cand.name or ""
            if jsonschema.Draft202012Validator(params).is_valid(args):
                verdict = await ex.call(name, args)
                if verdict.ok:
                    report["passed"].append(name)
                else:
                    report["refused"][name] = verdict.detail
            for kind, broken in mutants(params, args, op).items():
                report["mutants"][(name, kind)] = await ex.call(name, copy.deepcopy(broken))
        report["requests"] = [r for m in ex.mocks.values() for r in m.requests]
    return report


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_valid_calls_pass_the_mock_and_broken_ones_are_refused_with_a_reason(path: Path):
    report = asyncio.run(_check_spec(path))
    pinned = {n: STRICTER_SPEC[n] for n in report["refused"] if n in STRICTER_SPEC}
    assert {n: d for n, d in report["refused"].items() if n not in pinned} == {}, report["refused"]
    for name, reason in pinned.items():
        assert reason in report["refused"][name]
    assert report["passed"] or pinned, f"{path.name}: no call passed"
    for (name, kind), verdict in report["mutants"].items():
        assert not verdict.ok, f"{name} {kind}: accepted {verdict.detail}"
        assert verdict.detail.strip(), f"{name} {kind}: no reason"
    assert report["requests"], "nothing reached the mock"


def test_the_mutants_cover_every_kind_of_break_across_the_specs():
    kinds: dict[str, list[str]] = {"missing": [], "type": [], "enum": []}
    for path in SPECS:
        for cand, params, op in imported(path):
            for kind in mutants(params, example_value(params), op):
                kinds[kind].append(f"{path.stem}:{cand.name}")
    assert {k: len(v) >= 8 for k, v in kinds.items()} == {"missing": True, "type": True, "enum": True}, kinds


def test_reasons_name_the_parameter_and_the_rule():
    async def go() -> list[str]:
        tools = {c.name: op for c, _, op in imported(PETSTORE) if c.name}
        async with MockedOpenApi(tools) as ex:
            calls = [("findPetsByStatus", {"status": ["gone"]}), ("getPetById", {"petId": "abc"}),
                     ("addPet", {"name": "Рекс"}), ("addPet", {"name": 5, "photoUrls": ["a"]}),
                     ("getPetById", {}), ("deletePet", {"petId": 1, "extra": 1}), ("noSuchOp", {})]
            return [(await ex.call(n, a)).detail for n, a in calls]

    enum, cast, missing, wrong, no_path, extra, unknown = asyncio.run(go())
    assert enum.startswith("400: Invalid query parameter: status") and "'gone' is not one of" in enum
    assert "petId" in cast and "integer" in cast
    assert "'photoUrls' is a required property" in missing
    assert "5 is not of type 'string' (at name)" in wrong
    assert no_path == "not sent: path parameter 'petId' missing (GET /pet/{petId})"
    assert "'extra'" in extra and unknown.startswith("unknown tool")


def test_a_call_becomes_the_request_the_operation_defines():
    op = Operation(method="put", path="/stores/{store id}/items/{itemId}",
                   params={"store id": "path", "itemId": "path", "tags": "query", "dry": "query", "X-Trace": "header"},
                   body="merged", media="application/json")
    call = HttpCall(op, {"store id": "a/b", "itemId": 7, "tags": ["x", "y"], "dry": True, "X-Trace": "t1",
                         "name": "чай", "price": 2.5})
    assert call.problem is None and call.method == "PUT"
    assert call.path == "/stores/a%2Fb/items/7"
    assert call.query == [("tags", "x"), ("tags", "y"), ("dry", "true")] and call.headers == {"X-Trace": "t1"}
    assert call.body == {"name": "чай", "price": 2.5}
    wrapped = HttpCall(Operation("post", "/x", {}, body="wrapped", media="application/json"), {"body": [1, 2]})
    assert wrapped.body == [1, 2] and wrapped.problem is None


def test_the_import_records_each_operation_beside_an_unchanged_tool_schema(tmp_path: Path):
    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.schemas.fc import ToolSpec
    from fabrika.store import RunStore

    doc = {"name": "ops", "run_dir": str(tmp_path / "run"), "seed": 5, "llm": {"backend": "sim"},
           "stages": [{"kind": "fc.tools_import", "sources": [{"path": str(PETSTORE)}]}]}
    cfg, issues = validate_data(doc, str(tmp_path / "t.yaml"), tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    result = run_pipeline(cfg, resume=False, progress=False)
    ops = json.loads((Path(result.run_dir) / "stages" / "fc.tools_import" / OPERATIONS_FILE).read_text("utf-8"))
    assert ops["getPetById"] == {"method": "get", "path": "/pet/{petId}", "params": {"petId": "path"},
                                 "body": None, "media": None, "spec": str(PETSTORE.resolve())}
    assert ops["updatePetWithForm"] == {"method": "post", "path": "/pet/{petId}", "params": {"petId": "path"},
                                        "body": "merged", "media": "application/x-www-form-urlencoded",
                                        "spec": str(PETSTORE.resolve())}
    assert ops["addPet"]["body"] == "merged" and ops["addPet"]["media"] == "application/json"
    assert ops["deletePet"]["params"] == {"api_key": "header", "petId": "path"}  # a header, not in the schema
    rows = RunStore(result.run_dir).scan_raw("fc.tools_import").collect().filter(status="ok").to_dicts()
    for row in rows:
        params = ToolSpec.model_validate_json(row["spec"]).tool.function.parameters
        assert set(params) <= {"type", "properties", "required"} and "api_key" not in params["properties"]


# -- the stage ---------------------------------------------------------------------------------
def _sample(sid: str, *calls: tuple[str, dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    completion = [{"role": "assistant", "content": text, "train": True,
                   "tool_calls": [{"id": f"call_{sid}_{i}", "name": n, "arguments": a}
                                  for i, (n, a) in enumerate(calls)] or None}]
    prompt = [{"role": "user", "content": "Найди доступных питомцев"}]
    return {"id": sid, "status": "ok", "reason": None, "prompt": json.dumps(prompt, ensure_ascii=False),
            "completion": json.dumps(completion, ensure_ascii=False)}


ROWS = [
    _sample("valid", ("findPetsByStatus", {"status": ["available", "sold"]}), ("getPetById", {"petId": 3})),
    _sample("bad_enum", ("findPetsByStatus", {"status": ["lost"]})),
    _sample("bad_type", ("getPetById", {"petId": "три"})),
    _sample("missing", ("addPet", {"name": "Барсик"})),
    _sample("renamed", ("get_pet", {"petId": 1})),  # an exported name the mapping puts back
    _sample("unknown", ("getPet", {"petId": 1})),
    _sample("text", text="Питомцы найдены."),
]


def _write_operations(run_dir: Path, path: Path = PETSTORE) -> None:
    stage_dir = run_dir / "stages" / "fc.tools_import"
    stage_dir.mkdir(parents=True, exist_ok=True)
    ops = {c.name: c.operation for c in import_tools(path) if c.name and c.operation}
    (stage_dir / OPERATIONS_FILE).write_text(json.dumps(ops), encoding="utf-8")
    (stage_dir / "tool_names.json").write_text(json.dumps({"get_pet": "getPetById"}), encoding="utf-8")


def _run(tmp_path: Path, rows: list[dict[str, Any]], openapi: dict[str, Any], fault: Any = None,
         write_ops: bool = True) -> Any:
    run_dir = tmp_path / "run"
    if write_ops:
        _write_operations(run_dir)

    async def go() -> Any:
        served = None
        if fault is not None:  # a separate loopback server standing in for the user's, answering with faults
            served = await OpenApiMock(PETSTORE, fault=fault).start()
        cfg = dict(openapi)
        if cfg.get("base_url") == "SERVED" and served is not None:
            cfg["base_url"] = served.base_url
        config = LiveCallsConfig(input="fc.samples", openapi=cfg, timeout_s=20)
        try:
            async with stage_context(rows={"fc.samples": rows}, run_dir=run_dir) as ctx:
                return await run_stage(LiveCallsStage, config, ctx, strict=False)
        finally:
            if served is not None:
                await served.close()

    return asyncio.run(go())


def test_the_mock_marks_the_calls_the_spec_refuses_and_the_gate_drops_those_samples(tmp_path: Path):
    result = _run(tmp_path, ROWS, {"mock": True})
    assert not result.pending and not result.failures and len(result.ok) == len(ROWS)
    scores = {r["id"]: (r["live_calls"], r["live_rejected"]) for r in result.rows}
    assert scores == {"valid": (2, 0), "bad_enum": (1, 1), "bad_type": (1, 1), "missing": (1, 1),
                      "renamed": (1, 0), "unknown": (1, 1), "text": (None, None)}
    errors = {r["id"]: json.loads(r["live_errors"]) for r in result.rows if r["live_errors"]}
    assert "'lost' is not one of ['available', 'pending', 'sold']" in errors["bad_enum"][0]
    assert errors["bad_type"][0].startswith("getPetById: 400: Path parameter error: petId")
    assert "'photoUrls' is a required property" in errors["missing"][0]
    assert errors["unknown"][0].startswith("getPet: unknown tool")
    frame = pl.DataFrame([{k: r[k] for k in ("id", "status", "live_calls", "live_rejected")} for r in result.rows])
    kept = set(gate_lazy(frame.lazy(), {"live_calls": {"max_rejected": 0}}).collect()["id"])
    assert kept == {"valid", "renamed", "text"}


def test_a_base_url_gets_the_same_requests_and_verdicts(tmp_path: Path):
    seen: list[tuple[str, str]] = []

    def record(method: str, path: str) -> None:
        seen.append((method, path))

    result = _run(tmp_path, ROWS[:3], {"base_url": "SERVED"}, fault=record)
    assert {r["id"]: r["live_rejected"] for r in result.rows} == {"valid": 0, "bad_enum": 1, "bad_type": 1}
    assert {("GET", "/pet/findByStatus"), ("GET", "/pet/3"), ("GET", "/pet/три")} <= set(seen)


@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_server_answering_5xx_or_429_leaves_the_items_pending(tmp_path: Path, status: int):
    def fail(method: str, path: str) -> int | None:
        return status if path != "/" else None  # reachable at start, failing on calls

    result = _run(tmp_path, ROWS[:2], {"base_url": "SERVED"}, fault=fail)
    assert sorted(result.pending) == ["bad_enum", "valid"] and not result.rows


def test_a_server_that_refuses_the_credentials_stops_the_stage_naming_headers(tmp_path: Path):
    result = _run(tmp_path, ROWS[:1], {"base_url": "SERVED"}, fault=lambda m, p: 401 if p != "/" else None)
    assert not result.rows and [f.kind for f in result.failures] == ["config"]  # exit 2, nothing written
    assert result.failures[0].exit_code == 2 and "answered 401" in str(result.failures[0])
    assert "openapi.headers" in str(result.failures[0])


def test_an_unreachable_base_url_stops_the_stage_naming_it(tmp_path: Path):
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StageConfigError, match=rf"127.0.0.1:{port} is not reachable.*openapi.base_url"):
        _run(tmp_path, ROWS[:1], {"base_url": f"http://127.0.0.1:{port}"})


def test_a_spec_that_cannot_be_served_stops_the_stage_naming_it(tmp_path: Path):
    no_ops = tmp_path / "empty.json"
    no_ops.write_text(json.dumps({"openapi": "3.0.0", "info": {"title": "t", "version": "1"}, "paths": {}}))
    ops = {"getX": {"method": "get", "path": "/x", "params": {}, "body": None, "media": None, "spec": str(no_ops)}}
    (tmp_path / "run" / "stages" / "imp").mkdir(parents=True)
    (tmp_path / "run" / "stages" / "imp" / OPERATIONS_FILE).write_text(json.dumps(ops))
    with pytest.raises(StageConfigError, match=r"empty.json: the OpenAPI document cannot be served: .*no operations"):
        _run(tmp_path, [_sample("a", ("getX", {}))], {"mock": True}, write_ops=False)
    not_spec = tmp_path / "tools.json"
    not_spec.write_text("[]")
    with pytest.raises(StageConfigError, match="cannot be served"):
        _run(tmp_path, [_sample("a", ("getX", {}))], {"mock": True, "spec": str(not_spec)}, write_ops=False)
    gone = dict(ops, getX={**ops["getX"], "spec": str(tmp_path / "gone.json")})
    (tmp_path / "run" / "stages" / "imp" / OPERATIONS_FILE).write_text(json.dumps(gone))
    with pytest.raises(StageConfigError, match="gone.json cannot be served: the file is gone"):
        _run(tmp_path, [_sample("a", ("getX", {}))], {"mock": True}, write_ops=False)
    with pytest.raises(StageConfigError, match="no OpenAPI operations"):
        _run(tmp_path / "empty", ROWS[:1], {"mock": True}, write_ops=False)


def test_a_sloppy_spec_is_served_and_an_operation_it_cannot_check_stops_the_stage(tmp_path: Path):
    """The shipped demo spec breaks the OpenAPI schema on purpose (a string default of a boolean, a ``$ref`` to a
    parameter that does not exist): the mock serves it; a call reaching the broken operation is a config stop
    naming it, never a pending item retried forever."""
    import yaml

    spec_path = Path(__file__).parents[2] / "fabrika" / "data" / "fc" / "openapi_demo.yaml"

    async def go() -> tuple[list[str], Any, Any]:
        ops = {c.name: Operation.from_dict(c.operation) for c in import_tools(spec_path) if c.name and c.operation}
        assert "listFines" not in ops  # the import refuses it (unresolved_ref); given a spec of its own, a call may come
        ops["listFines"] = Operation("get", "/fines", {}, spec=str(spec_path.resolve()))
        async with MockedOpenApi(ops) as ex:
            problems = [p for m in ex.mocks.values() for p in m.spec_problems]
            ok = await ex.call("searchBooks", {"query": "Толстой", "available_only": True, "genre": "роман"})
            bad = await ex.call("searchBooks", {"query": "Толстой", "genre": "комикс"})
            try:
                await ex.call("listFines", {})
            except StageConfigError as exc:
                return problems, (ok, bad), exc
        return problems, (ok, bad), None

    assert "listFines" in {op.get("operationId") for item in yaml.safe_load(spec_path.read_text("utf-8"))["paths"]
                           .values() for op in item.values() if isinstance(op, dict)}
    problems, (ok, bad), stop = asyncio.run(go())
    assert problems and "'false' is not of type 'boolean'" in problems[0]
    assert ok.ok and not bad.ok and "'комикс' is not one of" in bad.detail
    assert stop is not None and "GET /fines cannot be checked" in str(stop) and "ReaderId" in str(stop)


def test_a_server_that_dies_mid_run_leaves_the_items_pending(tmp_path: Path):
    async def go() -> Any:
        ops = {c.name: Operation.from_dict(c.operation) for c in import_tools(PETSTORE) if c.name and c.operation}
        mock = await OpenApiMock(PETSTORE).start()
        ex = await OpenApiExecutor(ops, mock.base_url, timeout_s=5).start()
        first = await ex.call("getPetById", {"petId": 1})
        await mock.close()
        try:
            await ex.call("getPetById", {"petId": 1})
        except Exception as exc:  # noqa: BLE001 - the test looks at its type
            return first, exc
        finally:
            await ex.close()
        return first, None

    from fabrika.errors import TransientError

    first, exc = asyncio.run(go())
    assert first.ok and isinstance(exc, TransientError)


def test_validate_names_the_extra_when_openapi_core_is_missing(monkeypatch: pytest.MonkeyPatch):
    import importlib.util

    from fabrika.generators.fc import live_calls

    real = importlib.util.find_spec
    monkeypatch.setattr(live_calls.importlib.util, "find_spec", lambda name, *a: None if name == "openapi_core"
                        else real(name, *a))
    cfg = LiveCallsConfig(input="fc.samples", openapi={"mock": True, "spec": str(PETSTORE)})
    assert LiveCallsStage.check_config(cfg, None) == [
        ("openapi.mock", "the OpenAPI mock needs openapi-core: pip install 'fabrika[openapi]'")]


def test_the_config_takes_exactly_one_server_and_suggests_misspelt_keys(tmp_path: Path):
    import yaml

    from fabrika.pipeline.config import validate_data

    root = Path(__file__).parents[2] / "configs"

    def issues(config: str, stage: dict[str, Any]) -> list[str]:
        d = yaml.safe_load((root / config).read_text("utf-8"))
        d["stages"].append({"kind": "fc.live_calls", "name": "fc_live", "input": "fc.samples", **stage})
        cfg, found = validate_data(d, str(root / config), root)
        return [str(i) for i in found if i.level == "error"]

    assert issues("fc_import_demo.yaml", {"openapi": {"mock": True}}) == []  # it imports an OpenAPI document
    assert issues("fc_demo.yaml", {"openapi": {"mock": True, "spec": str(PETSTORE)}}) == []
    # LLM-written tools have no operations: refused at validate, before any LLM call
    assert any("no fc.tools_import stage of this pipeline reads an OpenAPI document" in i
               for i in issues("fc_demo.yaml", {"openapi": {"mock": True}}))
    assert any("is not an OpenAPI 3.0/3.1 document" in i for i in issues(
        "fc_demo.yaml", {"openapi": {"mock": True, "spec": str(DATA.parent / "openai" / "restaurant_tools.json")}}))
    assert any("did you mean 'mock'" in i for i in issues("fc_import_demo.yaml", {"openapi": {"mokc": True}}))
    assert any("exactly one of 'command'" in i for i in issues("fc_import_demo.yaml", {"openapi": {"mock": True},
                                                                                       "command": ["x"]}))
    assert any("exactly one of 'mock: true'" in i for i in issues(
        "fc_import_demo.yaml", {"openapi": {"mock": True, "base_url": "http://127.0.0.1:1"}}))
    assert any("http://" in i for i in issues("fc_import_demo.yaml", {"openapi": {"base_url": "127.0.0.1:8080"}}))


def test_the_shipped_import_demo_runs_its_openapi_calls_on_the_mock_and_leaves_mcp_tools_alone(tmp_path: Path):
    """configs/fc_import_demo.yaml imports an OpenAPI document and an MCP tools/list: the mock executes the calls
    to the OpenAPI tools; calls to the MCP file's tools have no HTTP operation and are not executed (not refused)."""
    import yaml

    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.schemas import Sample, from_row
    from fabrika.store import RunStore

    root = Path(__file__).parents[2] / "configs"
    d = yaml.safe_load((root / "fc_import_demo.yaml").read_text("utf-8"))
    d["run_dir"] = str(tmp_path / "run")
    d["stages"].append({"kind": "fc.live_calls", "input": "fc.samples", "openapi": {"mock": True}})
    cfg, found = validate_data(d, str(root / "fc_import_demo.yaml"), root)
    assert cfg is not None, [str(i) for i in found]
    result = run_pipeline(cfg, resume=False, progress=False)
    store = RunStore(result.run_dir)
    ops = json.loads((Path(result.run_dir) / "stages" / "fc.tools_import" / OPERATIONS_FILE).read_text("utf-8"))
    http = {n for n, op in ops.items() if op}
    assert http and {n for n, op in ops.items() if op is None}  # both kinds of source
    samples = {r["id"]: from_row(Sample, r) for r in store.scan_raw("fc.samples").collect().filter(status="ok")
               .iter_rows(named=True)}
    live = {r["id"]: r for r in store.scan_raw("fc.live_calls").collect().to_dicts()}
    expected = {sid: sum(c.name in http for m in s.completion for c in m.tool_calls or []) for sid, s in samples.items()}
    assert {sid: live[sid]["live_calls"] or 0 for sid in samples} == expected
    assert sum(expected.values()) > 0
    errors = [e for r in live.values() if r["live_errors"] for e in json.loads(r["live_errors"])]
    assert not [e for e in errors if "unknown tool" in e], errors
    # the demo spec breaks the OpenAPI schema on purpose: served, and the validator's verdict is kept beside the shards
    problems = json.loads((Path(result.run_dir) / "stages" / "fc.live_calls" / SPEC_PROBLEMS_FILE).read_text("utf-8"))
    assert [Path(k).name for k in problems] == ["openapi_demo.yaml"]


def test_russian_tools_from_an_english_spec_still_call_the_api_s_own_names_and_enums(tmp_path: Path):
    """``translate_descriptions: ru``: the whole FC pipeline on the sim, then ``fc.live_calls`` on the mock.
    Descriptions are Russian, but every executed call names an operationId byte for byte and the enum values
    the translated schemas carry are the spec's (the mock accepts them)."""
    from fabrika.generators.fc.common import cyrillic_share
    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.schemas.fc import ToolSpec
    from fabrika.store import RunStore

    doc = {"name": "ru", "run_dir": str(tmp_path / "run"), "seed": 7, "llm": {"backend": "sim", "sim": {"seed": 7}},
           "stages": [{"kind": "fc.tools_import", "translate_descriptions": "ru", "sources": [{"path": str(PETSTORE)}]},
                      {"kind": "fc.plans", "input": "fc.tools_import", "plans_per_topic": 8},
                      {"kind": "fc.dialogues", "input": "fc.plans"},
                      {"kind": "fc.samples", "input": "fc.dialogues"},
                      {"kind": "fc.live_calls", "input": "fc.samples", "history": True, "openapi": {"mock": True}}],
           "dataset": {"stages": ["fc.samples"]}, "filters": {"live_calls": {"max_rejected": 0}}}
    cfg, issues = validate_data(doc, str(tmp_path / "t.yaml"), tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    result = run_pipeline(cfg, resume=False, progress=False)
    store = RunStore(result.run_dir)
    live = store.scan_raw("fc.live_calls").collect().to_dicts()
    assert live and sum(r["live_calls"] or 0 for r in live) > 0
    errors = [e for r in live if r["live_errors"] for e in json.loads(r["live_errors"])]
    assert not [e for e in errors if "unknown tool" in e], errors  # every name reached its operation
    spec_ids = {op["operationId"] for item in json.loads(PETSTORE.read_text("utf-8"))["paths"].values()
                for op in item.values()}
    tools = [ToolSpec.model_validate_json(r["spec"]) for r in store.scan_raw("fc.tools_import").collect()
             .filter(status="ok").to_dicts()]
    assert tools and {t.name for t in tools} <= spec_ids
    assert all(cyrillic_share(t.tool.function.description) > 0.5 for t in tools)
    # a call per translated tool, its values from the translated schema (enums included), on the same run's mock
    rows = [_sample(f"t{i}", (t.name, example_value(t.tool.function.parameters))) for i, t in enumerate(tools)]
    status_call = next(json.loads(r["completion"])[0]["tool_calls"][0]["arguments"] for r in rows
                       if json.loads(r["completion"])[0]["tool_calls"][0]["name"] == "findPetsByStatus")
    assert status_call == {"status": ["available"]}  # the spec's enum value, byte for byte
    config = LiveCallsConfig(input="fc.samples", openapi={"mock": True}, timeout_s=20)

    async def go() -> Any:
        async with stage_context(rows={"fc.samples": rows}, run_dir=Path(result.run_dir)) as ctx:
            return await run_stage(LiveCallsStage, config, ctx, strict=False)

    run = asyncio.run(go())
    refused = {r["id"]: r["live_errors"] for r in run.rows if r["live_rejected"]}
    assert len(run.rows) == len(tools) and refused == {}, refused


STYLED = {"openapi": "3.0.3", "info": {"title": "styles", "version": "1"}, "paths": {
    "/reports/{ids}/{period}": {"get": {"operationId": "getReports", "parameters": [
        {"name": "ids", "in": "path", "required": True, "schema": {"type": "array", "items": {"type": "integer"}}},
        {"name": "period", "in": "path", "required": True, "style": "simple", "explode": False,
         "schema": {"type": "array", "items": {"type": "string", "enum": ["2025", "2026"]}}},
        {"name": "filter", "in": "query", "style": "deepObject", "explode": True, "schema": {
            "type": "object", "properties": {"city": {"type": "string"}, "min": {"type": "integer"}}}},
        {"name": "tags", "in": "query", "explode": False, "schema": {"type": "array", "items": {"type": "string"}}},
        {"name": "levels", "in": "query", "style": "pipeDelimited", "explode": False,
         "schema": {"type": "array", "items": {"type": "integer", "maximum": 5}}}],
        "responses": {"200": {"description": "ok", "content": {"application/json": {
            "schema": {"type": "object", "required": ["total"], "properties": {"total": {"type": "integer"}}}}}}}}}}}


def test_label_and_matrix_path_styles():
    from fabrika.generators.fc.live_openapi import _simple

    assert _simple(["a", "b"], "label") == ".a,b" and _simple(["a", "b"], "label", True) == ".a.b"
    assert _simple(["a", "b"], "matrix", False, "id") == ";id=a,b"
    assert _simple(["a", "b"], "matrix", True, "id") == ";id=a;id=b"
    assert _simple({"x": 1, "y": 2}, "matrix", True, "id") == ";x=1;y=2"
    assert _simple({"x": 1}, "simple") == "x,1" and _simple({"x": 1}, "simple", True) == "x=1"
    assert _simple(True) == "true"


def test_parameters_follow_their_style_and_explode_and_the_mock_reads_them_back(tmp_path: Path):
    spec = tmp_path / "styles.json"
    spec.write_text(json.dumps(STYLED), encoding="utf-8")
    (cand,) = import_tools(spec)
    op = Operation.from_dict(cand.operation or {})
    assert op.styles == {"period": ["simple", False], "filter": ["deepObject", True], "tags": ["form", False],
                         "levels": ["pipeDelimited", False]}
    good = {"ids": [3, 4], "period": ["2025", "2026"], "filter": {"city": "Казань", "min": 2}, "tags": ["a", "b"],
            "levels": [1, 5]}
    call = HttpCall(op, good)
    assert call.path == "/reports/3,4/2025,2026"
    assert call.query == [("filter[city]", "Казань"), ("filter[min]", "2"), ("tags", "a,b"), ("levels", "1|5")]

    async def go() -> list[Any]:
        async with MockedOpenApi({"getReports": op}) as ex:
            verdicts = [await ex.call("getReports", good),
                        await ex.call("getReports", {**good, "levels": [1, 9]}),
                        await ex.call("getReports", {**good, "filter": {"min": "много"}}),
                        await ex.call("getReports", {**good, "period": ["1999"]})]
            return verdicts + [ex.mocks[str(spec.resolve())].requests[1]]  # [0]: the start-up probe, GET /

    ok, too_big, not_int, bad_period, seen = asyncio.run(go())
    assert ok.ok and json.loads(ok.detail) == {"total": 1}, ok.detail  # generated from the response schema
    assert not too_big.ok and "levels" in too_big.detail and "9 is greater than the maximum of 5" in too_big.detail
    assert not not_int.ok and "filter" in not_int.detail
    assert not bad_period.ok and "'1999' is not one of" in bad_period.detail
    assert seen["path"] == "/reports/3,4/2025,2026" and ["filter[city]", "Казань"] in seen["query"]


def test_a_server_that_does_not_answer_in_time_leaves_the_call_unjudged():
    from aiohttp import web

    from fabrika.errors import TransientError

    async def go() -> BaseException | None:
        release = asyncio.Event()

        async def handler(request: web.Request) -> web.Response:
            if request.path != "/":
                await release.wait()  # never answers within the executor's timeout
            return web.json_response({})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        ops = {"getPetById": Operation("get", "/pet/{petId}", {"petId": "path"})}
        ex = await OpenApiExecutor(ops, f"http://{host}:{port}", timeout_s=0.3).start()
        try:
            await ex.call("getPetById", {"petId": 1})
        except BaseException as exc:  # noqa: BLE001 - the test looks at its type
            return exc
        finally:
            release.set()
            await ex.close()
            await runner.cleanup()
        return None

    exc = asyncio.run(go())
    assert isinstance(exc, TransientError) and "GET /pet/1 failed" in str(exc)


def test_the_sim_s_trained_calls_on_all_specs_pass_the_mock_and_its_broken_history_calls_do_not(tmp_path: Path):
    """One FC pipeline over all 13 specs on the sim. The trained calls (completions) all pass their spec's mock;
    with ``history: true`` the mock also refuses the calls the sim breaks on purpose in error-recovery dialogues
    (a misspelt tool, a missing argument), and only calls the dialogue's tool answered with an error."""
    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store import RunStore

    doc = {"name": "all", "run_dir": str(tmp_path / "run"), "seed": 7, "llm": {"backend": "sim", "sim": {"seed": 7}},
           "stages": [{"kind": "fc.tools_import", "sources": [{"path": str(p)} for p in SPECS]},
                      {"kind": "fc.plans", "input": "fc.tools_import", "plans_per_topic": 4},
                      {"kind": "fc.dialogues", "input": "fc.plans"}, {"kind": "fc.samples", "input": "fc.dialogues"},
                      {"kind": "fc.live_calls", "input": "fc.samples", "openapi": {"mock": True}}],
           "dataset": {"stages": ["fc.samples"]}}
    cfg, issues = validate_data(doc, str(tmp_path / "t.yaml"), tmp_path)
    assert cfg is not None, [str(i) for i in issues]
    result = run_pipeline(cfg, resume=False, progress=False)
    ops = json.loads((Path(result.run_dir) / "stages" / "fc.tools_import" / OPERATIONS_FILE).read_text("utf-8"))
    assert ops["addPet"]["spec"].endswith("petstore-3.0.json")  # the first of a name wins, as in the import
    store = RunStore(result.run_dir)
    live = store.scan_raw("fc.live_calls").collect().to_dicts()
    assert sum(r["live_calls"] or 0 for r in live) >= 20
    assert {r["id"]: r["live_errors"] for r in live if r["live_rejected"]} == {}
    samples = store.scan_raw("fc.samples").collect().filter(status="ok").to_dicts()
    config = LiveCallsConfig(input="fc.samples", history=True, openapi={"mock": True}, timeout_s=20)

    async def go() -> Any:
        async with stage_context(rows={"fc.samples": samples}, run_dir=Path(result.run_dir)) as ctx:
            return await run_stage(LiveCallsStage, config, ctx, strict=False)

    run = asyncio.run(go())
    refused = {r["id"]: json.loads(r["live_errors"]) for r in run.rows if r["live_rejected"]}
    assert refused  # the sim's error-recovery dialogues break calls on purpose
    by_id = {s["id"]: s for s in samples}
    for sid, errors in refused.items():
        messages = json.loads(by_id[sid]["prompt"])
        answered = {m.get("tool_call_id"): m.get("content") or "" for m in messages if m["role"] == "tool"}
        broken = {c["name"] for m in messages for c in m.get("tool_calls") or [] if "error" in answered.get(c["id"], "")}
        assert {e.split(":")[0] for e in errors} <= broken, (sid, errors)
