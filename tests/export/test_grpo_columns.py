"""GRPO export carries the reward and sampling columns the trainer reads (general R/L0, difficulty, IF α)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabrika.export import ExportConfig, export
from fabrika.export.source import open_version
from fabrika.schemas import Message, Sample, to_row
from tests.export.export_fixtures import make_run

#: CPU-only trainer settings (no bf16, no vLLM); nothing is trained here.
CPU = {"bf16": False, "use_cpu": True, "use_vllm": False, "report_to": "none", "save_strategy": "no"}
ANSWERS = ["Кот спит на диване.", "Собака гуляет.", "Птица поёт утром в саду.", "Рыба."]


def _general_rows() -> list[dict[str, Any]]:
    rows = []
    for i, answer in enumerate(ANSWERS):
        s = Sample(id=f"g{i}", expert="general", lang="ru", prompt=[Message(role="user", content=f"Расскажи {i}.")],
                   completion=[Message(role="assistant", content=answer, train=True)], target_type="text",
                   ground_truth={})
        row = {**to_row(s), "status": "ok", "reason": None, "llm_backend": "sim",
               "rm_score": 0.5 + 0.1 * i, "difficulty_pass_rate": [0.25, 0.5, 0.75, 0.125][i],
               "ref_length": 40.0 if i == 3 else None}  # a stored L0 wins over the derived one
        rows.append(row)
    return rows


@pytest.mark.parametrize("fmt", ["hf", "parquet", "jsonl"])
def test_general_grpo_export_carries_rm_score_ref_length_and_difficulty(tmp_path: Path, fmt: str) -> None:
    from fabrika.export.writer import read_export

    run = make_run(tmp_path, _general_rows(), stage="general.samples")
    export(open_version(run), ExportConfig(kind="grpo", format=fmt, out=tmp_path / "g"))
    got = {r["id"]: r for r in read_export(tmp_path / "g", fmt)}
    # L0 in chars, measured like the general reward measures L(y)
    assert [got[f"g{i}"]["ref_length"] for i in range(3)] == [float(len(a)) for a in ANSWERS[:3]]
    assert got["g3"]["ref_length"] == 40.0
    assert [got[f"g{i}"]["rm_score"] for i in range(4)] == pytest.approx([0.5, 0.6, 0.7, 0.8])
    assert [got[f"g{i}"]["difficulty_pass_rate"] for i in range(4)] == [0.25, 0.5, 0.75, 0.125]


def test_exported_general_dataset_passes_the_trainers_checks(tmp_path: Path) -> None:
    from fabrika.rewards.general import make_general_reward
    from fabrika.train.data import load_split, prepare_grpo_dataset
    from fabrika.train.grpo import load_grpo_config, prefilter_by_difficulty, required_columns

    run = make_run(tmp_path, _general_rows(), stage="general.samples")
    export(open_version(run), ExportConfig(kind="grpo", out=tmp_path / "g"))
    config = load_grpo_config("general", overrides={
        "model_name_or_path": str(tmp_path / "policy"), "dataset_path": str(tmp_path / "g"), **CPU, "output_dir": str(tmp_path / "out"),
        "dynamic_sampling": True, "dynamic_sampling_column": "difficulty_pass_rate", "dynamic_sampling_high": 0.5})
    assert required_columns(config) == ["ref_length", "rm_score"]
    ds = prepare_grpo_dataset(load_split(config.dataset_path), required_columns(config))
    kept = prefilter_by_difficulty(ds, config.dynamic_sampling_column, config.dynamic_sampling_low,
                                   config.dynamic_sampling_high)
    assert sorted(kept["id"]) == ["g0", "g1", "g3"]
    # the reference answer itself: L/L0 = 1 → α clipped to 0.3, reward = R · 0.7
    row = ds.filter(lambda r: r["id"] == "g0")[0]
    reward = make_general_reward(score_column=config.rm_score_column, ref_length_column=config.ref_length_column,
                                 length_unit=config.length_unit)
    (r,) = reward(prompts=[row["prompt"]], completions=[[{"role": "assistant", "content": ANSWERS[0]}]],
                  rm_score=[row["rm_score"]], ref_length=[row["ref_length"]])
    assert r == pytest.approx(0.5 * 0.7)


def test_if_grpo_export_passes_the_if_trainer_checks(tmp_path: Path) -> None:
    from fabrika.train.data import load_split, prepare_grpo_dataset
    from fabrika.train.grpo import _check_if_rm_columns, load_grpo_config, required_columns

    rows = []
    for i in range(2):
        s = Sample(id=f"if{i}", expert="if", lang="ru", prompt=[Message(role="user", content="Опиши кота без запятых.")],
                   completion=[Message(role="assistant", content="Кот спит.", train=True)], target_type="text",
                   ground_truth={"constraints": [{"id": "ru.punct.no_commas", "params": {}}]})
        rows.append({**to_row(s), "status": "ok", "reason": None, "llm_backend": "sim",
                     "teacher_rm_mean": 0.5, "rm_score": 0.9})
    run = make_run(tmp_path, rows, stage="if.samples")
    export(open_version(run), ExportConfig(kind="grpo", out=tmp_path / "i"))
    config = load_grpo_config("if", overrides={"model_name_or_path": str(tmp_path / "p"),
                                               "dataset_path": str(tmp_path / "i"), **CPU,
                                               "output_dir": str(tmp_path / "out")})
    ds = prepare_grpo_dataset(load_split(config.dataset_path), required_columns(config))
    _check_if_rm_columns(config, ds)  # α present next to S: the RM correction can run
    assert ds[0]["constraints"] == [{"id": "ru.punct.no_commas", "params": {}}]
    assert ds[0]["teacher_rm_mean"] == 0.5 and json.loads(json.dumps(ds[0]["rm_score"])) == 0.9


@pytest.mark.parametrize("fmt", ["hf", "jsonl"])
def test_a_derived_l0_carries_its_unit_and_the_one_answer_it_rests_on(tmp_path: Path, fmt: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from fabrika.export.writer import read_export

    rows = _general_rows()
    import fabrika.generators.general.rows  # noqa: F401  (the `general` gate group, loaded as in a real run)

    for row in rows[:3]:  # rows from one answer: general.min_usable_answers must not drop them (null is dropped)
        row["teacher_usable"] = 1
    rows[3].update(length_unit="words", teacher_usable=4)  # a general.teacher-style stored L0
    run = make_run(tmp_path, rows, stage="general.samples")
    export(open_version(run), ExportConfig(kind="grpo", format=fmt, out=tmp_path / "g"))
    got = {r["id"]: r for r in read_export(tmp_path / "g", fmt)}
    assert [(got[f"g{i}"]["length_unit"], got[f"g{i}"]["ref_length_k"]) for i in range(4)] == [
        ("chars", 1), ("chars", 1), ("chars", 1), ("words", 4)]
    if fmt != "hf":
        return
    from datasets import load_from_disk

    from fabrika.errors import InputError
    from fabrika.train.grpo import _check_general_length_unit, load_grpo_config

    ds = load_from_disk(str(tmp_path / "g"))
    cfg = load_grpo_config("general", overrides={"model_name_or_path": "m", "dataset_path": "d", "output_dir": "o",
                                                 **CPU})
    with pytest.raises(InputError, match="measured in chars, words"):  # the stored unit now exists on every row
        _check_general_length_unit(cfg, ds)
    assert "3 of 4 rows have an L0 (ref_length) from a single reference answer" in capsys.readouterr().err
