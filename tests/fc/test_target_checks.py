"""Each new FC target check on its own labelled examples (Russian and English): counts and precision/recall floors.

The examples are hand-written (tests/fc/data/checks/); each set holds both what the check
must catch (an invented amount, «ничего не найдено» after a result, «в Питере» for
Санкт-Петербург, «Пользователь: …») and near misses it must let through (a number said in
words, an empty result reported as empty, «на нижнюю полку», an e-mail in a Russian turn).
"""

from __future__ import annotations

import pytest

from tests.fc.checks_labelled import CHECKS, examples, scores

FLOORS = {"unsupported_facts": (0.9, 0.9), "contradiction_rule": (0.9, 0.9), "already_given": (0.9, 0.9),
          "user_turn_hygiene": (0.9, 0.9)}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_check_has_50_labelled_examples_in_both_languages(name: str) -> None:
    rows = examples(name)
    assert len(rows) >= 50
    for lang in ("ru", "en"):
        mine = [r for r in rows if r["lang"] == lang]
        labels = {bool(CHECKS[name][2](r)) for r in mine}
        assert len(mine) >= 15 and labels == {True, False}, (name, lang)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_precision_and_recall_floors(name: str) -> None:
    p_floor, r_floor = FLOORS[name]
    for lang in (None, "ru", "en"):
        s = scores(name, lang)
        assert s["precision"] >= p_floor and s["recall"] >= r_floor, (name, lang, s["precision"], s["recall"],
                                                                      s["wrong"][:3])
