"""Stages read typed rows, not dict keys: a ratchet on string-keyed reads of stage-input rows.

A *row read* is ``row["col"]`` or ``row.get("col")`` (a string literal key) on a name that holds a
row: a parameter named ``row`` or ``*_row``, or a loop variable over ``rows`` / ``*_rows`` / ``data`` /
``batch`` / ``chunk``. Stages read their inputs through the typed views beside their contracts
instead (``fabrika.generators.fc.columns.TopicRow``, ``Column.value(row)``, ``IFPromptRow.of(row)``,
``fabrika.filters.text.SampleRow``). The caps are today's counts: lower them when you convert a read,
never raise them (issue #28 asked for fewer than 20 per area; there were 169 in all).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "fabrika"
ROW_SOURCES = re.compile(r"^(rows|\w+_rows|data|batch|chunk)$")
#: area -> the most string-keyed row reads it may hold (what remains: ids of rows a stage reads from its own
#: input files, the raw ``spec`` JSON fc.plans keeps compressed, the runner's ``status`` column)
CAPS = {
    "generators/instruct": 5,   # 73 before the typed views, 32 after the first round
    "generators/general": 1,    # 27 before
    "generators/fc": 5,         # ~52 before
    "filters": 0,               # 30 before
    "generators": 11,           # all of generators/ (generic.py too)
}


def _row_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = fn.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg == "row" or a.arg.endswith("_row")}
    names.add("row")
    for node in ast.walk(fn):
        if not isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            continue
        base: ast.expr = node.iter
        while isinstance(base, ast.Call):  # enumerate(rows), sorted(rows), self.input_rows()
            fname = getattr(base.func, "id", "")
            base = base.args[0] if base.args and fname in ("enumerate", "sorted", "list", "reversed") else base.func
        source = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        target = node.target.elts[-1] if isinstance(node.target, ast.Tuple) and node.target.elts else node.target
        if ROW_SOURCES.match(source) and isinstance(target, ast.Name):
            names.add(target.id)
    return names


def row_reads(source: str) -> list[tuple[int, str, str]]:
    """``(line, name, key)`` of every string-keyed row read in ``source`` (one per line and key)."""
    found: set[tuple[int, str, str]] = set()
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = _row_names(fn)
        for node in ast.walk(fn):
            if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name)
                    and node.value.id in names and isinstance(node.slice, ast.Constant)
                    and isinstance(node.slice.value, str)):
                found.add((node.lineno, node.value.id, node.slice.value))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and isinstance(node.func.value, ast.Name) and node.func.value.id in names and node.args
                  and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.add((node.lineno, node.func.value.id, node.args[0].value))
    return sorted(found)


def area_reads(area: str) -> list[str]:
    out = []
    for path in sorted((ROOT / area).rglob("*.py")):
        out += [f"{path.relative_to(ROOT)}:{line} {name}[{key!r}]" for line, name, key in row_reads(path.read_text("utf-8"))]
    return out


def test_the_counter_sees_row_reads_and_only_those() -> None:
    src = '''
def process(self, row, other):
    a = row["text"]; b = row.get("lang"); c = other["x"]; row["out"] = 1
def run_all(self, rows):
    for r in rows:
        r["id"]
    for i, q in enumerate(self.input_rows()):
        q.get("topic")
    results = [{"passed": True}]
    return [x["passed"] for x in results]
def parse(self, tool_row, key):
    return tool_row["spec"], tool_row[key]
'''
    assert [(n, k) for _, n, k in row_reads(src)] == [("row", "lang"), ("row", "text"), ("r", "id"), ("q", "topic"),
                                                      ("tool_row", "spec")]


@pytest.mark.parametrize("area", sorted(CAPS))
def test_string_keyed_row_reads_do_not_grow(area: str) -> None:
    reads = area_reads(area)
    assert len(reads) <= CAPS[area], (f"{area}: {len(reads)} string-keyed row reads (cap {CAPS[area]}); read the row "
                                      "through its typed view instead:\n  " + "\n  ".join(reads))
    assert len(reads) < 20


def test_generators_and_filters_together_stay_below_20() -> None:
    assert len(area_reads("generators")) + len(area_reads("filters")) < 20  # issue #28: 169 before
