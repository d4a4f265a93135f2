"""configs/general_demo.yaml end to end, offline: shared filters on the pool, the template cap, teacher L0,
RM scores, SFT and GRPO rows; gates (best answer, RM floor, length band, template cap) change offline."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from fabrika.export.source import open_version
from fabrika.pipeline.config import load_config
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.versions import materialise

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = load_config(ROOT / "configs" / "general_demo.yaml")
    root = tmp_path_factory.mktemp("gd")
    return run_pipeline(config.model_copy(update={"run_dir": root / "run"}), progress=False).run_dir


def _stage(run: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(sorted((run / "stages" / name).glob("*.parquet")))


def _version(run: Path, name: str, stage: str) -> pl.DataFrame:
    return pl.read_parquet(run / "versions" / name / "data" / f"{stage}.parquet")


def _sft(run: Path, name: str) -> pl.DataFrame:
    """The rows an SFT export of the version gets (the answer-selection gates are scoped to SFT)."""
    frame, _ = open_version(run, name, ["general_samples"]).for_kind("sft")
    return frame.collect()


def test_pool_filters_and_template_cap(run: Path) -> None:
    pool = _stage(run, "general_prompts")
    assert pool.height == 50 and (pool["status"] == "ok").all()
    support = pool.filter(pl.col("task") == "ticket_reply")
    assert support.height == 5 and support["template_id"].n_unique() == 1
    teacher = _stage(run, "general_teacher")
    prompt_ids = set(teacher["prompt_id"])
    # max_per_template: 3 of the 5 support tickets reach the teacher; decontamination drops the benchmark item
    assert len(prompt_ids & set(support["id"])) == 3
    bench = pool.filter(pl.col("prompt").str.contains("Мастера и Маргариты"))["id"].item()
    assert bench not in prompt_ids
    decontam = _stage(run, "general_prompts_decontam")
    assert decontam.filter(pl.col("id") == bench)["decontam_max_overlap"].item() == 1.0
    # the chat kept its earlier turns and lost the logged production answer
    chat = [json.loads(p) for p in pool["prompt"] if "поновее" in p][0]
    assert [m["role"] for m in chat] == ["user", "assistant", "user"]


def test_teacher_l0_and_sft_rows(run: Path) -> None:
    teacher = _stage(run, "general_teacher").filter(pl.col("status") == "ok")
    assert teacher["teacher_truncated"].sum() > 0  # the sim teacher is cut off now and then, like a real one
    for row in teacher.iter_rows(named=True):
        usable = sorted(a["length"] for a in json.loads(row["teacher_answers"]) if a["usable"])
        n = len(usable)
        median = usable[n // 2] if n % 2 else (usable[n // 2 - 1] + usable[n // 2]) / 2
        assert row["ref_length"] == pytest.approx(median)
    version = _version(run, "v1", "general_samples")
    samples = _sft(run, "v1")
    # the version keeps every answer (scorers saw them all); the SFT export keeps the best one per prompt,
    # less those whose best answer a language or length gate dropped
    assert version.height > samples.height and (samples["teacher_rm_rank"] == 0).all()
    assert 0.8 * teacher.height <= samples.height <= teacher.height
    by_prompt = _stage(run, "general_samples").group_by("input_id").agg(pl.col("teacher_rm_score").max())
    best = dict(by_prompt.iter_rows())
    assert all(best[i] == s for i, s in zip(samples["input_id"], samples["teacher_rm_score"]))


def test_gates_change_offline(run: Path) -> None:
    all_rows = _version(run, "v1", "general_samples")  # the answers no unscoped gate dropped
    materialise(run, {"language": {"allowed": ["ru", "en"]}, "general": {"sft_top_k": None, "min_rm_score": 0.0,
                                                                        "max_per_template": 3}}, name="floor")
    floor = _sft(run, "floor")
    assert floor.height == (all_rows["teacher_rm_score"] >= 0).sum() and floor.height > 0
    materialise(run, {"language": {"allowed": ["ru", "en"]}, "general": {
        "sft_top_k": None, "min_length_ratio": 0.8, "max_length_ratio": 1.25, "max_per_template": 3}}, name="band")
    band = _sft(run, "band")
    assert band.height == all_rows.filter(pl.col("length_ratio").is_between(0.8, 1.25)).height
    assert 0 < band.height < all_rows.height
    materialise(run, {"language": {"allowed": ["ru", "en"]}, "general": {"max_per_template": 1}}, name="cap1")
    # the cap re-applies to the dataset rows (they carry template_rank): one support ticket is left
    v1, cap1 = _version(run, "v1", "general_grpo"), _version(run, "cap1", "general_grpo")
    assert cap1.height == v1.height - 2 and cap1.filter(pl.col("template_rank") > 0).height == 0


def test_same_config_same_data_and_a_rerun_makes_no_llm_calls(run: Path, tmp_path: Path) -> None:
    config = load_config(ROOT / "configs" / "general_demo.yaml")
    other = run_pipeline(config.model_copy(update={"run_dir": tmp_path / "again"}), progress=False).run_dir
    for stage in ("general_prompts", "general_teacher", "general_rm", "general_samples", "general_grpo"):
        a, b = (_stage(r, stage).drop("input_id", strict=False).sort("id") for r in (run, other))
        assert a.equals(b), stage
    rerun = run_pipeline(config.model_copy(update={"run_dir": other}), progress=False)
    assert rerun.manifest["accounting"]["totals"]["requests"] == 0
