"""Configuration problems a new user meets, through ``fabrika run``: one line, exit 2, nothing written for
the failing items, and the same command after the fix gives the dataset an uninterrupted run gives.

* a stage wired to the wrong input (``if.responses`` fed from ``if.expand``: its rows have no
  ``messages`` column) — before, 88/88 ``internal_error`` rows and exit 0;
* a missing personas file for ``fc.plans`` — before, every plan an ``internal_error`` row, exit 0,
  and after creating the file the rerun "resumed" them: still 0 samples.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import polars as pl
import yaml
from typer.testing import CliRunner

import fabrika
from fabrika.cli.app import app
from fabrika.store import RunStore
from fabrika.store.versions import scan_version

runner = CliRunner()
DATA = Path(fabrika.__file__).parent / "data"


def write(tmp_path: Path, doc: dict[str, Any], name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def run(path: Path) -> Any:
    return runner.invoke(app, ["run", str(path), "--no-progress"])


def error_lines(output: str) -> list[str]:
    """The error lines of a run: a stop at run time (``error: stage …``) or, now that the contracts and
    the input preflight catch these before the first item, the config's own (``CONFIG: error: …``)."""
    return [line for line in output.splitlines() if line.startswith("error:") or ": error: " in line]


def dataset(run_dir: Path) -> pl.DataFrame:
    return scan_version(run_dir, "v1").sort("id").collect()


def no_rows_or_internal_errors(run_dir: Path, stage: str) -> bool:
    lf = RunStore(run_dir).scan_raw(stage)
    if lf is None:
        return True
    return not lf.collect()["reason"].cast(pl.Utf8).str.starts_with("internal_error").any()


def if_doc(tmp_path: Path, run: str, responses_input: str) -> dict[str, Any]:
    return {
        "name": "miswired", "seed": 5, "run_dir": str(tmp_path / run),
        "llm": {"backend": "sim", "sim": {"seed": 5}},
        "sandbox": {"workers": 1},
        "stages": [
            {"kind": "if.expand", "name": "if_expand", "library_seeds": False,
             "seed_files": [str(DATA / "instruct" / "seeds_ru.jsonl")], "target_count": 20,
             "candidates_per_request": 10},
            {"kind": "if.dedup", "name": "if_dedup", "input": "if_expand"},
            {"kind": "if.verifiers", "name": "if_verifiers", "input": "if_dedup", "k": 4},
            {"kind": "if.consistency", "name": "if_consistency", "input": "if_verifiers"},
            {"kind": "if.backtranslation", "name": "if_backtranslation", "input": "if_verifiers",
             "similarity": {"backend": "tfidf"}},
            {"kind": "if.queries", "name": "if_queries", "input": "if_verifiers", "queries_per_constraint": 1},
            {"kind": "if.responses", "name": "if_responses", "input": responses_input, "k": 1},
        ],
        "dataset": {"stages": ["if_responses"]},
    }


def test_a_stage_wired_to_the_wrong_input_exits_2_with_one_line_and_recovers_after_the_fix(tmp_path: Path) -> None:
    wrong = run(write(tmp_path, if_doc(tmp_path, "run", "if_expand"), "wrong"))
    assert wrong.exit_code == 2, wrong.output
    [line] = error_lines(wrong.output)
    # caught by the row contracts before any item runs: the stage, the column and the wiring are named
    assert "if_responses" in line and "'messages'" in line and "'if_expand'" in line
    assert "if.queries" in line  # which upstream kind would provide the column
    assert no_rows_or_internal_errors(tmp_path / "run", "if_responses")
    assert RunStore(tmp_path / "run").scan_raw("if_responses") is None  # nothing written for any item
    fixed = run(write(tmp_path, if_doc(tmp_path, "run", "if_queries"), "fixed"))
    assert fixed.exit_code == 0, fixed.output
    clean = run(write(tmp_path, if_doc(tmp_path, "clean", "if_queries"), "clean"))
    assert clean.exit_code == 0, clean.output
    got = dataset(tmp_path / "run")
    assert len(got) > 0 and got.equals(dataset(tmp_path / "clean"))


def fc_doc(tmp_path: Path, run: str, personas: Path) -> dict[str, Any]:
    return {
        "name": "personas", "seed": 7, "run_dir": str(tmp_path / run),
        "llm": {"backend": "sim", "sim": {"seed": 7}},
        "stages": [
            {"kind": "fc.tools_import", "lang": "ru", "sources": [{"path": "package://fc/openapi_demo.yaml"}]},
            {"kind": "fc.plans", "input": "fc.tools_import", "plans_per_topic": 2, "distractors": 1,
             "personas": {"ru": str(personas)}},
        ],
        "dataset": {"stages": ["fc.plans"]},
    }


def test_a_missing_personas_file_exits_2_naming_it_and_the_rerun_after_creating_it_is_whole(tmp_path: Path) -> None:
    personas = tmp_path / "personas_ru.jsonl"
    cfg = write(tmp_path, fc_doc(tmp_path, "run", personas), "fc")
    missing = run(cfg)
    assert missing.exit_code == 2, missing.output
    [line] = error_lines(missing.output)
    assert "personas" in line and str(personas) in line and "not found" in line  # preflight, before any item
    assert RunStore(tmp_path / "run").scan_raw("fc.plans") is None  # no plan became a row
    shutil.copy(DATA / "fc" / "personas_ru.jsonl", personas)
    again = run(cfg)  # the same command after the fix
    assert again.exit_code == 0, again.output
    clean = run(write(tmp_path, fc_doc(tmp_path, "clean", personas), "clean"))
    assert clean.exit_code == 0, clean.output
    got = dataset(tmp_path / "run")
    assert len(got) > 0 and got.equals(dataset(tmp_path / "clean"))
