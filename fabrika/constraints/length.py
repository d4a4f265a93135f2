"""Length constraints: words, sentences, paragraphs, characters (IFEval length family).

Words and sentences come from razdel (see :mod:`fabrika.textutil.segment`); list
numbering («1.») and heading marks are not words.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from fabrika.constraints.base import constraint
from fabrika.textutil.segment import paragraphs, prose_words, sentences

F = "length"


def _n(choices: tuple[int, ...]):  # noqa: ANN202 - tiny sampler factory
    return lambda rng: {"n": rng.choice(choices)}


@constraint(
    "ru.length.words_max",
    F,
    [
        "Ответ должен быть не длиннее {n:слово:gent}.",
        "Уложитесь в {n:слово}, не больше.",
        "Используйте в ответе не более {n:слово:gent}.",
    ],
    _n((15, 25, 40, 50, 80, 100, 150, 200)),
)
def words_max(text: str, p: Mapping[str, Any]) -> bool:
    """At most ``n`` words (razdel words; «кто-то» and «3,5» count once)."""
    return len(prose_words(text)) <= p["n"]


@constraint(
    "ru.length.words_min",
    F,
    [
        "Ответ должен содержать не менее {n:слово:gent}.",
        "Напишите развёрнутый ответ объёмом от {n:слово:gent}.",
        "Объём ответа — минимум {n:слово}.",
    ],
    _n((20, 30, 50, 80, 120, 200, 300)),
)
def words_min(text: str, p: Mapping[str, Any]) -> bool:
    """At least ``n`` words."""
    return len(prose_words(text)) >= p["n"]


def _range(rng: random.Random) -> dict[str, int]:
    lo = rng.choice((10, 20, 30, 50, 80, 100))
    return {"lo": lo, "hi": lo + rng.choice((10, 20, 40, 60))}


@constraint(
    "ru.length.words_range",
    F,
    [
        "Длина ответа — от {lo} до {hi:слово:gent}.",
        "Ответ должен содержать не менее {lo} и не более {hi:слово:gent}.",
    ],
    _range,
)
def words_range(text: str, p: Mapping[str, Any]) -> bool:
    """Between ``lo`` and ``hi`` words inclusive."""
    return p["lo"] <= len(prose_words(text)) <= p["hi"]


@constraint(
    "ru.length.sentences_max",
    F,
    ["Ответ должен состоять не более чем из {n:предложение:gent}.", "Используйте максимум {n:предложение}."],
    _n((1, 2, 3, 4, 5, 7)),
)
def sentences_max(text: str, p: Mapping[str, Any]) -> bool:
    """At most ``n`` sentences (razdel: «т. е.», «г.» and initials do not end one)."""
    return len(sentences(text)) <= p["n"]


@constraint(
    "ru.length.sentences_min",
    F,
    ["Ответ должен состоять не менее чем из {n:предложение:gent}.", "Напишите как минимум {n:предложение}."],
    _n((3, 4, 5, 6, 8, 10)),
)
def sentences_min(text: str, p: Mapping[str, Any]) -> bool:
    """At least ``n`` sentences."""
    return len(sentences(text)) >= p["n"]


@constraint(
    "ru.length.sentences_exact",
    F,
    ["Ответ должен состоять ровно из {n:предложение:gent}.", "Напишите ровно {n:предложение}."],
    _n((1, 2, 3, 4, 5)),
)
def sentences_exact(text: str, p: Mapping[str, Any]) -> bool:
    """Exactly ``n`` sentences."""
    return len(sentences(text)) == p["n"]


@constraint(
    "ru.length.paragraphs_exact",
    F,
    [
        "Ответ должен состоять ровно из {n:абзац:gent}, разделённых пустой строкой.",
        "Разбейте ответ на {n:абзац}; отделяйте абзацы друг от друга пустой строкой.",
    ],
    _n((2, 3, 4, 5)),
)
def paragraphs_exact(text: str, p: Mapping[str, Any]) -> bool:
    """Exactly ``n`` paragraphs separated by blank lines."""
    return len(paragraphs(text)) == p["n"]


@constraint(
    "ru.length.paragraphs_min",
    F,
    ["В ответе должно быть не менее {n:абзац:gent}, разделённых пустой строкой."],
    _n((2, 3, 4)),
)
def paragraphs_min(text: str, p: Mapping[str, Any]) -> bool:
    """At least ``n`` paragraphs separated by blank lines."""
    return len(paragraphs(text)) >= p["n"]


@constraint(
    "ru.length.chars_max",
    F,
    ["Ответ должен быть не длиннее {n:символ:gent} (включая пробелы).", "Уложитесь в {n:символ} с пробелами."],
    _n((100, 150, 200, 280, 400, 500)),
)
def chars_max(text: str, p: Mapping[str, Any]) -> bool:
    """At most ``n`` characters, spaces included, after trimming the ends."""
    return len(text.strip()) <= p["n"]
