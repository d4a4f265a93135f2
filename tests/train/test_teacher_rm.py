"""α and S on one scale: the rm.teacher_scores stage and the IF reward score with the same tiny RM; the
trainer refuses, in one line, data whose α is missing, NaN or from another RM."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from datasets import Dataset

from fabrika.errors import InputError
from fabrika.filters.teacher_rm import TeacherScoresConfig, TeacherScoresStage
from fabrika.llm.config import LLMConfig
from fabrika.rewards.general import SequenceClassifierRM, rm_identity
from fabrika.rewards.instruct import IFRewardConfig, score_if
from fabrika.testing import ScriptedLLM, llm_error, stage_context
from fabrika.train.grpo import build_grpo_trainer, load_grpo_config
from fabrika.train.tiny import save_tiny

pytestmark = pytest.mark.train

QUERY = [{"role": "system", "content": "Отвечай кратко."}, {"role": "user", "content": "Опишите кота без запятых."}]
ANSWERS = ["<think>\n\n</think>\n\nКот спит.", "Кот ест рыбу.", "<think>подумаю</think>Кот играет с мячом.",
           "<think>не успел", ""]  # the last two are unusable: cut off while thinking, empty


def teacher_llm() -> ScriptedLLM:
    """Answers sample i with ANSWERS[i]; sample 5 times out (no retries: ``.requests`` is the server's log)."""
    return ScriptedLLM(lambda r: ANSWERS[r.sample_index] if r.sample_index < len(ANSWERS) else llm_error("timeout"),
                       config=LLMConfig(max_retries=0))


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("rm") / "rm", seed=5, num_labels=1)


async def test_alpha_and_s_come_from_the_same_rm(tiny_rm: Path) -> None:
    teacher = teacher_llm()
    ctx = stage_context(teacher)
    stage = TeacherScoresStage(TeacherScoresConfig(rm=tiny_rm, k=6), ctx)
    await stage.setup()
    (row,) = await stage.process({"id": "q1", "messages": json.dumps(QUERY, ensure_ascii=False)})
    assert len(teacher.requests) == 6 and {r.tag for r in teacher.requests} == {"rm.teacher"}
    assert row["teacher_rm_k"] == 3 and row["teacher_rm_failed"] == 3 and row["rm_id"] == rm_identity(tiny_rm)

    # S of the same visible answers, scored by the reward's RM during "training": the same numbers
    rm = SequenceClassifierRM(tiny_rm)
    visible = ["Кот спит.", "Кот ест рыбу.", "Кот играет с мячом."]
    s = rm([QUERY] * 3, [[{"role": "assistant", "content": v}] for v in visible])
    assert json.loads(row["teacher_rm_scores"]) == pytest.approx(s, abs=1e-5)
    alpha = row["teacher_rm_mean"]
    assert alpha == pytest.approx(sum(s) / 3, abs=1e-5)

    # the IF reward with that RM: a teacher answer above α gets V+1, one below gets V−0.5
    spec = [{"id": "ru.punct.no_commas", "params": {}}]
    scores = score_if([QUERY] * 3, [[{"role": "assistant", "content": v}] for v in visible], IFRewardConfig(),
                      rm_scorer=rm, constraints=[spec] * 3, teacher_rm_mean=[alpha] * 3)
    assert [sc.s for sc in scores] == pytest.approx(s, abs=1e-5)
    assert [sc.reward for sc in scores] == [2.0 if x > alpha else 0.5 for x in s]
    assert len({round(x, 6) for x in s}) > 1  # the tiny RM tells the answers apart: both branches are live


def test_nan_or_missing_alpha_is_an_error_not_a_number() -> None:
    from fabrika.errors import ConfigError

    spec = [{"id": "ru.punct.no_commas", "params": {}}]
    for alpha in (None, math.nan):
        with pytest.raises(ConfigError, match="α"):
            score_if(["p"], ["Кот спит."], IFRewardConfig(), constraints=[spec], rm_score=[2.0], teacher_rm_mean=[alpha])


def _if_rows(alpha: list, rm_id: str | None) -> list[dict]:
    spec = json.dumps([{"id": "ru.punct.no_commas", "params": {}}])
    rows = [{"prompt": [{"role": "user", "content": q}], "expert": "if", "constraints": spec,
             "ground_truth": json.dumps({"constraints": json.loads(spec)}), "teacher_rm_mean": a}
            for q, a in zip(["Опишите кота.", "Опишите пса."], alpha)]
    if rm_id is not None:
        for r in rows:
            r["rm_id"] = rm_id
    return rows


@pytest.mark.parametrize(("alpha", "rm_id", "message"), [
    (None, "same", "has no 'teacher_rm_mean' column"),
    ([0.5, None], "same", r"α \(teacher_rm_mean\) is missing or NaN in 1 of 2 rows"),
    ([0.5, math.nan], "same", r"missing or NaN in 1 of 2 rows"),
    ([0.5, 0.2], "other@0123456789abcdef", "α was scored by RM other@0123456789abcdef but rm_path is rm@"),
    ([0.5, 0.2], None, "has no 'rm_id' column"),
])
def test_training_refuses_alpha_it_cannot_compare(tmp_path: Path, tiny_rm: Path, tiny_model: Path, alpha, rm_id,
                                                  message) -> None:
    rows = _if_rows(alpha or [0.0, 0.0], rm_identity(tiny_rm) if rm_id == "same" else rm_id)
    if alpha is None:
        rows = [{k: v for k, v in r.items() if k != "teacher_rm_mean"} for r in rows]
    data = tmp_path / "data"
    Dataset.from_list(rows).save_to_disk(str(data))
    cfg = load_grpo_config("if", overrides={"model_name_or_path": str(tiny_model), "dataset_path": str(data),
                                            "output_dir": str(tmp_path / "out"), "rm_path": str(tiny_rm),
                                            "use_cpu": True, "bf16": False, "use_vllm": False})
    with pytest.raises(InputError, match=message) as info:
        build_grpo_trainer(cfg)
    assert "\n" not in str(info.value)  # one line


def test_training_accepts_alpha_from_its_own_rm(tmp_path: Path, tiny_rm: Path, tiny_model: Path) -> None:
    data = tmp_path / "data"
    Dataset.from_list(_if_rows([0.5, 0.2], rm_identity(tiny_rm))).save_to_disk(str(data))
    cfg = load_grpo_config("if", overrides={"model_name_or_path": str(tiny_model), "dataset_path": str(data),
                                            "output_dir": str(tmp_path / "out"), "rm_path": str(tiny_rm),
                                            "use_cpu": True, "bf16": False, "use_vllm": False,
                                            "num_generations": 2, "per_device_train_batch_size": 2,
                                            "gradient_accumulation_steps": 1, "report_to": "none"})
    assert build_grpo_trainer(cfg).train_dataset.num_rows == 2
