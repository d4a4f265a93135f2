"""Satisfiability by construction (fabrika.constraints.compose): free phrasings mapped to structured constraints
or refused as cannot_verify, conflict witnesses, redundant bounds, joint answers that pass every verifier, and
precision/recall floors on the hand-labelled Russian pairs (0 incompatible pairs accepted, held-out set included)."""

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
    text_member,
)

DATA = Path(__file__).parent / "data" / "pairs_ru.jsonl"
HELDOUT = Path(__file__).parent / "data" / "pairs_ru_heldout.jsonl"


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
def test_facets_are_read_from_the_structured_map_of_russian_and_english_text(text: str, facets: Facets) -> None:
    assert text_member("a", text).facets == facets  # an unmapped text has none (there is no second parser)


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


def test_a_mapped_phrasing_meets_the_library_rules() -> None:
    # the mapped ending holds a comma that «no commas» forbids: the library's own parameter rule refuses it
    d = decide([library_member("ru.punct.no_commas", {}), text_member("b", "Закончите фразой «Надеюсь, это поможет.»")])
    assert d.verdict == "conflict" and "ru.punct.no_commas" in d.reason and "ru.startend.end_phrase" in d.reason


def _rows(*paths: Path) -> list[dict]:
    return [json.loads(line) for path in (paths or (DATA,)) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def test_the_labelled_pairs_are_well_formed() -> None:
    rows = _rows()
    assert len(rows) >= 300
    assert {r["label"] for r in rows} == {"compatible", "incompatible", "redundant"}
    assert all(r["reason"] and {"a", "b"} <= set(r) for r in rows)
    assert len({json.dumps([r["a"], r["b"]], sort_keys=True, ensure_ascii=False) for r in rows}) == len(rows)


def test_the_heldout_pairs_are_new_phrasings_with_enough_incompatible_ones() -> None:
    rows = _rows(HELDOUT)
    assert len(rows) >= 40 and sum(r["label"] == "incompatible" for r in rows) >= 12
    assert {r["set"] for r in rows} == {"heldout"}
    seen = {spec["text"] for r in _rows() for spec in (r["a"], r["b"]) if "text" in spec}
    assert not [spec["text"] for r in rows for spec in (r["a"], r["b"]) if spec["text"] in seen]
    assert len({json.dumps([r["a"], r["b"]], sort_keys=True, ensure_ascii=False) for r in rows}) == len(rows)


@pytest.mark.parametrize(("paths", "min_recall"), [((DATA,), 0.8), ((HELDOUT,), 0.6)], ids=["pairs_ru", "heldout"])
def test_no_incompatible_pair_is_accepted_and_recall_floors(paths: tuple[Path, ...], min_recall: float) -> None:
    tp = fp = fn = tn = red = red_ok = 0
    for r in _rows(*paths):
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
    recall = tp / (tp + fn)
    assert fp == 0, f"{fp} incompatible pairs accepted"  # precision 1.0: the goal of the structured decision
    # what is refused although compatible are phrasings no structured constraint covers («приведите три
    # аргумента»): refused as cannot_verify by design (bench/RESULTS.md lists them)
    assert recall >= min_recall, recall
    assert red_ok / red >= 0.8


def test_a_set_can_conflict_where_every_pair_composes() -> None:
    limit = text_member("a", "Не более 4 слов.")
    start = library_member("ru.startend.start_phrase", {"phrase": "Прежде всего,"})
    end = text_member("c", "Закончите ответ фразой «Надеюсь, это поможет.»", ["Ответ. Надеюсь, это поможет."])
    assert all(decide(pair).accepted for pair in ([limit, start], [limit, end], [start, end]))
    d = decide([limit, start, end])
    assert d.verdict == "conflict" and "take 5 words, the limit is 4" in d.reason
    roomy = decide([text_member("a", "Не более 8 слов."), start, end])
    assert roomy.accepted and roomy.witness and local_check([start, end], [roomy.witness]) == [True]


@pytest.mark.parametrize(("text", "structured"), [
    ("Ответ — строго до 25 слов.", (("ru.length.words_max", {"n": 25}),)),
    ("Напишите 200 слов или больше.", (("ru.length.words_min", {"n": 200}),)),
    ("Ответ не должен быть длиннее 30 слов.", (("ru.length.words_max", {"n": 30}),)),
    ("Используйте менее 10 слов.", (("ru.length.words_max", {"n": 9}),)),
    ("Объём — примерно 100–150 слов.", (("ru.length.words_range", {"lo": 100, "hi": 150}),)),
    ("Минимальный объём — 40 слов.", (("ru.length.words_min", {"n": 40}),)),
    ("Открой ответ словами «Привет, друг»", (("ru.startend.start_phrase", {"phrase": "Привет, друг"}),)),
    ("Последним словом ответа должно быть «спасибо»", (("ru.startend.last_word", {"word": "спасибо"}),)),
    ("Закончи ответ вопросом «Ну как?»", (("ru.startend.end_phrase", {"phrase": "Ну как?"}),)),
    ("Начните ответ со слов «Итак,» и уложитесь в 40 слов.",
     (("ru.length.words_max", {"n": 40}), ("ru.startend.start_phrase", {"phrase": "Итак,"}))),
    ('End your answer with "Thanks!"', (("ru.startend.end_phrase", {"phrase": "Thanks!"}),)),
])
def test_phrasings_map_whole_to_structured_constraints(text: str, structured: tuple) -> None:
    from fabrika.constraints.structure import structure

    assert structure(text) == structured


@pytest.mark.parametrize("text", [
    "Ответ не длиннее двадцати слов.",              # a number word
    "Ограничьтесь 100 словами.",                     # a bound form the map does not know
    "Начните не со слов «Итак»",                     # a negation outside every form
    "Не заканчивайте ответ фразой «Пока»",
    "Начните и закончите ответ фразой «Итак»",       # «начните» is left over
    "Не менее 30 слов в каждом абзаце.",             # a bound per paragraph, not per answer
    "Напишите не менее 5 предложений.",              # sentences, not words
    "Ответ должен содержать не менее 55 слов и упоминать кота.",
    "Закончи ответ вопросом «Вот так.»",             # a «question» that is not one
    "Используйте слово «кот».",                      # a quote no form consumes
    "Приведите три аргумента.",
])
def test_what_cannot_be_mapped_whole_is_not_mapped(text: str) -> None:
    from fabrika.constraints.structure import structure

    assert structure(text) is None


def test_unmapped_phrasings_are_refused_as_cannot_verify_not_accepted() -> None:
    # the fresh set's false accepts under the old parser: each is refused now
    pairs = [("Ответ — строго до 25 слов.", "Минимальный объём — 40 слов."),
             ("Ответ не длиннее двадцати слов.", "Напишите не менее 50 слов."),
             ("Напишите 200 слов или больше.", "Ограничьтесь 100 словами."),
             ("Сформулируйте ответ не менее чем в 50 словах.", "Ответ не должен быть длиннее 30 слов.")]
    verdicts = [pair_decision({"text": a}, {"text": b}).verdict for a, b in pairs]
    assert verdicts == ["conflict", "cannot_verify", "cannot_verify", "conflict"]
    d = pair_decision({"text": "Приведите три аргумента."}, {"text": "Не более 100 слов."})
    assert d.verdict == "cannot_verify" and "Приведите три аргумента." in d.reason and not d.accepted


def test_an_unmapped_text_with_its_own_verifier_is_decided_by_the_witness() -> None:
    limit = library_member("ru.length.words_max", {"n": 10})
    cat = text_member("a", "Упомяните кота.", ["Кот спит на диване."], verify=lambda t: "кот" in t.lower())
    d = decide([cat, limit])
    assert d.accepted and d.witness and "кот" in d.witness.lower() and len(d.witness.split()) <= 10
    never = text_member("b", "Пишите только стихами.", ["Кот спит."], verify=lambda t: False)
    assert decide([never, limit]).verdict == "no_joint_answer"
    # a verifier the caller runs (the sandbox) stands in for a local one
    remote = text_member("c", "Пишите только стихами.", ["Кот спит."])
    assert decide([remote, limit]).verdict == "cannot_verify"
    assert decide([remote, limit], check=lambda texts: [True] * len(texts)).accepted
