"""The shipped IF demo on ``sim`` produces multi-constraint and multi-turn samples that pass their own checks."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from fabrika.constraints import verify_all
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas import Sample, from_row
from fabrika.schemas.instruct import IFGroundTruth
from tests.demo_runs import copy_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(if_demo_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy (a test here resumes it) of the session's run of the shrunk IF demo (tests/conftest.py).
    The multi-constraint and dialogue chains read nothing of the single-constraint chain (their inputs are
    if_verifiers or nothing; dedup and language are per table), so their tables are those of a run without it."""
    return copy_run(if_demo_run, tmp_path_factory.mktemp("multi_demo") / "run")


@pytest.fixture(scope="module")
def version(run_dir: Path) -> Path:
    return run_dir / "versions" / "v1" / "data"


def test_multi_constraint_samples_pass_every_constraint(version: Path) -> None:
    rows = pl.read_parquet(version / "if_multi_samples.parquet").to_dicts()
    assert len(rows) >= 3
    assert {"lang_matches", "dup_cluster"} <= set(rows[0])  # the shared scorers ran on the new table
    assert all(r["lang_matches"] is not False for r in rows)
    for row in rows:
        sample = from_row(Sample, row)
        gt = IFGroundTruth.model_validate(sample.ground_truth)
        assert 2 <= len(gt.constraints) <= 6 and row["if_multi_all_pass"] is True
        lib = [(c.library_id, c.params) for c in gt.constraints if c.library_id]
        assert all(verify_all(sample.completion[0].content, lib))
        assert all(c.verifier_code for c in gt.constraints if not c.library_id)
    grpo = pl.read_parquet(version / "if_multi_grpo.parquet")
    # α is the training RM's (here the packaged stand-in, rm_id sim@v1); the quality judge's score never stands in
    assert grpo.height >= 3 and grpo["teacher_rm_mean"].null_count() == 0 and set(grpo["rm_id"]) == {"sim@v1"}


def test_dialogue_samples_are_passing_turns_in_both_languages(version: Path) -> None:
    rows = pl.read_parquet(version / "if_dialogue_samples.parquet").to_dicts()
    assert len(rows) >= 3
    assert {r["lang"] for r in rows} == {"ru", "en"}
    assert {"lang_matches", "dup_cluster"} <= set(rows[0])
    assert all(r["lang_matches"] is not False for r in rows)
    for row in rows:
        sample = from_row(Sample, row)
        gt = IFGroundTruth.model_validate(sample.ground_truth)
        assert 1 <= len(gt.rubrics or []) <= 5
        assert all(verify_all(sample.completion[0].content, [(c.library_id, c.params) for c in gt.constraints]))
        assert json.loads(row["failed_rubrics"]) == [] and sample.prompt[-1].role == "user"
    grpo = pl.read_parquet(version / "if_dialogue_grpo.parquet")
    assert grpo.height > len(rows)  # failing turns are GRPO prompts too
    quality = grpo["judge_quality"].drop_nulls()
    assert quality.len() > 0 and quality.is_between(0, 1).all()  # a diagnostic, not α
    assert grpo["teacher_rm_mean"].null_count() == 0 and set(grpo["rm_id"]) == {"sim@v1"}  # α from the RM


def test_grpo_export_is_scored_by_the_if_and_rubric_rewards(run_dir: Path, tmp_path: Path) -> None:
    """The exported rows carry what the rewards read: per-constraint verifiers, rules, rubrics, language."""
    import datasets

    from fabrika.export.source import open_version
    from fabrika.export.writer import ExportConfig, export
    from fabrika.rewards.instruct import IFRewardConfig, make_if_reward
    from fabrika.rewards.rubric import RubricRewardConfig, make_rubric_reward

    out = tmp_path / "grpo"
    export(open_version(run_dir, stages=["if_multi_grpo", "if_dialogue_grpo"]),
           ExportConfig(kind="grpo", format="hf", out=out, validate_rows=0))
    ds = datasets.load_from_disk(str(out))
    multi = [r for r in ds if not r["ground_truth"].get("rubrics")][:2]
    dialogue = [r for r in ds if r["ground_truth"].get("rubrics")][:4]
    assert multi and dialogue and {r["lang"] for r in ds} == {"ru", "en"}
    if_reward = make_if_reward(IFRewardConfig(aggregation="all", rm_correction=False))
    rubric = make_rubric_reward(RubricRewardConfig(if_reward={"rm_correction": False}),
                                llm_config={"backend": "sim", "model": "sim"})
    try:
        cols = {k: [r[k] for r in multi] for k in ("constraints", "ground_truth")}
        stub = "[sim] не ответ, а заглушка"
        # the reward follows each row's own constraints (all of them, aggregation="all"): the trusted library
        # verifiers say what it must be — a short stub may well satisfy "at most 15 words" + "no markdown"
        from fabrika.constraints.combine import get
        want = [float(all(get(c["library_id"]).verify(stub, c["params"]) for c in r["constraints"]))
                if all(c.get("library_id") for c in r["constraints"]) else None for r in multi]
        got = if_reward(prompts=[r["prompt"] for r in multi], completions=[stub] * len(multi), **cols)
        assert [g for g, w in zip(got, want) if w is not None] == [w for w in want if w is not None]
        assert any(w is not None for w in want)
        cols = {k: [r[k] for r in dialogue] for k in ("constraints", "ground_truth", "lang")}
        scores = rubric(prompts=[r["prompt"] for r in dialogue], completions=["Hello, friend!"] * len(dialogue),
                        **cols)
        assert len(scores) == len(dialogue) and all(s in (0.0, 1.0, None) for s in scores)
        assert any(s is not None for s in scores)  # the sim judge answered in structured form
    finally:
        if_reward.close()
        rubric.close()


def test_new_kinds_go_through_decontamination_and_difficulty(run_dir: Path, tmp_path: Path) -> None:
    """The same run resumed with two more shared scorers: both new GRPO tables are decontaminated and scored."""
    from fabrika.pipeline.config import validate_data
    from fabrika.store.run import RunStore

    store = RunStore(run_dir)
    contaminated = {}
    for table in ("if_multi_grpo", "if_dialogue_grpo"):
        row = store.scan_raw(table).collect().row(0, named=True)
        contaminated[table] = row["id"]
        user = [m for m in json.loads(row["prompt"]) if m["role"] == "user"][-1]["content"]
        (tmp_path / "bench.jsonl").open("a", encoding="utf-8").write(json.dumps({"prompt": user}, ensure_ascii=False)
                                                                     + "\n")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    doc = dict(manifest["config"])
    doc["stages"] = list(doc["stages"]) + [
        {"kind": "filter.decontam", "name": f"{t}_decontam", "input": t, "ngram": 3,
         "benchmarks": [{"path": str(tmp_path / "bench.jsonl")}]} for t in contaminated] + [
        {"kind": "filter.difficulty", "name": f"{t}_difficulty", "input": t, "k": 2} for t in contaminated]
    doc["run_dir"] = str(run_dir)
    config, issues = validate_data(doc, "resumed", ROOT / "configs")
    assert config is not None, [str(i) for i in issues]
    result = run_pipeline(config, resume=True, progress=False)
    for table, cid in contaminated.items():
        dec = {r["id"]: r for r in store.scan_raw(f"{table}_decontam").collect().iter_rows(named=True)}
        diff = store.scan_raw(f"{table}_difficulty").collect()
        assert set(dec) == set(store.scan_raw(table).collect()["id"])
        assert dec[cid]["decontam_max_overlap"] > 0.5
        # difficulty (listed later) only spends samples on rows the decontamination gate keeps
        assert set(diff["id"]) == {i for i, r in dec.items() if r["decontam_max_overlap"] <= 0.5} and cid not in \
            set(diff["id"])
        assert diff["difficulty_k"].to_list() == [2] * diff.height
        assert diff["difficulty_pass_rate"].is_between(0, 1).all()
        gates = result.version.funnel["gates"][table]
        assert gates["dropped_decontam.max_overlap"] >= 1
