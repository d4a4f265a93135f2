"""Start/end phrases, case, punctuation, repeating the request, response language."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from fabrika.constraints.base import const, constraint
from fabrika.constraints.pools import COPY_PHRASES, END_PHRASES, END_WORDS, REQUESTS, START_PHRASES
from fabrika.textutil.lang import LANGUAGE_NAMES_RU, LANGUAGES, is_language
from fabrika.textutil.morph import agree, analyzer, lemma, lemmas, parses
from fabrika.textutil.normalize import normalize
from fabrika.textutil.script import homoglyph_words
from fabrika.textutil.segment import lines, paragraphs, sentences, words

_SPACES = re.compile(r"\s+")
_LETTER = re.compile(r"[^\W\d_]")
_ALNUM = re.compile(r"[^\W_]")


def _spaced(s: str) -> str:
    """The form in which a phrase is compared, case kept: normalised, one space for any run of
    whitespace, «ё» as «е» (optional in Russian print) and a spaced hyphen or en dash as «—»."""
    s = _SPACES.sub(" ", normalize(s)).strip().replace("ё", "е").replace("Ё", "Е")
    return _DASHES.sub(" — ", s)


def _norm(s: str) -> str:
    """Case-insensitive :func:`_spaced` (start and end phrases, repeated phrases)."""
    return _spaced(s).casefold()


_DASHES = re.compile(r" [-–—] ")


# ---------------------------------------------------------------- start / end
@constraint(
    "ru.startend.start_phrase",
    "startend",
    ["Начните ответ ровно с фразы «{phrase}»", "Первые слова ответа должны быть такими: «{phrase}»"],
    lambda rng: {"phrase": rng.choice(START_PHRASES)},
)
def start_phrase(text: str, p: Mapping[str, Any]) -> bool:
    """The response begins with the phrase (case and spacing ignored), not inside a longer word."""
    t, ph = _norm(text), _norm(p["phrase"])
    return t.startswith(ph) and not (_ALNUM.match(ph[-1:]) and _ALNUM.match(t[len(ph) : len(ph) + 1]))


@constraint(
    "ru.startend.end_phrase",
    "startend",
    ["Закончите ответ ровно фразой «{phrase}» — после неё ничего не пишите."],
    lambda rng: {"phrase": rng.choice(END_PHRASES)},
)
def end_phrase(text: str, p: Mapping[str, Any]) -> bool:
    """The response ends with the phrase (case and spacing ignored); nothing after it.

    «Неудачи!» does not end with «Удачи!»: the phrase must not start inside a word.
    """
    t, ph = _norm(text), _norm(p["phrase"])
    before = t[len(t) - len(ph) - 1 : len(t) - len(ph)] if len(t) > len(ph) else ""
    return t.endswith(ph) and not (_ALNUM.match(ph[:1]) and _ALNUM.match(before))


@constraint("ru.startend.ends_with_question", "startend", ["Закончите ответ вопросом к собеседнику."], const())
def ends_with_question(text: str, p: Mapping[str, Any]) -> bool:
    """The last sentence's terminal punctuation holds «?» («?», «?!», «?..»).

    Closing quotes and brackets, markdown emphasis marks, emoji and emoticons after
    it are looked through: «Как вам?» 😊, «Вы придёте?», **Что скажете?**, «Как дела?)))», «Ну как? :)».
    """
    return "?" in terminal_punctuation(text)


_TRAILING = re.compile(r"[\s»\"”’')\]}*_~`]+$")
# ASCII emoticons after the sentence: «:)», «:-(», «;)», «:D», «xD», «^_^» (a bare «)))» is a closing bracket run)
_EMOTICON = re.compile(r"(?:[:;=8][-'^]?[)(\]\[DPpОо3*|/\\]+|\b[xX]D+|\^_*\^)$")
_TERMINAL = re.compile(r"[.!?…]+$")


def terminal_punctuation(text: str) -> str:
    """The run of «.!?…» that ends the text, past closing quotes, brackets, emphasis and emoji."""
    t = text
    while t := t.rstrip():
        if _EMOTICON.search(t):
            t = _EMOTICON.sub("", t)
        elif _TRAILING.search(t):
            t = _TRAILING.sub("", t)
        elif not _ALNUM.match(t[-1]) and unicodedata.category(t[-1]) in _SYMBOL_CATEGORIES:
            t = t[:-1]  # an emoji or another symbol after the sentence («…? 😊»)
        else:
            break
    m = _TERMINAL.search(t)
    return m.group(0) if m else ""


_SYMBOL_CATEGORIES = frozenset({"So", "Sk", "Sm", "Cn", "Co"})


@constraint(
    "ru.startend.last_word",
    "startend",
    ["Последним словом ответа должно быть слово «{word}» (в любой форме)."],
    lambda rng: {"word": rng.choice(END_WORDS)},
)
def last_word(text: str, p: Mapping[str, Any]) -> bool:
    """The last word (punctuation aside) is an inflection of ``word``."""
    ws = words(text)
    return bool(ws) and lemma(p["word"]) in lemmas(ws[-1])


# ---------------------------------------------------------------- case
@constraint(
    "ru.case.all_lowercase",
    "case",
    ["Пишите весь ответ только строчными буквами, без единой заглавной."],
    const(),
)
def all_lowercase(text: str, p: Mapping[str, Any]) -> bool:
    """Letters present and none upper-case."""
    return bool(_LETTER.search(text)) and text == text.lower()


@constraint("ru.case.all_uppercase", "case", ["Напишите весь ответ ЗАГЛАВНЫМИ БУКВАМИ."], const())
def all_uppercase(text: str, p: Mapping[str, Any]) -> bool:
    """Letters present and none lower-case."""
    return bool(_LETTER.search(text)) and text == text.upper()


ABBREVIATIONS = frozenset(
    "РФ СССР США ООН МГУ СПБГУ ВВП ЕС НАТО СНГ МВД ФСБ МЧС ЖКХ ГОСТ ИИ ВУЗ ЕГЭ ОГЭ НДС ИНН СМИ "
    "ЗАГС ГИБДД ДТП РЖД КПД ТВ ПК ОС ЦБ МИД ЮНЕСКО API JSON HTML CSS SQL HTTP URL IT PDF USB GPS".split()
)


def is_abbreviation(word: str) -> bool:
    """An all-caps abbreviation: the known list (РФ, СССР, API), pymorphy3's «Abbr» tag,
    a short Latin word (NASA, COVID-19: Latin capitals in a Russian text name things),
    or a short word that is no dictionary word in lower case (МФЦ, ФНС, ЦСКА)."""
    if word in ABBREVIATIONS or any("Abbr" in p.tag for p in parses(word)):
        return True
    letters = "".join(ch for ch in word if ch.isalpha())
    if len(letters) > 5:
        return False
    if letters.isascii():
        return True
    return not analyzer().word_is_known(letters.lower())


def shouted_words(text: str) -> list[str]:
    """All-caps words of two or more letters that are not abbreviations."""
    out = []
    for w in words(text):
        letters = [ch for ch in w if ch.isalpha()]
        if len(letters) >= 2 and all(ch.isupper() for ch in letters) and not is_abbreviation(w):
            out.append(w)
    return out


@constraint(
    "ru.case.capital_words_max",
    "case",
    ["{rule} (аббревиатуры вроде РФ или СССР не в счёт)."],
    lambda rng: {"n": rng.choice((0, 1, 2, 3))},
    derive=lambda p: {
        "rule": "Не пишите целиком заглавными буквами ни одного слова"
        if p["n"] == 0
        else f"Целиком заглавными буквами можно написать не более {p['n']} {agree('слово', p['n'], 'gent')}"
    },
)
def capital_words_max(text: str, p: Mapping[str, Any]) -> bool:
    """At most ``n`` all-caps words; abbreviations (РФ, СССР) are not counted."""
    return len(shouted_words(text)) <= p["n"]


@constraint(
    "ru.case.capital_words_min",
    "case",
    ["Выделите важное, написав не менее {n:слово:gent} целиком ЗАГЛАВНЫМИ буквами (аббревиатуры не считаются)."],
    lambda rng: {"n": rng.choice((1, 2, 3, 5))},
)
def capital_words_min(text: str, p: Mapping[str, Any]) -> bool:
    """At least ``n`` all-caps words that are not abbreviations."""
    return len(shouted_words(text)) >= p["n"]


@constraint(
    "ru.case.sentence_capitalized",
    "case",
    ["Каждое предложение начинайте с заглавной буквы."],
    const(),
)
def sentence_capitalized(text: str, p: Mapping[str, Any]) -> bool:
    """The first letter of every sentence is upper-case.

    Sentences come from :func:`fabrika.textutil.segment.sentences`, which keeps a
    lower-case continuation in its sentence where Russian writes one: after an
    abbreviation («50 кв. м», «20 чел. на встречу»), an initial, an ellipsis
    («Я подумал… и решил») or a dialogue dash («— Привет! — сказал он.»), and
    splits «Привет. как дела?» in two. A sentence that starts with a number
    («2024 год был…») or an ellipsis («…и тогда») has no first letter to check, and
    list items after a line ending in «:», «;» or «,» continue that sentence
    («Купите:\n- хлеб;\n- молоко.»).
    """
    seen = False
    prev_end = ""
    for line in lines(text):
        sents = sentences(line)
        continues = bool(_LIST_ITEM.match(line)) and prev_end in (":", ";", ",")
        for s in sents:
            m = _ALNUM.search(s)
            if m is None:
                continue
            seen = True
            if m.group(0).isdigit() or s.lstrip(" «\"(—–-*•").startswith(("…", "...")):
                continue  # «1.» of a numbered item, «2024 год …», «…и тогда»
            if continues:
                continues = False
                continue
            if not m.group(0).isupper():
                return False
        prev_end = line.rstrip(" *_")[-1:]
    return seen


_LIST_ITEM = re.compile(r"^\s*(?:[-*+•–—]|\d+[.)])\s+")


# ---------------------------------------------------------------- punctuation
def _no_char(cid: str, chars: str, instruction: str) -> None:
    def check(text: str, p: Mapping[str, Any]) -> bool:
        return not any(ch in text for ch in chars)

    check.__doc__ = f"None of {chars!r} occurs."
    constraint(cid, "punctuation", [instruction], const())(check)


_no_char("ru.punct.no_commas", ",", "Не используйте в ответе ни одной запятой.")
_no_char("ru.punct.no_exclamation", "!", "Не используйте восклицательные знаки.")
_no_char("ru.punct.no_question", "?", "Не используйте в ответе вопросительные знаки.")
_no_char("ru.punct.no_semicolon", ";", "Не используйте точку с запятой.")


@constraint("ru.punct.no_dash", "punctuation", ["Не используйте тире (ни «—», ни «–»)."], const())
def no_dash(text: str, p: Mapping[str, Any]) -> bool:
    """No em/en dash and no spaced hyphen used as a dash; hyphens inside words («кто-то») are fine."""
    return not re.search(r"[—–]|(?<=\S)[ \t]+-[ \t]+", text)


# ---------------------------------------------------------------- repeat
@constraint(
    "ru.repeat.request_first",
    "repeat",
    ["Сначала повторите запрос слово в слово, ничего не меняя, а затем дайте ответ. Запрос: «{request}»"],
    lambda rng: {"request": rng.choice(REQUESTS)},
)
def request_first(text: str, p: Mapping[str, Any]) -> bool:
    """Starts with the request verbatim (spacing aside) and then has an answer."""
    t, r = _spaced(text), _spaced(p["request"])
    return t.startswith(r) and bool(words(t[len(r) :]))


@constraint(
    "ru.repeat.phrase_n",
    "repeat",
    ["Повторите фразу «{phrase}» ровно {n:раз} в разных местах ответа, не изменяя её."],
    lambda rng: {"phrase": rng.choice(COPY_PHRASES), "n": rng.randint(2, 4)},
)
def phrase_n(text: str, p: Mapping[str, Any]) -> bool:
    """The phrase occurs exactly ``n`` times (case and spacing ignored)."""
    return _norm(text).count(_norm(p["phrase"])) == p["n"]


@constraint(
    "ru.repeat.copy_only",
    "repeat",
    ["Просто перепишите следующий текст слово в слово и ничего не добавляйте: «{request}»"],
    lambda rng: {"request": rng.choice(REQUESTS)},
)
def copy_only(text: str, p: Mapping[str, Any]) -> bool:
    """The response is the text itself (spacing and wrapping «» or quotes aside)."""
    return _spaced(text).strip("«»\"").strip() == _spaced(p["request"])


# ---------------------------------------------------------------- language
@constraint(
    "ru.language.response_lang",
    "language",
    ["Отвечайте только на {lang_name} языке.", "Весь ответ должен быть на {lang_name} языке."],
    lambda rng: {"lang": rng.choice(("ru", "ru", "en", "uk", "kk", "de"))},
    derive=lambda p: {"lang_name": LANGUAGE_NAMES_RU[p["lang"]], "lang_name_en": LANGUAGES[p["lang"]].name.title()},
)
def response_lang(text: str, p: Mapping[str, Any]) -> bool:
    """The answer is in ``lang`` (lingua, restricted set; a short Russian answer such as «Да.»
    is recognised by its dictionary words); Cyrillic answers must hold no homoglyph words."""
    if p["lang"] in ("ru", "uk", "be", "bg", "kk") and homoglyph_words(text):
        return False
    return is_language(text, p["lang"])


@constraint(
    "ru.language.ru_then_en",
    "language",
    ["Дайте ответ сначала на русском языке, а затем, после пустой строки, — тот же ответ на английском."],
    const(),
)
def ru_then_en(text: str, p: Mapping[str, Any]) -> bool:
    """Two parts split by a blank line: the first in Russian, the last in English."""
    paras = paragraphs(text)
    if len(paras) < 2:
        return False
    first, last = paras[0], paras[-1]
    return is_language(first, "ru") and not homoglyph_words(first) and is_language(last, "en")
