"""fabrika.textutil.normalize: text as a reader sees it, one step for every verifier."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabrika.textutil import is_invisible, normalize


@pytest.mark.parametrize(
    ("raw", "seen"),
    [
        ("кни\u00adга", "книга"),  # soft hyphen
        ("кни\u200bга", "книга"),  # zero-width space
        ("кни\u200c\u200dга\u2060", "книга"),  # zero-width (non-)joiner, word joiner
        ("\ufeffПривет", "Привет"),  # byte order mark
        ("\u202eПривет\u202c", "Привет"),  # bidi override
        ("мо\u0301ре и за\u0300мок", "море и замок"),  # stress marks
        (unicodedata.normalize("NFD", "ёлка и йод"), "ёлка и йод"),  # NFD letters compose, not stripped
        ("Café", "Café"),  # a Latin diacritic is a letter, not a stress mark
        ("Cafe\u0301", "Café"),
        ("книгу\u0306", "книгу"),  # a breve typed on «у» is not Belarusian «ў» hiding a word
        ("е\u0308\u0301лка", "ёлка"),  # ё typed decomposed, with a stress mark on top
        ("Ｊａｖａ ２０２４", "Java 2024"),  # fullwidth
        ("𝐏𝐲𝐭𝐡𝐨𝐧 𝔸𝕀 𝟕", "Python AI 7"),  # mathematical alphanumerics
        ("ℂ Ⓐ ①", "C A 1"),  # letterlike and enclosed forms
        ("№ 5, 10 ™", "№ 5, 10 ™"),  # NFKC would write «No», «TM»: not what a reader sees
        ("Что！？ Да？", "Что!? Да?"),
        ("Итак‚ начнём", "Итак, начнём"),  # U+201A low comma
        ("да，нет、может", "да,нет,может"),  # fullwidth and ideographic commas
        ("Москва ‒ столица ― России", "Москва – столица — России"),  # U+2012, U+2015
        ("Москва -- столица", "Москва — столица"),
        ("-- Привет, -- сказал он.", "— Привет, — сказал он."),
        ("кто\u2011то и что\u2010то", "кто-то и что-то"),  # non-breaking and Unicode hyphens
        ("--help и ---", "--help и ---"),  # a flag and a markdown rule are not dashes
        ("Ура‼ Как⁉ Что❓ Стоп❗", "Ура!! Как!? Что? Стоп!"),
        ("1\u00a0000\u202f000\u2009руб.", "1 000 000 руб."),  # every space is a space
        ("a\r\nb\rc\u2028d\u2029e", "a\nb\nc\nd\n\ne"),  # line and paragraph separators
        ("Так…", "Так…"),  # the ellipsis stays one character
        ("прoграмма", "прoграмма"),  # a Latin look-alike is a violation, never folded here
    ],
)
def test_normalize_shows_what_a_reader_sees(raw: str, seen: str) -> None:
    assert normalize(raw) == seen


def test_invisible_characters() -> None:
    for ch in "\u00ad\u200b\u200c\u200d\u2060\ufeff\u200e\u202a\ufe0f\u034f\u3164":
        assert is_invisible(ch), hex(ord(ch))
    for ch in "аa 1.—\n":
        assert not is_invisible(ch)


_NASTY = st.sampled_from(
    list("абвеёийоАЁaeoAZ019 .,!?-—–«»\"*\n\t")
    + ["\u0301", "\u0300", "\u0306", "\u0308", "\u00ad", "\u200b", "\ufeff", "\u00a0", "\u2009", "\u2029", "\r\n",
       "--", "‚", "！", "？", "Ａ", "𝐀", "‒", "―", "⁉", "❓", "\ufe0f", "😊"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_NASTY, max_size=60).map("".join))
def test_normalize_is_idempotent_and_leaves_nothing_invisible(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once
    assert not any(is_invisible(ch) for ch in once)
    assert "\r" not in once and "\u00a0" not in once
    for prev, ch in zip(" " + once, once):  # combining marks only as diacritics of Latin letters
        if unicodedata.category(ch) == "Mn":
            assert unicodedata.category(prev) == "Mn" or (prev.isalpha() and "CYRILLIC" not in unicodedata.name(prev)), (prev, ch)
