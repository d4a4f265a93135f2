"""The scorers inside a real pipeline run (sim backend): annotations, gates, refilter, export, report."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import polars as pl
import pytest

from fabrika.errors import StoreError
from fabrika.export.report import build_report
from fabrika.export.source import open_version
from fabrika.export.writer import ExportConfig, export
from fabrika.pipeline.config import load_config
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.versions import refilter

PROMPTS = [
    "Расскажи коротко, почему небо голубое и как это связано с рассеянием света",
    "Расскажи коротко, почему небо голубое и как это связано с рассеянием света!",
    "Как приготовить борщ дома за один час без лишних хлопот",
    "Explain in two sentences why the sky is blue during the day",
]


def test_scorers_gate_refilter_export_report(tmp_path: Path):
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n"
                                                    for p in PROMPTS), "utf-8")
    (tmp_path / "p.yaml").write_text(f"""
name: scorers
seed: 0
run_dir: {tmp_path / 'run'}
llm: {{backend: sim, model: sim}}
stages:
  - {{kind: generic.prompts, name: prompts, path: prompts.jsonl}}
  - {{kind: generic.complete, name: answers, input: prompts}}
  - {{kind: filter.language, name: lang, input: answers, text_field: prompt}}
  - {{kind: filter.dedup, name: dedup, input: answers, text_field: prompt, threshold: 0.7}}
  - {{kind: filter.length, name: length, input: answers}}
filters:
  language: {{allowed: [ru]}}
dataset:
  stages: [answers]
""", "utf-8")
    result = run_pipeline(load_config(tmp_path / "p.yaml"), progress=False)
    gates = result.version.funnel["gates"]["answers"]
    assert gates["in"] == 4 and gates["dropped_dedup.keep_representatives_only"] == 1
    assert gates["dropped_language.allowed"] == 1 and gates["out"] == 2
    kept = pl.read_parquet(result.version.path / "data" / "answers.parquet")
    assert {"lang_detected", "dup_cluster", "len_total_tokens"} <= set(kept.columns)
    assert set(kept["lang_detected"]) == {"ru"}

    # loosening the language gate would admit rows that dedup and length never scored (they read only the rows
    # that passed language at run time): the refilter refuses, names the count and the command that scores them
    loosen = ["filters.language.allowed=[ru, en]", "filters.dedup.keep_representatives_only=false"]
    with pytest.raises(StoreError, match=r"never saw \(1 by dedup, 2 by length\).*fabrika run .*p.yaml --cache-only "
                                         r"--set filters.dedup.keep_representatives_only=false "
                                         r"--set 'filters.language.allowed=\[\"ru\",\"en\"\]'"):
        refilter(result.run_dir, loosen)
    cfg = load_config(tmp_path / "p.yaml")
    rerun = run_pipeline(cfg.model_copy(update={"filters": {"language": {"allowed": ["ru", "en"]},
                                                                "dedup": {"keep_representatives_only": False}}}),
                         progress=False, cache_only=True)
    assert rerun.run_dir == result.run_dir
    info, _ = refilter(result.run_dir, loosen)
    assert info.rows == 4 and info.funnel["gates"]["answers"]["dropped_language.allowed"] == 0
    kept = pl.read_parquet(info.path / "data" / "answers.parquet")
    assert kept["dup_is_representative"].null_count() == 0 and kept["len_total_tokens"].null_count() == 0

    res = export(open_version(result.run_dir), ExportConfig(kind="sft", out=tmp_path / "sft"))
    ds = datasets.load_from_disk(str(tmp_path / "sft"))
    assert len(ds) == 4 and res.validation.ok, res.validation.summary()
    assert ds[0]["prompt"][0]["role"] == "user" and ds[0]["completion"][0]["role"] == "assistant"

    page = build_report(result.run_dir)
    assert "funnel.png" in page.read_text("utf-8")


def test_validate_reports_a_missing_benchmark_file(tmp_path: Path):
    from fabrika.pipeline.config import validate_file

    (tmp_path / "prompts.jsonl").write_text('{"prompt": "привет"}\n', "utf-8")
    (tmp_path / "bench.jsonl").write_text('{"prompt": "раз два три"}\n', "utf-8")
    doc = """
name: v
llm: {backend: sim}
stages:
  - {kind: generic.prompts, name: prompts, path: prompts.jsonl}
  - {kind: filter.decontam, name: decontam, input: prompts, benchmarks: [{path: BENCH}]}
dataset: {stages: [prompts]}
"""
    (tmp_path / "ok.yaml").write_text(doc.replace("BENCH", "bench.jsonl"), "utf-8")
    (tmp_path / "bad.yaml").write_text(doc.replace("BENCH", "missing.jsonl"), "utf-8")
    cfg, issues = validate_file(tmp_path / "ok.yaml")
    assert cfg is not None and not [i for i in issues if i.level == "error"]
    cfg, issues = validate_file(tmp_path / "bad.yaml")
    assert cfg is None and any("missing.jsonl" in str(i) for i in issues)
