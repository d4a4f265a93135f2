"""The IF pipeline end to end on ``sim``: outputs are valid, verified, deterministic, and refilterable."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from fabrika.constraints import verify_all
from fabrika.pipeline.config import PipelineConfig
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas import Sample, from_row
from fabrika.schemas.instruct import IFGroundTruth
from fabrika.store.run import RunStore
from fabrika.store.versions import materialise
from tests.demo_runs import copy_run, if_demo_shrunk_config


@pytest.fixture(scope="module")
def demo(if_demo_run: Path, tmp_path_factory) -> tuple[Path, PipelineConfig]:
    """The shipped demo config, shrunk (fewer candidates and verifiers, tf-idf similarity): a private copy of the
    session's run of it (tests/conftest.py), since these tests refilter and resume it."""
    run_dir = copy_run(if_demo_run, tmp_path_factory.mktemp("if_demo") / "run")
    return run_dir, if_demo_shrunk_config(run_dir)


@pytest.fixture
def demo_run(demo) -> Path:
    return demo[0]


def test_samples_are_valid_if_samples_that_pass_their_checks(demo_run: Path):
    store = RunStore(demo_run)
    rows = pl.read_parquet(demo_run / "versions" / "v1" / "data" / "if_samples.parquet").to_dicts()
    assert len(rows) >= 10
    placements = {r["placement"] for r in rows}
    assert placements == {"user", "system"}
    responses = {r["id"]: r for r in store.scan_raw("if_responses").collect().iter_rows(named=True)}
    for row in rows:
        sample = from_row(Sample, row)
        IFGroundTruth.model_validate(sample.ground_truth)
        assert sample.expert == "if" and sample.lang == "ru" and sample.completion[0].train
        assert row["max_failed_verifier_accuracy"] < 0.8 and row["bt_min_similarity"] >= 0.6
        assert row["n_unique_functions"] >= 3 and row["n_unique_cases"] >= 10
        lib = [(c["library_id"], c["params"]) for c in sample.ground_truth["constraints"] if c["library_id"]]
        if lib:  # the trusted verifier agrees with what the gate kept
            assert all(verify_all(sample.completion[0].content, lib))
        resp = responses[sample.meta["response_id"]]
        results = json.loads(resp["verifier_results"])
        assert all(r["passed"] for r in results if r["accuracy"] >= 0.8)
        if sample.prompt[0].role == "system":
            assert sample.ground_truth["constraints"][0]["text"] in sample.prompt[0].content


def test_grpo_rows_carry_what_the_reward_needs(demo_run: Path):
    rows = pl.read_parquet(demo_run / "versions" / "v1" / "data" / "if_grpo.parquet").to_dicts()
    assert rows
    for row in rows:
        gt = json.loads(row["ground_truth"])
        IFGroundTruth.model_validate(gt)
        assert gt["constraints"] and gt["verifiers"] and gt["min_function_accuracy"] == 0.8
        assert all(v["accuracy"] >= 0.8 and "def evaluate" in v["code"] for v in gt["verifiers"])
        assert json.loads(row["completion"]) == []
    # α is the teacher's mean score under the training RM (the demo's rm.teacher_scores stage uses the packaged
    # stand-in RM, rm_id sim@v1; a real RM: tests/train/test_teacher_rm.py) — never a judge score on another scale
    assert all(r["teacher_rm_mean"] is not None and r["rm_id"] == "sim@v1" for r in rows)


def test_funnel_has_every_kind_of_drop_and_sim_is_marked(demo_run: Path):
    store = RunStore(demo_run)
    ver = store.scan_raw("if_verifiers").collect()
    reasons = {r.split(":")[0] for r in ver["reason"] if r}
    assert {"invalid_json", "syntax_error"} <= reasons
    cons = store.scan_raw("if_consistency").collect()
    assert cons["n_broken_functions"].sum() > 0  # hangs, hostile imports, runtime errors
    assert set(ver["llm_backend"]) == {"sim"}
    manifest = store.read_manifest()
    assert manifest["sandbox_isolation"] in ("bwrap", "rlimits")


def test_refilter_changes_output_without_llm(demo_run: Path, monkeypatch):
    import fabrika.pipeline.runner as runner

    monkeypatch.setattr(runner, "build_engine_for", lambda *a, **k: pytest.fail("refilter built an LLM engine"))
    base = materialise(demo_run, name="base")
    strict = materialise(demo_run, {"backtranslation": {"min_similarity": 0.95},
                                    "consistency": {"min_unique_functions": 4}}, name="strict")
    assert 0 < strict.rows < base.rows
    gates = strict.funnel["gates"]["if_samples"]
    assert gates["dropped_consistency_few_functions"] + gates["dropped_backtranslation_dissimilar"] > 0


def test_rerun_is_identical_and_calls_nothing(demo):
    """Resume over a finished run: zero new rows, the same dataset."""
    demo_run, config = demo
    before = {p.name: pl.read_parquet(p).sort("id") for p in (demo_run / "versions" / "v1" / "data").glob("*.parquet")}
    result = run_pipeline(config, resume=True, progress=False, version="v1")
    assert all(s.llm.as_dict().get("requests", 0) == 0 for s in result.stats.values())
    after = {p.name: pl.read_parquet(p).sort("id") for p in (demo_run / "versions" / "v1" / "data").glob("*.parquet")}
    assert before.keys() == after.keys()
    for name in before:
        assert before[name].equals(after[name])


def test_funnel_report_narrows_and_follows_thresholds(demo_run: Path):
    from fabrika.generators.instruct.report import if_funnel

    steps = dict(if_funnel(demo_run))
    chain = ["after dedup", "with parsed verifiers", "after cross-validation", "after back-translation"]
    counts = [steps[s] for s in chain]
    assert counts == sorted(counts, reverse=True) and counts[-1] > 0
    assert steps["candidates asked"] > steps["candidates in Russian, well-formed"] > steps["after dedup"] - steps["seeds"]
    strict = dict(if_funnel(demo_run, {"consistency": {"min_unique_functions": 4}, "if_response": {"min_quality": 8}}))
    assert strict["after cross-validation"] < steps["after cross-validation"]
    assert strict["SFT samples"] < steps["SFT samples"]


def test_fresh_run_gives_the_same_dataset(demo, tmp_path: Path):
    """Contract 7: same config and seeds → the same samples, byte for byte, order-independent."""
    run_dir, config = demo
    again = config.model_copy(update={"run_dir": tmp_path / "again"})
    run_pipeline(again, resume=False, progress=False)
    for name in ("if_samples.parquet", "if_grpo.parquet"):
        a = pl.read_parquet(run_dir / "versions" / "v1" / "data" / name).sort("id")
        b = pl.read_parquet(tmp_path / "again" / "versions" / "v1" / "data" / name).sort("id")
        assert a.drop("input_id").equals(b.drop("input_id"))


def test_if_reward_scores_grpo_rows_with_their_ground_truth(demo_run: Path):
    """The GRPO rows feed ``fabrika.rewards.score_if`` as is: the kept response of a prompt earns V = 1."""
    from fabrika.export.records import grpo_record
    from fabrika.rewards import score_if
    from fabrika.sandbox import SandboxConfig, SandboxPool

    grpo = {r["meta"]: r for r in pl.read_parquet(demo_run / "versions" / "v1" / "data" / "if_grpo.parquet").to_dicts()}
    by_prompt = {json.loads(m)["prompt_id"]: r for m, r in grpo.items()}
    samples = [from_row(Sample, r) for r in
               pl.read_parquet(demo_run / "versions" / "v1" / "data" / "if_samples.parquet").to_dicts()]
    pairs = [(by_prompt[s.meta["prompt_id"]], s.completion[0].content) for s in samples
             if s.meta["prompt_id"] in by_prompt][:20]
    assert pairs
    records = [grpo_record(row) for row, _ in pairs]
    with SandboxPool(SandboxConfig(workers=1)) as pool:
        scores = score_if([r["prompt"] for r in records], [[{"role": "assistant", "content": t}] for _, t in pairs],
                          sandbox_runner=pool.run_sync, constraints=[r["constraints"] for r in records],
                          ground_truth=[r["ground_truth"] for r in records])
        wrong = score_if([records[0]["prompt"]], [[{"role": "assistant", "content": "Sorry!"}]],
                         sandbox_runner=pool.run_sync, constraints=[records[0]["constraints"]],
                         ground_truth=[records[0]["ground_truth"]])
    assert [s.v for s in scores] == [1.0] * len(scores)
    assert wrong[0].v < 1.0
