"""fabrika.textutil.segment on what real completions contain (the grader-level cases live in
tests/constraints/test_grader.py; these pin the segmentation itself)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabrika.textutil import normalize, sentences, tokens, words


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Т.е. всё ясно", ["Т.е.", "всё", "ясно"]),
        ("и т. д. и т. п.", ["и", "т. д.", "и", "т. п."]),
        ("до н. э.", ["до", "н. э."]),
        ("А. С. Пушкин", ["А", "С", "Пушкин"]),  # initials stay letters of their own
        ("чай и/или кофе", ["чай", "и/или", "кофе"]),
        ("60 км/ч", ["60", "км/ч"]),
        ("1 000 000 и 1\u00a0000,50", ["1 000 000", "и", "1 000,50"]),
        ("в 2020 100 человек", ["в", "2020", "100", "человек"]),  # four digits are no thousands group
        ("О’Нил и д'Артаньян", ["О’Нил", "и", "д'Артаньян"]),
        ("кни\u00adга и мо\u0301ре", ["книга", "и", "море"]),
        ("в 15:00, счёт 2:1", ["в", "15:00", "счёт", "2:1"]),
        ("см. https://ya.ru/a?b=1.", ["см", "https://ya.ru/a?b=1"]),
        ("Этo прoграмма", ["Этo", "прoграмма"]),
    ],
)
def test_words_are_what_a_grader_counts(text: str, expected: list[str]) -> None:
    assert words(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Как дела?! Хорошо.", ["Как дела?!", "Хорошо."]),
        ("Почему?.. Не знаю.", ["Почему?..", "Не знаю."]),
        ("Привет. как дела?", ["Привет.", "как дела?"]),
        ("Ой! как больно", ["Ой!", "как больно"]),
        ("— Привет! — сказал он. — Как дела?", ["— Привет! — сказал он.", "— Как дела?"]),
        ("Я подумал… и решил.", ["Я подумал… и решил."]),
        ("Площадь 50 кв. м и т. д. Всё.", ["Площадь 50 кв. м и т. д.", "Всё."]),
        ("Пришло 20 чел. на встречу.", ["Пришло 20 чел. на встречу."]),
        ("См. рис. 2 и табл. 3. Это всё.", ["См. рис. 2 и табл. 3.", "Это всё."]),
        ("Как вам идея? 😊", ["Как вам идея? 😊"]),
        ("Отлично! 😊 Как дела?", ["Отлично!", "😊 Как дела?"]),
        ("1. Пункт первый\n2. Пункт второй", ["1. Пункт первый", "2. Пункт второй"]),
        ("Он (зачем?) ушёл.", ["Он (зачем?) ушёл."]),
        ("1. **Занимайтесь каждый день.** Даже 15 минут помогут.", ["1. **Занимайтесь каждый день.**", "Даже 15 минут помогут."]),
        ("*Важно!* Не спешите.", ["*Важно!*", "Не спешите."]),
        ("Он спросил «Ты придёшь?» и ушёл.", ["Он спросил «Ты придёшь?» и ушёл."]),
        ("В 5 ч. утра он встал, а через 5 мин. ушёл.", ["В 5 ч. утра он встал, а через 5 мин. ушёл."]),
    ],
)
def test_sentences(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


_PIECES = st.sampled_from(
    ["Да", "нет", "т", "е", ".", ". ", " ", "\u00a0", "1", "000", "/", "’", ":", "?!", "…", "—", "-", "кв", "м",
     "\n", "😊", "https://a.ru", "@", "\u00ad", "\u0301", "o", "а"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_tokens_are_pieces_of_the_normalised_text_in_order(text: str) -> None:
    norm = normalize(text)
    pos = 0
    for tok in tokens(text):
        found = norm.find(tok, pos)
        assert found >= 0, (tok, norm)
        pos = found + len(tok)
    for s in sentences(text):
        assert s.strip() and s in norm
