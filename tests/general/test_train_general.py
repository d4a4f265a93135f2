"""The general expert end to end: pool → teacher (sim) → tiny local RM → GRPO rows → one CPU GRPO step with
make_general_reward; the logged rewards equal the formula called directly with the stored L0."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

pytest.importorskip("trl")

from fabrika.export.source import open_version  # noqa: E402
from fabrika.export.writer import ExportConfig, export  # noqa: E402
from fabrika.pipeline.config import load_config  # noqa: E402
from fabrika.pipeline.runner import run_pipeline  # noqa: E402

pytestmark = pytest.mark.train

ROOT = Path(__file__).resolve().parents[2]
POOL = ROOT / "fabrika" / "data" / "general" / "prompts_demo.jsonl"
CPU = {"bf16": False, "use_cpu": True, "use_vllm": False, "num_generations": 4, "per_device_train_batch_size": 4,
       "gradient_accumulation_steps": 1, "max_completion_length": 12, "max_steps": 1, "learning_rate": 1e-3,
       "report_to": "none", "save_strategy": "no", "logging_steps": 1, "seed": 0, "log_completions": False}


def write_config(root: Path, rm: Path, limit: int = 6) -> Path:
    cfg = {"name": "general_train", "seed": 3, "run_dir": str(root / "run"), "llm": {"backend": "sim"},
           "stages": [
               {"kind": "general.prompts", "name": "pool", "path": str(POOL), "max_items": limit},
               {"kind": "general.teacher", "name": "teacher", "input": "pool", "k": 4, "max_tokens": 256},
               {"kind": "general.rm", "name": "rm", "input": "teacher", "rm": str(rm)},
               {"kind": "general.samples", "name": "samples", "input": "teacher"},
               {"kind": "general.grpo", "name": "grpo", "input": "teacher"}],
           "dataset": {"stages": ["samples", "grpo"]}}
    path = root / "general.yaml"
    path.write_text(json.dumps(cfg, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from fabrika.train.tiny import save_tiny

    root = tmp_path_factory.mktemp("general")
    rm = save_tiny(root / "rm", seed=4, num_labels=1)
    policy = save_tiny(root / "policy", seed=0)
    result = run_pipeline(load_config(write_config(root, rm)), progress=False)
    grpo = export(open_version(result.run_dir, None, ["grpo"]), ExportConfig(kind="grpo", out=root / "grpo",
                                                                           validate_rows=0))
    sft = export(open_version(result.run_dir, None, ["samples"]), ExportConfig(kind="sft", out=root / "sft",
                                                                            validate_rows=0))
    return {"run": result.run_dir, "rm": rm, "policy": policy, "grpo": root / "grpo", "sft": sft,
            "grpo_rows": grpo.rows}


def test_grpo_rows_carry_the_teacher_l0_and_the_rm_id(built: dict[str, Any]) -> None:
    from fabrika.rewards.general import rm_identity

    run = built["run"]
    teacher = pl.read_parquet(sorted((run / "stages" / "teacher").glob("*.parquet")))
    grpo = pl.read_parquet(run / "versions" / "v1" / "data" / "grpo.parquet")
    assert grpo.height == built["grpo_rows"] == teacher.filter(pl.col("status") == "ok").height > 0
    l0 = dict(zip(teacher["id"], teacher["ref_length"]))
    for row in grpo.iter_rows(named=True):
        assert row["ref_length"] == l0[json.loads(row["meta"])["teacher_row"]]
        assert row["rm_id"] == rm_identity(built["rm"]) and row["expert"] == "general"
        assert "rm_score" not in grpo.columns  # R comes from the RM during training, never a stored constant
    # the SFT export holds one answer per prompt (sft_top_k = 1), the best-scored one
    samples, left_out = open_version(run, None, ["samples"]).for_kind("sft")
    ranks = samples.collect()["teacher_rm_rank"].to_list()
    assert ranks == [0] * grpo.height and built["sft"].rows == grpo.height and left_out["general.sft_top_k"] > 0


def test_one_grpo_step_logged_rewards_equal_the_formula_with_stored_l0(built: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    from fabrika.rewards.general import SequenceClassifierRM, completion_length, length_penalized
    from fabrika.textutil.reasoning import answer_text
    from fabrika.train.grpo import build_grpo_trainer, load_grpo_config

    cfg = load_grpo_config("general", overrides={"model_name_or_path": str(built["policy"]),
                                                 "dataset_path": str(built["grpo"]), "rm_path": str(built["rm"]),
                                                 "output_dir": str(tmp_path / "out"), **CPU})
    trainer = build_grpo_trainer(cfg)
    fn = trainer.reward_funcs[0]
    calls: list[tuple[Any, Any, dict[str, Any], list[float]]] = []

    def recorder(prompts: Any, completions: Any, completion_ids: Any = None, **kwargs: Any) -> list[float]:
        out = fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        calls.append((prompts, completions, kwargs, list(out)))
        return out

    recorder.__name__ = fn.__name__
    trainer.reward_funcs[0] = recorder
    trainer.train()
    assert trainer.state.global_step == 1 and len(calls) == 1
    prompts, completions, kwargs, out = calls[0]
    grpo = pl.read_parquet(built["run"] / "versions" / "v1" / "data" / "grpo.parquet")
    l0_by_prompt = {json.dumps([m["content"] for m in json.loads(p)], ensure_ascii=False): v
                    for p, v in zip(grpo["prompt"], grpo["ref_length"])}
    rm = SequenceClassifierRM(built["rm"])
    r = rm(prompts, completions)
    direct: list[float | None] = []
    for p, c, score, ref in zip(prompts, completions, r, kwargs["ref_length"], strict=True):
        # the L0 the reward saw is the one the teacher stage stored for that prompt
        assert ref == l0_by_prompt[json.dumps([m["content"] for m in p], ensure_ascii=False)]
        direct.append(length_penalized(score, completion_length(c, "chars"), ref) if answer_text(c) else None)
    answered = [d for d in direct if d is not None]
    assert answered, "the tiny policy produced no visible answer: the formula would not be exercised"
    assert len({round(d, 6) for d in answered}) > 1  # R and L vary: a real comparison, not constants
    floor = (min(answered) - 1.0) if answered else 0.0
    direct = [floor if d is None else d for d in direct]
    assert out == pytest.approx(direct, abs=1e-5)
    logged = [h for h in trainer.state.log_history if f"rewards/{fn.__name__}/mean" in h]
    assert logged and logged[0][f"rewards/{fn.__name__}/mean"] == pytest.approx(sum(out) / len(out), abs=1e-5)
    assert all(not math.isnan(x) for x in out)


def test_training_refuses_l0_in_another_unit(built: dict[str, Any], tmp_path: Path) -> None:
    from datasets import load_from_disk

    from fabrika.errors import InputError
    from fabrika.train.grpo import build_grpo_trainer, load_grpo_config

    ds = load_from_disk(str(built["grpo"]))
    assert set(ds["length_unit"]) == {"chars"}  # the export carries the unit of the stored L0
    cfg = load_grpo_config("general", overrides={"model_name_or_path": str(built["policy"]),
                                                 "dataset_path": str(built["grpo"]), "rm_path": str(built["rm"]),
                                                 "output_dir": str(tmp_path / "out"), "length_unit": "words", **CPU})
    with pytest.raises(InputError, match="L0\\) is measured in chars but length_unit is 'words'") as info:
        build_grpo_trainer(cfg)
    assert "\n" not in str(info.value)
