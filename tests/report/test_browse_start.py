"""`fabrika browse` starts without the rest of the CLI: its arguments are parsed by a lean entry, the explorer
server imports neither typer/rich nor the LLM client, yaml or jsonschema, and anything the lean entry does
not take goes to the typer app unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabrika.cli.entry import lean_browse_args

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("argv", "expected"), [
    (["browse", "runs/x"], {"run_dir": "runs/x", "port": 8765, "version": None}),
    (["browse", "runs/x", "--port", "0"], {"run_dir": "runs/x", "port": 0, "version": None}),
    (["browse", "--port=9000", "runs/x", "--version", "v2"], {"run_dir": "runs/x", "port": 9000, "version": "v2"}),
    (["browse", "runs/x", "--version=v1"], {"run_dir": "runs/x", "port": 8765, "version": "v1"}),
])
def test_plain_browse_arguments_are_taken_by_the_lean_entry(argv: list[str], expected: dict) -> None:
    assert lean_browse_args(argv) == expected


@pytest.mark.parametrize("argv", [
    [], ["status", "runs/x"], ["browse"], ["browse", "--help"], ["browse", "runs/x", "-h"],
    ["browse", "runs/x", "--port"], ["browse", "runs/x", "--port", "70000"], ["browse", "runs/x", "--port", "-1"],
    ["browse", "runs/x", "--port", "eight"], ["browse", "runs/x", "--prot", "1"], ["browse", "a", "b"],
    ["browse", "runs/x", "--port", "1", "--port", "2"],
])
def test_anything_else_goes_to_the_typer_app(argv: list[str]) -> None:
    assert lean_browse_args(argv) is None


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *([] if not code else ["-c", code]), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_browse_server_imports_no_cli_nor_llm_client() -> None:
    heavy = ("typer", "rich", "click", "jsonschema", "yaml", "fabrika.llm", "fabrika.cli.app", "fabrika.export.mix",
             "fabrika.textutil.lang", "pyarrow", "numpy")
    res = _python("import sys, fabrika.cli.entry, fabrika.export.explorer_server; "
                  f"print(__import__('json').dumps([m for m in {heavy!r} if m in sys.modules]))")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == []


def test_the_lean_browse_refuses_a_directory_that_is_not_a_run_like_the_cli(tmp_path: Path) -> None:
    res = _python("", "-m", "fabrika", "browse", str(tmp_path), "--port", "0")
    assert res.returncode == 2
    assert res.stderr.startswith("error: ") and "not a run directory" in res.stderr


def _many_shard_run(run: Path, skip_scored: set[int]) -> None:
    """A stage outside the dataset in 12 shards of 5 rows, every 4th row rejected, and a length scorer in 12
    shards whose scores gate-drop every 3rd row; the scorer leaves out the rows in ``skip_scored``."""
    from fabrika.pipeline.registry import load_run_modules
    from fabrika.store import RunStore

    store = RunStore(run)
    manifest = {"name": "many-shards", "backend": "sim", "order": ["dlg", "dlen"],
                "config": {"dataset": {"stages": []}, "filters": {"length": {"max_tokens": 100}}},
                "layout": {"dlg": {"inputs": [], "annotates": False}, "dlen": {"inputs": ["dlg"], "annotates": True}},
                "gate_groups": ["length"], "gate_modules": {"length": "fabrika.filters.length"},
                "gate_columns": {"length": ["len_completion_tokens", "len_total_tokens"]}}
    load_run_modules(manifest)
    for start in range(0, 60, 5):
        store.write("dlg", [{"id": f"r{i:03d}", "status": "rejected" if i % 4 == 3 else "ok",
                             "reason": "invalid_json: x" if i % 4 == 3 else None, "text": f"строка {i}"}
                            for i in range(start, start + 5)])
        store.write("dlen", [{"id": f"r{i:03d}", "status": "ok", "reason": None,
                              "len_total_tokens": 500 if i % 3 == 0 else 50}
                             for i in range(start, start + 5) if i not in skip_scored])
    store.write_manifest({**manifest, "status": "done",
                          "stages": {s: {**store.counts(s), "complete": True} for s in manifest["order"]}})


@pytest.mark.parametrize(("skip_scored", "probed"), [(set(), True), ({7}, True), ({5}, False)],
                         ids=["scorer-probe", "unscored-rejected-row", "scorer-misses-an-accepted-row"])
def test_a_first_page_over_many_shards_equals_the_indexed_page(tmp_path: Path, skip_scored: set[int], probed: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from fabrika.export.explorer import DROPPED, REJECTED, RunExplorer

    _many_shard_run(tmp_path / "run", skip_scored)
    parts: list[bool] = []
    real = RunExplorer._scan_part
    monkeypatch.setattr(RunExplorer, "_scan_part", lambda self, *a: parts.append((got := real(self, *a)) is not None)
                        or got)
    fresh = RunExplorer(tmp_path / "run")
    early = fresh.page("dlg", limit=12)
    assert "dlg" not in fresh._index  # read from the first shards only
    assert parts == [probed]  # the scorer's first shards are enough unless they miss a row the stage accepted
    indexed = RunExplorer(tmp_path / "run")
    indexed.index("dlg")
    assert early == indexed.page("dlg", limit=12)
    groups = {r["id"]: r["_group"] for r in early["rows"]}
    assert groups["r000"] == DROPPED and groups["r003"] == REJECTED and groups["r001"] == "ok"
    assert groups["r009"] == DROPPED and early["rows"][9]["_gate"] == "length.max_tokens"
    assert groups["r007"] == REJECTED and early["total"] == 60
