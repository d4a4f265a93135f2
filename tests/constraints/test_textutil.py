"""fabrika.textutil: the Russian text helpers other areas import (language filter, rewards)."""

from __future__ import annotations

import pytest

from fabrika.textutil import (
    detect_language,
    fold_homoglyphs,
    has_latin,
    is_mixed_script,
    language_confidence,
    lemma,
    lines,
    paragraphs,
    strip_markdown,
    syllables,
    tokens,
    words,
)


def test_tokens_keep_punctuation_and_words_drop_it() -> None:
    assert tokens("Да — нет!") == ["Да", "—", "нет", "!"]
    assert words("Да — нет!") == ["Да", "нет"]
    assert words("«Ёлки-палки», — сказал он.") == ["Ёлки-палки", "сказал", "он"]


def test_lines_and_paragraphs() -> None:
    text = "  Первая строка\n\n \nВторая\nТретья  \n\n"
    assert lines(text) == ["Первая строка", "Вторая", "Третья"]
    assert paragraphs(text) == ["Первая строка", "Вторая\nТретья"]


def test_strip_markdown() -> None:
    assert strip_markdown("## Итоги\n- **важно**\n1. `код`") == "Итоги\nважно\nкод"


def test_homoglyph_helpers() -> None:
    assert is_mixed_script("дoм") and not is_mixed_script("дом") and not is_mixed_script("home")
    assert fold_homoglyphs("дoм") == "дом" and fold_homoglyphs("home") == "home"
    assert has_latin("Café") and has_latin("дoм") and not has_latin("Дом, 2024 г.")


def test_lemma_and_syllables() -> None:
    assert lemma("котами") == "кот" and lemma("ещё") == "еще"
    assert syllables("Электрификация") == 7 and syllables("Снег.") == 1 and syllables("ВСЁ") == 1


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("Привет", "ru"),
        ("Добрый день! Чем могу помочь?", "ru"),
        ("Добрий день! Чим можу допомогти?", "uk"),
        ("Добры дзень! Чым магу дапамагчы?", "be"),
        ("Good afternoon, how can I help?", "en"),
    ],
)
def test_language_detection_on_a_restricted_set(text: str, code: str) -> None:
    assert detect_language(text) == code


def test_language_confidence_rejects_unknown_codes() -> None:
    assert language_confidence("Сегодня мы поговорим о том, как правильно готовить борщ.", "ru") > 0.5
    with pytest.raises(ValueError, match="xx"):
        language_confidence("Привет", "xx")
