"""The tool import table (docs/TOOLS_IMPORT.md): every fixture under tests/tools_import/data, imported
on the offline ``sim`` backend with the stage's defaults.

Columns: tools the source has; names kept (share of imported tools whose name is the source's, byte
for byte); import rate (imported / tools, ``lang: en``); ``x-*`` keys left in imported schemas; RU
yield (imported / tools with ``lang: ru, translate_descriptions: ru``, the descriptions translated
and back-translated by the sim).

    PYTHONPATH=$PWD python bench/tools_import_table.py            # this checkout
    PYTHONPATH=/work/main python bench/tools_import_table.py --before   # the code before, same fixtures
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", action="store_true", help="code without translate_descriptions")
    args = ap.parse_args()
    files = sorted((DATA / "openapi").glob("*.json")) + sorted((DATA / "mcp").glob("*.json")) + sorted(
        (DATA / "openai").glob("*.json"))
    print("| source | tools | names kept | import rate (en) | x-* keys left | RU yield (translate) |")
    print("|---|---|---|---|---|---|")
    totals = [0, 0, 0, 0, 0]
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
            print(f"| {path.parent.name}/{path.name} | {n} | {len(kept)}/{len(ok)} | {len(ok)}/{n} | {xkeys} | "
                  f"{len(ru)}/{n} |")
            for i, v in enumerate((n, len(kept), len(ok), xkeys, len(ru))):
                totals[i] += v
    n, kept_n, ok_n, x, ru_n = totals
    print(f"| **all {len(files)}** | {n} | {kept_n}/{ok_n} ({kept_n / max(ok_n, 1):.0%}) | {ok_n}/{n} "
          f"({ok_n / max(n, 1):.0%}) | {x} | {ru_n}/{n} ({ru_n / max(n, 1):.0%}) |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
