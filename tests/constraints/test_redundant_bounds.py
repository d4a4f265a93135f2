"""Redundant length bounds: a pure length constraint whose bound another one already implies is refused by the
combiner (it asks the same thing twice), and every reported redundancy is real on the hand-written cases."""

from __future__ import annotations

import random

import pytest

from fabrika.constraints import REGISTRY, check_combination, compatible, sample_combination
from fabrika.constraints.bounds import PURE_BOUNDS, bounds_redundant
from fabrika.constraints.combine import redundant

from .pairs import entries


@pytest.mark.parametrize(("a", "pa", "b", "pb"), [
    ("ru.length.words_max", {"n": 120}, "ru.length.words_range", {"lo": 20, "hi": 80}),
    ("ru.length.words_min", {"n": 10}, "ru.length.words_range", {"lo": 20, "hi": 80}),
    ("ru.length.words_max", {"n": 200}, "ru.length.chars_max", {"n": 150}),
    ("ru.length.sentences_max", {"n": 6}, "ru.length.sentences_exact", {"n": 4}),
    ("ru.length.sentences_min", {"n": 2}, "ru.length.paragraphs_min", {"n": 3}),
])
def test_an_implied_bound_is_redundant_and_refused(a: str, pa: dict, b: str, pb: dict) -> None:
    assert bounds_redundant(a, pa, b, pb) and not bounds_redundant(b, pb, a, pa)
    assert redundant(b, pb, a, pa)  # either order
    assert not compatible([(b, pb)], a, pa) and not compatible([(a, pa)], b, pb)
    (problem,) = check_combination([(a, pa), (b, pb)])
    assert "redundant" in problem


@pytest.mark.parametrize(("a", "pa", "b", "pb"), [
    ("ru.length.words_max", {"n": 50}, "ru.length.words_min", {"n": 10}),  # a band: both bind
    ("ru.length.words_max", {"n": 60}, "ru.length.words_range", {"lo": 20, "hi": 80}),  # tightens the range
    ("ru.length.words_min", {"n": 30}, "ru.length.sentences_min", {"n": 3}),
    ("ru.length.words_min", {"n": 3}, "ru.keywords.include", {"keywords": ["кот", "дом", "сад"]}),  # not pure
])
def test_bounds_that_both_bind_are_not_redundant(a: str, pa: dict, b: str, pb: dict) -> None:
    assert not redundant(a, pa, b, pb)
    assert not any("redundant" in p for p in check_combination([(a, pa), (b, pb)]))


def test_every_reported_redundancy_holds_on_the_hand_written_cases() -> None:
    """Soundness: when ``a`` is reported redundant next to ``b``, every positive case of ``b`` passes ``a``."""
    pure = [e for e in entries() if e[0] in PURE_BOUNDS]
    checked = 0
    for a, pa, _ in pure:
        for b, pb, positives in pure:
            if not bounds_redundant(a, pa, b, pb):
                continue
            for text in positives:
                if REGISTRY[b].verify(text, pb):
                    checked += 1
                    assert REGISTRY[a].verify(text, pa), (a, pa, b, pb, text[:80])
    assert checked > 0


def test_sampled_combinations_hold_no_redundant_bound() -> None:
    rng = random.Random(3)
    ids = sorted(PURE_BOUNDS)
    for _ in range(300):
        combo = sample_combination(rng, 2, 4, ids=ids)
        assert not [p for p in check_combination(combo) if "redundant" in p], combo
