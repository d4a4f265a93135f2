"""Combinations: conflict table (id and parameter level), sampling, rendering, records."""

from __future__ import annotations

import random

import pytest

from fabrika.constraints import (
    REGISTRY,
    catalogue,
    check_combination,
    get,
    library_seeds,
    params_conflict,
    render_combination,
    sample_combination,
    to_constraint_record,
    verify_all,
)
from fabrika.errors import ConfigError
from fabrika.schemas import Constraint


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("ru.format.json", "ru.format.bullets_exact"),
        ("ru.case.all_lowercase", "ru.case.all_uppercase"),
        ("ru.russian.yo_everywhere", "ru.russian.yo_nowhere"),
        ("ru.russian.address_vy", "ru.russian.address_ty"),
        ("ru.startend.ends_with_question", "ru.punct.no_question"),
    ],
)
def test_id_level_conflicts_are_symmetric(a: str, b: str) -> None:
    assert b in REGISTRY[a].conflicts and a in REGISTRY[b].conflicts
    assert check_combination([(a, {}), (b, {})])


def test_copy_only_combines_with_nothing() -> None:
    assert REGISTRY["ru.repeat.copy_only"].conflicts == frozenset(REGISTRY) - {"ru.repeat.copy_only"}


def test_parameter_level_conflicts() -> None:
    assert params_conflict("ru.length.words_max", {"n": 50}, "ru.length.words_min", {"n": 100})
    assert params_conflict("ru.length.words_min", {"n": 100}, "ru.length.words_max", {"n": 50})  # either order
    assert not params_conflict("ru.length.words_max", {"n": 200}, "ru.length.words_min", {"n": 50})
    assert params_conflict("ru.length.sentences_max", {"n": 2}, "ru.length.sentences_exact", {"n": 3})
    assert params_conflict("ru.russian.no_latin", {}, "ru.format.postscript", {"marker": "P.S."})
    assert not params_conflict("ru.russian.no_latin", {}, "ru.format.postscript", {"marker": "Постскриптум:"})
    assert params_conflict("ru.keywords.lipogram", {"letter": "ф"}, "ru.keywords.include", {"keywords": ["фонарь"]})
    assert params_conflict("ru.keywords.exclude", {"keywords": ["река"]}, "ru.keywords.frequency", {"keyword": "река", "n": 2, "relation": "at_least"})
    assert params_conflict("ru.punct.no_commas", {}, "ru.startend.start_phrase", {"phrase": "Итак,"})
    assert not params_conflict("ru.punct.no_commas", {}, "ru.startend.start_phrase", {"phrase": "Начнём с главного."})
    assert params_conflict("ru.russian.yo_nowhere", {}, "ru.startend.start_phrase", {"phrase": "Давайте разберёмся."})
    assert params_conflict("ru.language.response_lang", {"lang": "en"}, "ru.russian.yo_everywhere", {})
    assert not params_conflict("ru.language.response_lang", {"lang": "ru"}, "ru.russian.yo_everywhere", {})
    # settings («relation», «lang») are not response text: no false conflicts with character bans
    assert not params_conflict("ru.russian.no_latin", {}, "ru.keywords.frequency", {"keyword": "река", "n": 2, "relation": "at_least"})
    assert not params_conflict("ru.russian.no_latin", {}, "ru.language.response_lang", {"lang": "ru"})
    assert params_conflict("ru.keywords.letter_frequency", {"letter": "о", "n": 5, "relation": "at_least"}, "ru.keywords.lipogram", {"letter": "о"})


@pytest.mark.parametrize(
    ("a", "pa", "b", "pb", "conflict"),
    [
        ("ru.length.sentences_max", {"n": 2}, "ru.format.bullets_exact", {"n": 4}, True),
        ("ru.length.sentences_max", {"n": 5}, "ru.format.bullets_exact", {"n": 4}, False),
        ("ru.length.chars_max", {"n": 100}, "ru.length.words_min", {"n": 80}, True),
        ("ru.length.chars_max", {"n": 500}, "ru.length.words_min", {"n": 50}, False),
        ("ru.length.paragraphs_exact", {"n": 4}, "ru.length.sentences_max", {"n": 3}, True),
        ("ru.length.words_max", {"n": 15}, "ru.repeat.phrase_n", {"phrase": "Век живи — век учись", "n": 4}, True),
        ("ru.length.words_max", {"n": 50}, "ru.repeat.phrase_n", {"phrase": "Век живи — век учись", "n": 4}, False),
        ("ru.length.sentences_exact", {"n": 3}, "ru.russian.acrostic_sentences", {"word": "ЛЕТО"}, True),
        ("ru.length.words_max", {"n": 3}, "ru.russian.acrostic_lines", {"word": "ЛЕТО"}, True),
        ("ru.length.chars_max", {"n": 100}, "ru.repeat.request_first", {"request": "Как научиться рано вставать?"}, False),
    ],
)
def test_implied_numeric_bounds(a: str, pa: dict, b: str, pb: dict, conflict: bool) -> None:
    assert params_conflict(a, pa, b, pb) is conflict
    assert params_conflict(b, pb, a, pa) is conflict


def test_sampled_combinations_are_valid_sized_and_deterministic() -> None:
    sizes = []
    for seed in range(300):
        combo = sample_combination(random.Random(seed), k_min=2, k_max=6)
        assert not check_combination(combo), combo
        assert 1 <= len(combo) <= 6
        sizes.append(len(combo))
        assert len({cid for cid, _ in combo}) == len(combo)
    assert sum(s >= 2 for s in sizes) / len(sizes) > 0.95  # k_min is nearly always met
    assert sample_combination(random.Random(5)) == sample_combination(random.Random(5))


def test_sampling_restricted_to_families() -> None:
    combo = sample_combination(random.Random(1), 2, 3, families=["russian"])
    assert combo and all(REGISTRY[cid].family == "russian" for cid, _ in combo)
    with pytest.raises(ConfigError, match="k_min"):
        sample_combination(random.Random(1), k_min=3, k_max=2)


def test_render_combination_numbered_list() -> None:
    combo = [("ru.length.words_max", {"n": 5}), ("ru.punct.no_commas", {})]
    text = render_combination(combo)
    lines = text.splitlines()
    assert len(lines) == 2 and lines[0].startswith("1. ") and "5 слов" in lines[0] and lines[1].startswith("2. ")
    assert render_combination(combo[:1]) == REGISTRY["ru.length.words_max"].render({"n": 5})


def test_constraint_record_and_verify_all() -> None:
    rec = to_constraint_record("ru.length.words_max", {"n": 5})
    assert isinstance(rec, Constraint)
    assert rec.source == "library" and rec.parent_id == "ru.length.words_max" and rec.family == "length"
    assert rec.id.startswith("ru.length.words_max@") and rec.params == {"n": 5} and "5 слов" in rec.text
    assert rec.id == to_constraint_record("ru.length.words_max", {"n": 5}).id
    assert rec.id != to_constraint_record("ru.length.words_max", {"n": 6}).id
    assert get(rec.id) is REGISTRY["ru.length.words_max"]
    combo = [("ru.length.words_max", {"n": 3}), ("ru.punct.no_commas", {})]
    assert verify_all("Всё очень хорошо.", combo) == [True, True]
    assert verify_all("Да, это так и есть.", combo) == [False, False]


def test_unknown_id_is_a_config_error_naming_the_id() -> None:
    with pytest.raises(ConfigError, match="ru.nope"):
        get("ru.nope")
    with pytest.raises(ConfigError, match="slot"):
        REGISTRY["ru.length.words_max"].render({})
    with pytest.raises(ConfigError, match="ru.length.words_max.*keys \\['n'\\]"):
        REGISTRY["ru.length.words_max"].verify("Текст.", {"max": 3})


def test_check_params_names_missing_and_unknown_keys() -> None:
    c = REGISTRY["ru.keywords.frequency"]
    assert c.param_keys == {"keyword", "n", "relation"}
    assert c.check_params({"keyword": "река", "n": 2, "relation": "at_least"}) == []
    problems = c.check_params({"keyword": "река", "count": 2})
    assert any("missing param 'n'" in p for p in problems) and any("unknown param 'count'" in p for p in problems)
    assert all(REGISTRY[cid].check_params(REGISTRY[cid].sample_params(random.Random(3))) == [] for cid in REGISTRY)


def test_library_seeds_cover_the_library_and_are_stable() -> None:
    seeds = library_seeds()
    assert [s.parent_id for s in seeds] == sorted(REGISTRY)
    assert all(s.source == "library" and s.text for s in seeds)
    assert [s.id for s in seeds] == [s.id for s in library_seeds()]
    assert [s.id for s in seeds] != [s.id for s in library_seeds(seed=1)]


def test_catalogue_lists_every_constraint_once() -> None:
    table = catalogue()
    rows = table.splitlines()[2:]
    assert len(rows) == len(REGISTRY)
    assert all(sum(f"`{cid}`" in r for r in rows) == 1 for cid in REGISTRY)
    assert all(r.count(" | ") == 4 for r in rows)  # pipes inside cells are escaped
