"""Keyword and letter constraints, matched on lemmas across all pymorphy3 analyses.

A keyword given in its dictionary form matches any inflection («кот» in
«котами»), never a different word that merely starts the same («который»).
Homoglyphs: a forbidden word written with Latin look-alikes is still caught
(folded back to Cyrillic); a required word written that way does not count.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from fabrika.constraints.base import RELATIONS, compare, constraint, quote_list, relation_slots
from fabrika.constraints.pools import FREQUENT_LETTERS, KEYWORDS, RARE_LETTERS
from fabrika.textutil.morph import lemma, lemmas
from fabrika.textutil.normalize import normalize
from fabrika.textutil.script import fold_lookalikes, is_lookalike_word
from fabrika.textutil.segment import paragraphs, words

F = "keywords"


def keyword_count(text: str, keyword: str, *, fold: bool) -> int:
    """How many words of ``text`` are inflections of ``keyword``.

    Words come normalised (stress marks, soft hyphens and zero-width characters
    removed); a hyphenated particle does not hide a word («книгу-то»).
    ``fold=True`` folds look-alike words back to Russian letters first (to catch
    evasion of a ban: Latin «o» or Belarusian «ў» inside a Cyrillic word);
    ``fold=False`` ignores such words (they do not fulfil a requirement).
    """
    target = lemma(normalize(keyword))
    n = 0
    for w in words(text):
        if is_lookalike_word(w):
            if not fold:
                continue
            w = fold_lookalikes(w)
        if target in lemmas(w):
            n += 1
    return n


def _kws(k_lo: int, k_hi: int):  # noqa: ANN202 - sampler factory
    return lambda rng: {"keywords": rng.sample(KEYWORDS, rng.randint(k_lo, k_hi))}


def _kw_slots(p: Mapping[str, Any]) -> dict[str, Any]:
    """«слово «а»» / «слова «а» и «б»» and their genitive, agreed with the list length."""
    one = len(p["keywords"]) == 1
    listed = quote_list(list(p["keywords"]))
    return {
        "kw": f"{'слово' if one else 'слова'} {listed}",
        "kw_gent": f"{'слова' if one else 'слов'} {listed}",
        "kw_en": f"{'the word' if one else 'the words'} {listed.replace(' и ', ' and ')}",
    }


@constraint(
    "ru.keywords.include",
    F,
    [
        "Обязательно используйте в ответе {kw} (в любой форме).",
        "Включите в ответ {kw} — в любой грамматической форме.",
    ],
    _kws(1, 3),
    derive=_kw_slots,
)
def include(text: str, p: Mapping[str, Any]) -> bool:
    """Every keyword occurs in some inflection, written in Cyrillic."""
    return all(keyword_count(text, k, fold=False) > 0 for k in p["keywords"])


@constraint(
    "ru.keywords.exclude",
    F,
    [
        "Не используйте в ответе {kw} ни в какой форме.",
        "В ответе не должно быть {kw_gent} — ни в какой форме.",
    ],
    _kws(1, 3),
    derive=_kw_slots,
)
def exclude(text: str, p: Mapping[str, Any]) -> bool:
    """No keyword occurs in any inflection (homoglyph spellings included)."""
    return all(keyword_count(text, k, fold=True) == 0 for k in p["keywords"])


def _freq(rng: random.Random) -> dict[str, Any]:
    return {"keyword": rng.choice(KEYWORDS), "n": rng.randint(2, 5), "relation": rng.choice(RELATIONS)}


@constraint(
    "ru.keywords.frequency",
    F,
    [
        "Слово «{keyword}» (в любой форме) должно встретиться в ответе {rel} {n:раз:{case}}.",
        "Используйте слово «{keyword}» {rel} {n:раз:{case}}.",
    ],
    _freq,
    derive=relation_slots,
)
def frequency(text: str, p: Mapping[str, Any]) -> bool:
    """The keyword occurs (in any inflection) ``relation`` ``n`` times."""
    return compare(keyword_count(text, p["keyword"], fold=False), p["relation"], p["n"])


def _letter(rng: random.Random) -> dict[str, Any]:
    return {"letter": rng.choice(FREQUENT_LETTERS), "n": rng.choice((5, 10, 15, 20, 30)), "relation": "at_least"}


def _letter_slots(p: Mapping[str, Any]) -> dict[str, Any]:
    return relation_slots(p)


@constraint(
    "ru.keywords.letter_frequency",
    F,
    [
        "Буква «{letter}» должна встретиться в ответе {rel} {n:раз:{case}}.",
        "Используйте букву «{letter}» {rel} {n:раз:{case}} (строчную или заглавную).",
    ],
    _letter,
    derive=_letter_slots,
)
def letter_frequency(text: str, p: Mapping[str, Any]) -> bool:
    """The Cyrillic letter occurs ``relation`` ``n`` times, either case; Latin look-alikes do not count."""
    return compare(text.lower().count(normalize(p["letter"]).lower()), p["relation"], p["n"])


@constraint(
    "ru.keywords.lipogram",
    F,
    ["Напишите ответ, ни разу не использовав букву «{letter}».", "В ответе не должно быть буквы «{letter}»."],
    lambda rng: {"letter": rng.choice(RARE_LETTERS)},
)
def lipogram(text: str, p: Mapping[str, Any]) -> bool:
    """The letter never occurs, in either case."""
    return normalize(p["letter"]).lower() not in text.lower()


def _nth(rng: random.Random) -> dict[str, Any]:
    n = rng.randint(2, 4)
    return {"n": n, "nth": rng.randint(1, n), "word": rng.choice(KEYWORDS)}


@constraint(
    "ru.keywords.paragraph_first_word",
    F,
    [
        "Ответ должен состоять из {n:абзац:gent}, разделённых пустой строкой; абзац номер {nth} "
        "должен начинаться со слова «{word}» (в любой форме).",
    ],
    _nth,
)
def paragraph_first_word(text: str, p: Mapping[str, Any]) -> bool:
    """Exactly ``n`` paragraphs and paragraph ``nth`` starts with an inflection of ``word``."""
    paras = paragraphs(text)
    if len(paras) != p["n"]:
        return False
    first = words(paras[p["nth"] - 1])[:1]
    return bool(first) and not is_lookalike_word(first[0]) and lemma(p["word"]) in lemmas(first[0])
