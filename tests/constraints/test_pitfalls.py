"""Each Russian text-handling pitfall that public IFEval ports get wrong, one test each."""

from __future__ import annotations

import unicodedata

import pytest

from fabrika.constraints import REGISTRY
from fabrika.textutil import agree, detect_language, homoglyph_words, lemmas, nfc, sentences, words


def test_forbidden_word_is_caught_in_any_inflection() -> None:
    ban = REGISTRY["ru.keywords.exclude"]
    for form in ("книга", "книги", "книге", "книгу", "книгой", "книгах", "книгами"):
        assert not ban.verify(f"На столе лежит {form}.", {"keywords": ["книга"]}), form


def test_kot_does_not_match_kotoryj() -> None:
    assert "кот" not in lemmas("который")
    assert "кот" in lemmas("котами")
    assert REGISTRY["ru.keywords.exclude"].verify("Который час?", {"keywords": ["кот"]})
    assert not REGISTRY["ru.keywords.include"].verify("Который час?", {"keywords": ["кот"]})


def test_latin_homoglyphs_inside_cyrillic_words_are_violations() -> None:
    text = "Этo прoграмма"  # Latin 'o' in both words
    assert homoglyph_words(text) == ["Этo", "прoграмма"]
    assert words(text) == ["Этo", "прoграмма"]  # razdel's split at the script change is glued back
    assert not REGISTRY["ru.russian.no_latin"].verify(text, {})
    assert not REGISTRY["ru.keywords.exclude"].verify("Новая прoграмма", {"keywords": ["программа"]})
    assert not REGISTRY["ru.keywords.include"].verify("Новая прoграмма", {"keywords": ["программа"]})
    assert not REGISTRY["ru.language.response_lang"].verify("Этo прoграмма для всех людей.", {"lang": "ru"})


def test_nfc_normalisation_of_decomposed_letters() -> None:
    decomposed = unicodedata.normalize("NFD", "Ещё ёлка и йод")
    assert decomposed != "Ещё ёлка и йод" and nfc(decomposed) == "Ещё ёлка и йод"
    assert REGISTRY["ru.russian.yo_everywhere"].verify(decomposed, {})
    assert not REGISTRY["ru.russian.yo_nowhere"].verify(decomposed, {})
    assert REGISTRY["ru.keywords.include"].verify(unicodedata.normalize("NFD", "Купили йогурт."), {"keywords": ["йогурт"]})
    assert REGISTRY["ru.keywords.letter_frequency"].verify(decomposed, {"letter": "ё", "n": 2, "relation": "exactly"})


def test_abbreviations_are_not_capitalised_words() -> None:
    cap_max = REGISTRY["ru.case.capital_words_max"]
    assert cap_max.verify("Граница РФ и бывшего СССР, а также МГУ и ООН.", {"n": 0})
    assert not cap_max.verify("Граница РФ — это ОЧЕНЬ важно.", {"n": 0})
    assert not REGISTRY["ru.case.capital_words_min"].verify("РФ, СССР, США.", {"n": 1})


@pytest.mark.parametrize("text", ["Привет", "Привет, как дела?", "Спасибо", "Москва"])
def test_short_russian_is_russian_not_bulgarian(text: str) -> None:
    assert detect_language(text) == "ru"
    assert REGISTRY["ru.language.response_lang"].verify(text, {"lang": "ru"})


def test_sentence_splitting_with_abbreviations_and_initials() -> None:
    text = "В 1147 г. Москву основал Юрий Долгорукий, т. е. очень давно. А. С. Пушкин родился в ней. Др. примеры есть."
    assert sentences(text) == [
        "В 1147 г. Москву основал Юрий Долгорукий, т. е. очень давно.",
        "А. С. Пушкин родился в ней.",
        "Др. примеры есть.",
    ]
    assert REGISTRY["ru.length.sentences_exact"].verify(text, {"n": 3})
    assert REGISTRY["ru.case.sentence_capitalized"].verify(text, {})


def test_word_count_with_hyphens_and_numbers() -> None:
    text = "Кто-то из Санкт-Петербурга в 2020-м году заплатил 3,5 тысячи — т. е. немало."
    # «т. е.» is one abbreviation, counted once (as «т.е.» would be)
    assert words(text) == ["Кто-то", "из", "Санкт-Петербурга", "в", "2020-м", "году", "заплатил", "3,5", "тысячи", "т. е.", "немало"]
    assert REGISTRY["ru.length.words_max"].verify(text, {"n": 11})
    assert not REGISTRY["ru.length.words_max"].verify(text, {"n": 10})


@pytest.mark.parametrize(
    ("n", "nomn", "gent"),
    [
        (1, "слово", "слова"),
        (2, "слова", "слов"),
        (5, "слов", "слов"),
        (11, "слов", "слов"),
        (21, "слово", "слова"),
        (22, "слова", "слов"),
        (25, "слов", "слов"),
    ],
)
def test_number_agreement_in_rendered_instructions(n: int, nomn: str, gent: str) -> None:
    assert agree("слово", n) == nomn
    assert agree("слово", n, "gent") == gent
    words_min = REGISTRY["ru.length.words_min"]
    rendered = {words_min.render({"n": n})}
    assert rendered & {f"Ответ должен содержать не менее {n} {gent}.", f"Напишите развёрнутый ответ объёмом от {n} {gent}.", f"Объём ответа — минимум {n} {nomn}."}
    assert agree("предложение", n) == {1: "предложение", 21: "предложение", 2: "предложения", 22: "предложения"}.get(n, "предложений")


def test_tense_reads_ambiguous_words_in_the_writers_favour() -> None:
    present = REGISTRY["ru.russian.present_tense"]
    assert present.verify("Дуло ружья блестит на солнце.", {})  # «дуло» is a noun here, not «дуть» (past)
    assert not present.verify("Ветер дул, и дуло блестело.", {})  # «дул» can only be a past verb
    assert not present.verify("Пой громче, и всё получится.", {})  # an imperative is in no tense
    assert REGISTRY["ru.russian.past_tense"].verify("Стали сильнее те, кто учился.", {})
