"""The conflict table, checked automatically against the verifiers (see ``pairs.py``).

For every pair of library constraints (hand-written cases and every sampler value of
the phrase-like ones) that the table lets share a prompt, some text must pass both
verifiers. A pair without such a witness is a missing conflict or a missing witness.
"""

from __future__ import annotations

import dataclasses

import pytest

from fabrika.constraints import REGISTRY, check_combination, params_conflict

from .pairs import WITNESSES, combinable, entries, unsatisfied, witness


def _describe(pairs) -> str:  # noqa: ANN001
    return "\n".join(f"  {a[0]} {a[1]}  +  {b[0]} {b[1]}" for a, b in pairs)


def test_every_library_constraint_takes_part_in_the_pair_check() -> None:
    assert {cid for cid, _p, _pos in entries()} == set(REGISTRY)


def test_every_pair_the_table_allows_has_a_witness() -> None:
    missing = unsatisfied()
    assert not missing, (
        f"{len(missing)} pairs the conflict table allows have no text passing both verifiers; "
        f"add a conflict to fabrika/constraints/table.py or a witness to tests/constraints/pairs.py:\n"
        + _describe(missing)
    )


def test_every_hand_written_witness_is_needed_and_valid() -> None:
    """A witness names a pair the table allows and passes both verifiers for some case params."""
    es = entries()
    for pair, texts in WITNESSES.items():
        a_id, b_id = sorted(pair)
        found = False
        for a in (e for e in es if e[0] == a_id):
            for b in (e for e in es if e[0] == b_id):
                if combinable(a, b) and witness(a, b, texts) in texts:
                    found = True
        assert found, f"witness for {sorted(pair)} passes no allowed case pair: {texts}"


def test_the_check_finds_a_conflict_removed_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drop a real conflict: the pair check must report it."""
    a, b = "ru.startend.ends_with_question", "ru.punct.no_question"
    assert not unsatisfied(ids={a, b})
    for x, y in ((a, b), (b, a)):
        monkeypatch.setitem(REGISTRY, x, dataclasses.replace(REGISTRY[x], conflicts=REGISTRY[x].conflicts - {y}))
    missing = unsatisfied(ids={a, b})
    assert missing and {missing[0][0][0], missing[0][1][0]} == {a, b}


@pytest.mark.parametrize(
    ("a", "pa", "b", "pb"),
    [
        # verbatim phrases against forms another constraint bans anywhere
        ("ru.russian.no_first_person", {}, "ru.startend.start_phrase", {"phrase": "Давайте разберёмся."}),
        ("ru.russian.no_first_person", {}, "ru.startend.start_phrase", {"phrase": "Начнём с главного."}),
        ("ru.russian.no_first_person", {}, "ru.startend.end_phrase", {"phrase": "Надеюсь, это поможет."}),
        ("ru.russian.address_ty", {}, "ru.startend.start_phrase", {"phrase": "Давайте разберёмся."}),
        ("ru.russian.address_ty", {}, "ru.repeat.request_first", {"request": "Расскажите, как приготовить борщ."}),
        ("ru.russian.address_vy", {}, "ru.repeat.phrase_n", {"phrase": "Век живи — век учись", "n": 2}),
        ("ru.russian.present_tense", {}, "ru.startend.end_phrase", {"phrase": "Остались вопросы?"}),
        ("ru.russian.past_tense", {}, "ru.startend.start_phrase", {"phrase": "Давайте разберёмся."}),
        ("ru.russian.future_tense", {}, "ru.repeat.request_first", {"request": "Посоветуйте, как выучить английский язык за год."}),
        ("ru.russian.yo_everywhere", {}, "ru.startend.start_phrase", {"phrase": "Еще раз,"}),
        ("ru.keywords.letter_frequency", {"letter": "а", "n": 3, "relation": "at_most"},
         "ru.repeat.request_first", {"request": "Как научиться рано вставать?"}),
        ("ru.keywords.paragraph_first_word", {"n": 2, "nth": 2, "word": "зима"}, "ru.language.ru_then_en", {}),
        # id level
        ("ru.repeat.request_first", {"request": "Как научиться рано вставать?"}, "ru.case.all_lowercase", {}),
        ("ru.startend.ends_with_question", {}, "ru.startend.end_phrase", {"phrase": "На этом всё."}),
        ("ru.russian.haiku", {}, "ru.russian.syllables_line_max", {"n": 5}),
        ("ru.russian.acrostic_sentences", {"word": "ДОМ"}, "ru.format.sections", {"n": 2, "marker": "Шаг"}),
    ],
)
def test_conflicts_the_pair_check_found_are_declared(a: str, pa: dict, b: str, pb: dict) -> None:
    assert check_combination([(a, pa), (b, pb)]), f"{a} {pa} should conflict with {b} {pb}"


@pytest.mark.parametrize(
    ("a", "pa", "b", "pb"),
    [
        ("ru.russian.no_first_person", {}, "ru.startend.start_phrase", {"phrase": "Итак,"}),
        ("ru.russian.present_tense", {}, "ru.startend.end_phrase", {"phrase": "Спасибо за внимание."}),
        ("ru.russian.address_ty", {}, "ru.repeat.request_first", {"request": "Как научиться рано вставать?"}),
        ("ru.keywords.letter_frequency", {"letter": "а", "n": 5, "relation": "at_most"},
         "ru.repeat.request_first", {"request": "Как научиться рано вставать?"}),
        ("ru.keywords.paragraph_first_word", {"n": 2, "nth": 1, "word": "зима"}, "ru.language.ru_then_en", {}),
        ("ru.startend.ends_with_question", {}, "ru.startend.end_phrase", {"phrase": "Остались вопросы?"}),
        ("ru.russian.haiku", {}, "ru.russian.syllables_line_max", {"n": 8}),
    ],
)
def test_no_false_conflicts_for_harmless_parameters(a: str, pa: dict, b: str, pb: dict) -> None:
    assert not params_conflict(a, pa, b, pb)
    assert b not in REGISTRY[a].conflicts
