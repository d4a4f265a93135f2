"""α through a real pipeline: rm.teacher_scores on if_queries → if.grpo rows → GRPO export → the IF trainer
accepts it with the same RM and refuses it with another."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import datasets
import pytest

from fabrika.errors import InputError
from fabrika.export.source import open_version
from fabrika.export.writer import ExportConfig, export
from fabrika.filters.teacher_rm import TeacherScoresConfig
from fabrika.pipeline.runner import run_pipeline
from fabrika.rewards.general import rm_identity
from fabrika.train.tiny import save_tiny
from tests.demo_runs import copy_run, if_demo_shrunk_config

pytestmark = [pytest.mark.train, pytest.mark.slow]


def test_alpha_from_the_pipeline_reaches_the_trainer(tmp_path: Path, tiny_model: Path, if_demo_run: Path) -> None:
    from fabrika.train.grpo import build_grpo_trainer, load_grpo_config

    rm = save_tiny(tmp_path / "rm", seed=7, num_labels=1)
    other_rm = save_tiny(tmp_path / "other_rm", seed=8, num_labels=1)
    # the session's shrunk IF demo run (tests/conftest.py), copied without the α stage, the GRPO rows that copy α
    # and the version: the run below redoes those with a real RM in place of the stand-in (the LLM answers of the
    # stages it keeps are on disk already)
    run_dir = copy_run(if_demo_run, tmp_path / "run")
    for redo in ("stages/if_teacher", "stages/if_grpo", "versions"):
        shutil.rmtree(run_dir / redo)
    config = if_demo_shrunk_config(run_dir)
    stages = []
    for stage in config.stages:
        if stage.kind == "rm.teacher_scores" and stage.input == "if_queries":  # the shipped stand-in → a real RM
            stage = TeacherScoresConfig(name="if_teacher", input="if_queries", rm=rm, k=3)
        stages.append(stage)
    run = run_pipeline(config.model_copy(update={"stages": stages}), resume=True, progress=False)
    # the local RM is loaded once, however many prompts score at once: no prompt is lost as internal_error
    assert run.stats["if_teacher"].internal_errors == 0 and run.internal_errors == 0
    assert run.stats["if_teacher"].processed > 50
    out = export(open_version(run.run_dir, None, ["if_grpo"]), ExportConfig(kind="grpo", out=tmp_path / "grpo",
                                                                            validate_rows=0))
    ds = datasets.load_from_disk(str(tmp_path / "grpo"))
    assert out.rows > 0 and {"teacher_rm_mean", "teacher_rm_k", "rm_id"} <= set(ds.column_names)
    assert set(ds["rm_id"]) == {rm_identity(rm)}
    assert all(k == 3 for k in ds["teacher_rm_k"]) and all(math.isfinite(a) for a in ds["teacher_rm_mean"])

    base = {"model_name_or_path": str(tiny_model), "dataset_path": str(tmp_path / "grpo"),
            "output_dir": str(tmp_path / "out"), "use_cpu": True, "bf16": False, "use_vllm": False,
            "num_generations": 2, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
            "report_to": "none"}
    trainer = build_grpo_trainer(load_grpo_config("if", overrides={**base, "rm_path": str(rm)}))
    assert trainer.train_dataset.num_rows == out.rows
    with pytest.raises(InputError, match=f"α was scored by RM {rm_identity(rm)} but rm_path is "
                                         f"{rm_identity(other_rm)}"):
        build_grpo_trainer(load_grpo_config("if", overrides={**base, "rm_path": str(other_rm)}))
