"""The tool import table (docs/TOOLS_IMPORT.md): every fixture under tests/tools_import/data, imported
on the offline ``sim`` backend with the stage's defaults.

Columns: tools the source has; names kept (share of imported tools whose name is the source's, byte
for byte); import rate (imported / tools, ``lang: en``); ``x-*`` keys left in imported schemas; RU
yield (imported / tools with ``lang: ru, translate_descriptions: ru``, the descriptions translated
and back-translated by the sim); mock-rejected (OpenAPI specs only): the whole FC pipeline on the sim
(``fc.tools_import`` -> ``fc.plans`` (8 per topic) -> ``fc.dialogues`` -> ``fc.samples``), then
``fc.live_calls`` with ``openapi: {mock: true}`` over the samples' trained calls — calls the mock
refused / calls executed; mock-rejected planned calls: every call of every planner round of
``fc.plans`` (the rounds the plan check refused too, e.g. for a schema violation) sent to the same mock —
how much the mock catches before fabrika's own checks.

    PYTHONPATH=$PWD python bench/tools_import_table.py            # this checkout
    PYTHONPATH=/work/main python bench/tools_import_table.py --before   # the code before, same fixtures
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from fabrika.generators.fc.tool_sources import load_document
from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas.fc import ToolSpec
from fabrika.store import RunStore

DATA = Path(__file__).parents[1] / "tests" / "tools_import" / "data"


def source_names(path: Path) -> dict[str, str]:
    """Candidate key -> the name the source gives (operationId, MCP/OpenAI name)."""
    doc = load_document(path)
    out: dict[str, str] = {}
    if isinstance(doc, dict) and "openapi" in doc:
        for p, item in (doc.get("paths") or {}).items():
            for method, op in (item or {}).items():
                if isinstance(op, dict) and isinstance(op.get("operationId"), str):
                    out[f"openapi:{method.upper()} {p}"] = op["operationId"]
    elif isinstance(doc, dict) and "tools" in doc:
        out = {f"mcp:{t['name']}": t["name"] for t in doc["tools"]}
    else:
        out = {f"openai:#{i}": t["function"]["name"] for i, t in enumerate(doc)}
    return out


def schema_vendor_keys(schema: Any) -> int:
    """``x-*`` keywords in a schema (a property named ``x-…`` is a parameter, not counted)."""
    if isinstance(schema, list):
        return sum(schema_vendor_keys(v) for v in schema)
    if not isinstance(schema, dict):
        return 0
    n = 0
    for k, v in schema.items():
        if k.startswith("x-"):
            n += 1
        elif k == "properties" and isinstance(v, dict):
            n += sum(schema_vendor_keys(s) for s in v.values())
        else:
            n += schema_vendor_keys(v)
    return n


def run(path: Path, lang: str, translate: bool, work: Path) -> list[dict[str, Any]]:
    stage: dict[str, Any] = {"kind": "fc.tools_import", "lang": lang, "sources": [{"path": str(path)}]}
    if translate:
        stage["translate_descriptions"] = lang
    doc = {"name": "t", "run_dir": str(work / f"{path.stem}-{lang}-{translate}"), "seed": 1,
           "llm": {"backend": "sim"}, "stages": [stage]}
    cfg, issues = validate_data(doc, str(work / "t.yaml"), work)
    if cfg is None:  # e.g. the code before has no translate_descriptions
        return []
    result = run_pipeline(cfg, resume=False, progress=False)
    return RunStore(result.run_dir).scan_raw("fc.tools_import").collect().to_dicts()


def planned_calls(run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every ``(name, arguments)`` of every planner round kept in ``fc.plans`` (its ``rounds`` column, or the
    ``plan`` of one accepted in its first round)."""
    frame = RunStore(run_dir).scan_raw("fc.plans")
    out: list[tuple[str, dict[str, Any]]] = []
    for row in frame.collect().to_dicts() if frame is not None else []:
        plans = [rnd.get("plan") or {} for rnd in json.loads(row.get("rounds") or "[]")]
        if not plans and row.get("plan"):  # accepted in its first round: only the plan is kept
            plans = [json.loads(row["plan"])]
        for plan in plans:
            for step in plan.get("steps") or []:
                for group in step.get("rounds") or []:
                    out += [(c["name"], c.get("arguments") or {}) for c in group if isinstance(c, dict) and "name" in c]
    return out


def mock_planned(run_dir: Path) -> tuple[int, int, int, int, int]:
    """The planned calls (:func:`planned_calls`) on the run's spec mock, against the imported tool schema:
    ``(calls, schema-invalid, mock-refused, refused though schema-valid, accepted though schema-invalid)``."""
    import jsonschema

    from fabrika.generators.fc.live_openapi import MockedOpenApi
    from fabrika.generators.fc.tool_sources import Operation
    from fabrika.generators.fc.tools_import import run_operations

    calls = planned_calls(run_dir)
    ops = {n: Operation.from_dict(o) for n, o in run_operations(run_dir).items()}
    tools = RunStore(run_dir).scan_raw("fc.tools_import")
    schemas = {ToolSpec.model_validate_json(r["spec"]).name: ToolSpec.model_validate_json(r["spec"]).tool.function
               .parameters for r in (tools.collect().filter(status="ok").to_dicts() if tools is not None else [])}
    if not calls or not ops:
        return 0, 0, 0, 0, 0

    async def go() -> list[bool]:
        async with MockedOpenApi(ops) as ex:
            return [(await ex.call(n, a)).ok for n, a in calls]

    accepted = asyncio.run(go())
    valid = [n in schemas and jsonschema.Draft202012Validator(schemas[n]).is_valid(a) for n, a in calls]
    return (len(calls), valid.count(False), accepted.count(False),
            sum(v and not a for v, a in zip(valid, accepted)), sum(a and not v for v, a in zip(valid, accepted)))


def mock_rejections(path: Path, work: Path) -> tuple[int, int, list[str], tuple[int, ...]]:
    """``(refused, executed, reasons, planned)`` of the sim's generated calls on the spec's mock (module docs)."""
    stages: list[dict[str, Any]] = [
        {"kind": "fc.tools_import", "sources": [{"path": str(path)}]},
        {"kind": "fc.plans", "input": "fc.tools_import", "plans_per_topic": 8},
        {"kind": "fc.dialogues", "input": "fc.plans"}, {"kind": "fc.samples", "input": "fc.dialogues"},
        {"kind": "fc.live_calls", "input": "fc.samples", "openapi": {"mock": True}}]
    doc = {"name": "m", "run_dir": str(work / f"{path.stem}-mock"), "seed": 7, "llm": {"backend": "sim",
           "sim": {"seed": 7}}, "stages": stages, "dataset": {"stages": ["fc.samples"]}}
    cfg, issues = validate_data(doc, str(work / "t.yaml"), work)
    if cfg is None:  # the code before has no openapi live calls
        return 0, 0, [], (0, 0, 0, 0, 0)
    result = run_pipeline(cfg, resume=False, progress=False)
    planned = mock_planned(Path(result.run_dir))
    rows = RunStore(result.run_dir).scan_raw("fc.live_calls")
    if rows is None:
        return 0, 0, [], planned
    live = rows.collect().to_dicts()
    reasons = [e for r in live if r["live_errors"] for e in json.loads(r["live_errors"])]
    return sum(r["live_rejected"] or 0 for r in live), sum(r["live_calls"] or 0 for r in live), reasons, planned


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", action="store_true", help="code without translate_descriptions")
    ap.add_argument("--reasons", action="store_true", help="print the mock's reasons after the table")
    args = ap.parse_args()
    files = sorted((DATA / "openapi").glob("*.json")) + sorted((DATA / "mcp").glob("*.json")) + sorted(
        (DATA / "openai").glob("*.json"))
    print("| source | tools | names kept | import rate (en) | x-* keys left | RU yield (translate) | "
          "mock-rejected sim calls |")
    print("|---|---|---|---|---|---|---|")
    totals = [0, 0, 0, 0, 0]
    mock_total = [0, 0]
    planned_rows: list[tuple[str, tuple[int, ...]]] = []
    all_reasons: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            names = source_names(path)
            rows = run(path, "en", False, Path(tmp))
            ok = [r for r in rows if r["status"] == "ok"]
            kept = [r for r in ok if names.get(r["source"], r["name"]) == r["name"]]
            xkeys = sum(schema_vendor_keys(ToolSpec.model_validate_json(r["spec"]).tool.function.parameters)
                        for r in ok)
            ru = [r for r in run(path, "ru", not args.before, Path(tmp)) if r["status"] == "ok"]
            n = len(rows)
            mock = "—"
            if path.parent.name == "openapi":
                refused, executed, reasons, planned = mock_rejections(path, Path(tmp))
                mock = f"{refused}/{executed}"
                mock_total[0] += refused
                mock_total[1] += executed
                planned_rows.append((path.name, planned))
                all_reasons += [f"{path.stem}: {r}" for r in reasons]
            print(f"| {path.parent.name}/{path.name} | {n} | {len(kept)}/{len(ok)} | {len(ok)}/{n} | {xkeys} | "
                  f"{len(ru)}/{n} | {mock} |")
            sys.stdout.flush()
            for i, v in enumerate((n, len(kept), len(ok), xkeys, len(ru))):
                totals[i] += v
    n, kept_n, ok_n, x, ru_n = totals
    print(f"| **all {len(files)}** | {n} | {kept_n}/{ok_n} ({kept_n / max(ok_n, 1):.0%}) | {ok_n}/{n} "
          f"({ok_n / max(n, 1):.0%}) | {x} | {ru_n}/{n} ({ru_n / max(n, 1):.0%}) | "
          f"{mock_total[0]}/{mock_total[1]} ({mock_total[0] / max(mock_total[1], 1):.0%}) |")
    print("\n| spec | planned calls | break the tool schema | mock refused | refused, schema-valid | "
          "accepted, schema-invalid |")
    print("|---|---|---|---|---|---|")
    sums = [0] * 5
    for name, counts in planned_rows:
        print(f"| {name} | " + " | ".join(map(str, counts)) + " |")
        sums = [a + b for a, b in zip(sums, counts)]
    cells = [str(v) for v in sums]
    cells[1] += f" ({sums[1] / max(sums[0], 1):.0%})"
    cells[2] += f" ({sums[2] / max(sums[0], 1):.0%})"
    print(f"| **all {len(planned_rows)}** | " + " | ".join(cells) + " |")
    if args.reasons:
        for reason in all_reasons:
            print(f"- {reason[:200]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
