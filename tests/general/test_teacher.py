"""general.teacher: K answers per prompt, lengths in the reward's unit, L0 = the chosen statistic of the usable
lengths; truncated, cut-off-in-reasoning, empty and failed answers are recorded and never enter L0."""

from __future__ import annotations

import json
import statistics

import pytest

from fabrika.generators.general.teacher import GeneralTeacherConfig, GeneralTeacherStage, reference_length
from fabrika.llm.rejections import TRUNCATED
from fabrika.llm.types import Choice
from fabrika.rewards.general import completion_length
from tests.general.teacher_double import context, teacher_llm

PROMPT = {"id": "gp-1", "prompt": json.dumps([{"role": "user", "content": "Как заварить пуэр?"}], ensure_ascii=False),
          "lang": "ru"}
LONG_CUT = "Пуэр заваривают так: " + "очень подробно " * 200  # hit max_tokens: far longer than the rest


def _choices() -> list[Choice | None]:
    return [
        Choice(content="<think>Вспомню температуру.</think>\n\nВодой 95 градусов, первый пролив слить."),
        Choice(content=LONG_CUT, finish_reason="length"),
        Choice(content="Промойте лист, заварите на 20 секунд, повторяйте проливы."),
        Choice(content="<think>Надо ли упомянуть посуду? Пожалуй, да, и ещё"),  # cut off while thinking
        Choice(content="Возьмите гайвань и 5 граммов чая на 100 мл воды."),
        None,  # the request for this sample fails
    ]


async def _run(stat: str, unit: str = "chars", n_per_request: bool = True, honours_n: bool = True):
    teacher = teacher_llm(_choices(), honours_n=honours_n)
    cfg = GeneralTeacherConfig(k=6, ref_length_stat=stat, length_unit=unit, n_per_request=n_per_request)
    stage = GeneralTeacherStage(cfg, context(teacher))
    (row,) = await stage.process(dict(PROMPT))
    return row, teacher


@pytest.mark.parametrize("stat", ["mean", "median"])
@pytest.mark.parametrize("unit", ["chars", "words"])
async def test_l0_is_the_statistic_of_stored_usable_lengths(stat: str, unit: str) -> None:
    row, _ = await _run(stat, unit, n_per_request=False)
    answers = json.loads(row["teacher_answers"])
    assert [a["problem"] for a in answers][:5] == [None, TRUNCATED, None, "cut_off_in_reasoning", None]
    assert answers[5]["problem"].startswith("llm_error: timeout: ")
    usable = [a for a in answers if a["usable"]]
    # the stored text is the visible answer (reasoning removed) and its length is the reward's own measure
    assert usable[0]["text"] == "Водой 95 градусов, первый пролив слить." and usable[0]["had_reasoning"]
    for a in usable:
        assert a["length"] == completion_length([{"role": "assistant", "content": a["text"]}], unit)
    lengths = [a["length"] for a in usable]
    want = statistics.median(lengths) if stat == "median" else statistics.fmean(lengths)
    assert row["status"] == "ok" and row["ref_length"] == pytest.approx(want)
    assert row["teacher_usable"] == 3 and row["teacher_truncated"] == 1 and row["teacher_k"] == 6
    assert (row["length_unit"], row["ref_length_stat"]) == (unit, stat)
    # the truncated answer is recorded (its text kept) but would have moved L0 a lot
    cut = answers[1]
    assert cut["length"] is None and cut["text"].startswith("Пуэр заваривают")
    with_cut = lengths + [completion_length([{"role": "assistant", "content": cut["text"]}], unit)]
    assert reference_length(with_cut, stat) != pytest.approx(row["ref_length"])


async def _run_k(k: int, choices: list, honours_n: bool = True):
    teacher = teacher_llm(choices, honours_n=honours_n)
    stage = GeneralTeacherStage(GeneralTeacherConfig(k=k), context(teacher))
    (row,) = await stage.process(dict(PROMPT))
    return row, teacher


async def test_n_in_one_request_and_a_server_that_ignores_n_give_the_same_answers() -> None:
    one, t1 = await _run_k(5, _choices()[:5])
    assert len(t1.requests) == 1 and t1.requests[0].n == 5
    # one choice back for n=5: the engine calls that a server error, and the stage asks for 5 singles
    topped, t2 = await _run_k(5, _choices()[:5], honours_n=False)
    assert [r.n for r in t2.requests] == [5, 1, 1, 1, 1, 1]
    assert [r.sample_index for r in t2.requests] == [0, 0, 1, 2, 3, 4]
    assert json.loads(topped["teacher_answers"]) == json.loads(one["teacher_answers"])
    assert topped["ref_length"] == one["ref_length"]


async def test_a_failed_n_request_falls_back_to_k_single_requests() -> None:
    row, teacher = await _run_k(6, _choices())  # the n=6 request fails as a whole (sample 5 times out)
    assert [r.n for r in teacher.requests] == [6, 1, 1, 1, 1, 1, 1]
    answers = json.loads(row["teacher_answers"])
    assert len(answers) == 6 and answers[5]["problem"].startswith("llm_error: timeout: ") and row["teacher_usable"] == 3


async def test_requests_are_deterministic_per_prompt() -> None:
    _, a = await _run("median", n_per_request=False)
    _, b = await _run("median", n_per_request=False)
    seeds = [r.seed for r in a.requests]
    assert seeds == [r.seed for r in b.requests] and len(set(seeds)) == 6
    assert {r.tag for r in a.requests} == {"general.teacher"}


async def test_no_usable_answer_is_a_recorded_rejection() -> None:
    teacher = teacher_llm([Choice(content="Обрезано", finish_reason="length"), Choice(content="   ")])
    stage = GeneralTeacherStage(GeneralTeacherConfig(k=2, n_per_request=False), context(teacher))
    (row,) = await stage.process(dict(PROMPT))
    assert row["status"] == "rejected" and row["reason"].startswith("no_usable_teacher_answer")
    assert "truncated" in row["reason"] and "empty_answer" in row["reason"] and row["ref_length"] is None
    assert len(json.loads(row["teacher_answers"])) == 2  # kept, with their problems
