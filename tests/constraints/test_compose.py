"""Satisfiability by construction (fabrika.constraints.compose): parsed facets, conflict witnesses, redundant
bounds, joint answers that pass every verifier, and precision/recall floors on the hand-labelled Russian pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabrika.constraints.compose import (
    Facets,
    decide,
    library_member,
    local_check,
    member_from_spec,
    pair_decision,
    parse_facets,
    text_member,
)

DATA = Path(__file__).parent / "data" / "pairs_ru.jsonl"


@pytest.mark.parametrize(("text", "facets"), [
    ("Ответ должен содержать не менее 55 слов.", Facets((55, None))),
    ("Ответ не должен превышать 50 слов.", Facets((0, 50))),
    ("Напишите от 20 до 40 слов.", Facets((20, 40))),
    ("Используйте менее 10 слов.", Facets((0, 9))),
    ("Write at least 30 words.", Facets((30, None))),
    ("Answer in between 20 and 50 words.", Facets((20, 50))),
    ("Ответ должен заканчиваться фразой «Вот и всё.»", Facets(end="Вот и всё.")),
    ("Начните ответ со слов «Итак,» и уложитесь в 40 слов.", Facets((0, 40), start="Итак,")),
    ('End your answer with "Thanks!"', Facets(end="Thanks!")),
    ("Используйте хотя бы одну метафору.", Facets()),
])
def test_facets_are_parsed_from_russian_and_english_text(text: str, facets: Facets) -> None:
    assert parse_facets(text) == facets


def test_a_long_answer_with_a_fixed_ending_is_composed() -> None:
    long = text_member("a", "Ответ должен содержать не менее 55 слов.")
    end = text_member("b", "Ответ должен заканчиваться фразой «Вот и всё.»", ["Кошки спят много. Вот и всё."])
    d = decide([long, end])
    assert d.accepted and d.witness is not None
    assert d.witness.endswith("Вот и всё.") and len(d.witness.split()) >= 55
    lib = [library_member("ru.length.words_min", {"n": 55}), library_member("ru.startend.end_phrase",
                                                                            {"phrase": "Вот и всё."})]
    d2 = decide([*lib, library_member("ru.startend.start_phrase", {"phrase": "Итак,"})])
    assert d2.accepted and d2.witness and all(m.verify and m.verify(d2.witness) for m in lib)


@pytest.mark.parametrize(("a", "b", "needle"), [
    ({"library": "ru.startend.start_phrase", "params": {"phrase": "Итак,"}},
     {"text": "Начните ответ со слов «Прежде всего,»"}, "two different openings"),
    ({"text": "Закончите ответ словами «Удачи!»"}, {"text": "Завершите ответ фразой «На этом всё.»"},
     "two different endings"),
    ({"library": "ru.length.words_max", "params": {"n": 30}}, {"text": "Напишите не меньше 55 слов."},
     "word bounds do not overlap"),
    ({"text": "Ответ не должен превышать 2 слов."}, {"text": "Завершите ответ фразой «Надеюсь, это поможет.»"},
     "take 3 words"),
])
def test_conflicts_are_refused_with_the_excluding_facets(a: dict, b: dict, needle: str) -> None:
    d = pair_decision(a, b)
    assert d.verdict == "conflict" and needle in d.reason and d.witness is None


def test_a_bound_stated_in_llm_text_is_redundant_next_to_a_library_one() -> None:
    d = pair_decision({"library": "ru.length.words_max", "params": {"n": 40}}, {"text": "Уложитесь в 60 слов."})
    assert d.verdict == "redundant"
    assert pair_decision({"text": "Не менее 30 слов."}, {"text": "Напишите не меньше 50 слов."}).verdict == "redundant"
    assert pair_decision({"text": "Не менее 30 слов."}, {"text": "Не более 50 слов."}).accepted  # a band


def test_a_library_verifier_that_no_composed_answer_passes_refuses() -> None:
    d = decide([library_member("ru.punct.no_commas", {}), text_member("b", "Закончите фразой «Надеюсь, это поможет.»")])
    assert d.verdict == "no_joint_answer"


def _rows() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_labelled_pairs_are_well_formed() -> None:
    rows = _rows()
    assert len(rows) >= 300
    assert {r["label"] for r in rows} == {"compatible", "incompatible", "redundant"}
    assert all(r["reason"] and {"a", "b"} <= set(r) for r in rows)
    assert len({json.dumps([r["a"], r["b"]], sort_keys=True, ensure_ascii=False) for r in rows}) == len(rows)


def test_precision_and_recall_floors_on_the_labelled_pairs() -> None:
    tp = fp = fn = tn = red = red_ok = 0
    for r in _rows():
        d = pair_decision(r["a"], r["b"])
        if d.witness is not None:  # soundness: a witness passes every member's check
            assert local_check([member_from_spec(r["a"], "a"), member_from_spec(r["b"], "b")], [d.witness]) == [True]
        if r["label"] == "redundant":
            red += 1
            red_ok += d.verdict == "redundant"
            continue
        gold = r["label"] == "compatible"
        tp += d.accepted and gold
        fp += d.accepted and not gold
        fn += not d.accepted and gold
        tn += not d.accepted and not gold
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    refusal_recall = tn / (tn + fp)
    assert precision >= 0.95 and recall >= 0.97 and refusal_recall >= 0.95, (precision, recall, refusal_recall)
    assert red_ok / red >= 0.9


def test_a_set_can_conflict_where_every_pair_composes() -> None:
    limit = text_member("a", "Не более 4 слов.")
    start = library_member("ru.startend.start_phrase", {"phrase": "Прежде всего,"})
    end = text_member("c", "Закончите ответ фразой «Надеюсь, это поможет.»", ["Ответ. Надеюсь, это поможет."])
    assert all(decide(pair).accepted for pair in ([limit, start], [limit, end], [start, end]))
    d = decide([limit, start, end])
    assert d.verdict == "conflict" and "take 5 words, the limit is 4" in d.reason
    roomy = decide([text_member("a", "Не более 8 слов."), start, end])
    assert roomy.accepted and roomy.witness and local_check([start, end], [roomy.witness]) == [True]
