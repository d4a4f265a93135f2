"""Constraints specific to Russian: ё, script, quotes, numerals, address, acrostics, metre, tense.

Morphology uses every pymorphy3 analysis where ambiguity matters (see each docstring).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fabrika.constraints.base import const, constraint
from fabrika.constraints.pools import ACROSTIC_WORDS
from fabrika.textutil.morph import parses, syllables
from fabrika.textutil.script import has_latin
from fabrika.textutil.segment import lines, sentences, words

F = "russian"
_CYR_WORD = re.compile(r"^[а-яё]+(?:-[а-яё]+)*$", re.IGNORECASE)
_FIRST_LETTER = re.compile(r"[^\W\d_]")


def missing_yo(text: str) -> list[str]:
    """Words written with «е» where every pymorphy3 analysis has «ё» («еще», «зеленый»).

    Words with a real choice («все»/«всё», «небо»/«нёбо») are not flagged.
    """
    out = []
    for w in words(text):
        if "е" not in w.lower() or "ё" in w.lower() or not _CYR_WORD.match(w):
            continue
        forms = {p.word for p in parses(w)}
        if forms and all("ё" in f for f in forms):
            out.append(w)
    return out


@constraint(
    "ru.russian.yo_everywhere",
    F,
    ["Везде, где нужно, пишите букву «ё» (ещё, её, всё равно, зелёный), а не «е»."],
    const(),
)
def yo_everywhere(text: str, p: Mapping[str, Any]) -> bool:
    """No word that always takes «ё» is written with «е»."""
    return not missing_yo(text)


@constraint("ru.russian.yo_nowhere", F, ["Не используйте букву «ё»: везде пишите «е»."], const())
def yo_nowhere(text: str, p: Mapping[str, Any]) -> bool:
    """No «ё»/«Ё» at all."""
    return "ё" not in text.lower()


@constraint(
    "ru.russian.no_latin",
    F,
    ["Не используйте латинские буквы: все слова, включая термины и названия, пишите кириллицей."],
    const(),
)
def no_latin(text: str, p: Mapping[str, Any]) -> bool:
    """No Latin letter anywhere — homoglyphs inside Cyrillic words included."""
    return not has_latin(text)


@constraint(
    "ru.russian.guillemets",
    F,
    ["Если приводите цитаты или названия, используйте только кавычки-ёлочки «…», а не \"…\" или “…”."],
    const(),
)
def guillemets(text: str, p: Mapping[str, Any]) -> bool:
    """No straight or English/German double quotes, and every «…» closed in order.

    The instruction is conditional («если приводите цитаты…»): a text without any
    quotes fulfils it.
    """
    if any(ch in text for ch in QUOTES_NOT_GUILLEMETS):
        return False
    depth = 0
    for ch in text:
        depth += (ch == "«") - (ch == "»")
        if depth < 0:
            return False
    return depth == 0


QUOTES_NOT_GUILLEMETS = "\"“”„‟"  # after normalisation fullwidth «＂» is «\"»


@constraint(
    "ru.russian.numbers_in_words",
    F,
    ["Все числа пишите словами, а не цифрами (например, «двадцать пять», а не «25»)."],
    const(),
)
def numbers_in_words(text: str, p: Mapping[str, Any]) -> bool:
    """No digits (any script, «½», «Ⅻ» included) and no Roman numerals («XIX век»)."""
    return not any(ch.isnumeric() for ch in text) and not _ROMAN.search(text)


# Two or more Roman digits forming a valid numeral, as a word of its own («XIX», «IV», not «I» or «MIX»).
_ROMAN = re.compile(r"(?<![^\W\d_])(?=[MDCLXVI]{2,}(?![^\W\d_]))M{0,4}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})(?![^\W\d_])")


def _is(w: str, pred) -> bool:  # noqa: ANN001 - predicate over a Parse
    """The first (most likely) analysis satisfies ``pred``."""
    ps = parses(w)
    return bool(ps) and pred(ps[0])


def _ty_form(w: str) -> bool:
    """«ты», «твой», a 2nd-person singular verb, or a singular imperative («сделай»)."""
    def pred(p) -> bool:  # noqa: ANN001
        t = p.tag
        if p.normal_form in ("ты", "твой"):
            return True
        return t.POS == "VERB" and "sing" in t and ("2per" in t or ("impr" in t and "excl" in t))
    return _is(w, pred)


def _vy_form(w: str) -> bool:
    """«вы», «ваш», a 2nd-person plural verb, or a plural imperative («сделайте»)."""
    def pred(p) -> bool:  # noqa: ANN001
        t = p.tag
        if p.normal_form in ("вы", "ваш"):
            return True
        return t.POS == "VERB" and "plur" in t and ("2per" in t or ("impr" in t and "excl" in t))
    return _is(w, pred)


@constraint(
    "ru.russian.address_vy",
    F,
    ["Обращайтесь к читателю вежливо, на «Вы», и пишите «Вы», «Вас», «Ваш» с заглавной буквы."],
    const(),
)
def address_vy(text: str, p: Mapping[str, Any]) -> bool:
    """Some «Вы»-form, every вы/ваш pronoun capitalised, no ты-forms."""
    ws = words(text)
    pronouns = [w for w in ws if _is(w, lambda q: q.normal_form in ("вы", "ваш"))]
    if not pronouns or not all(w[0].isupper() for w in pronouns):
        return False
    return not any(_ty_form(w) for w in ws)


@constraint(
    "ru.russian.address_ty",
    F,
    ["Обращайтесь к читателю на «ты», по-дружески."],
    const(),
)
def address_ty(text: str, p: Mapping[str, Any]) -> bool:
    """Some ты-form (pronoun or 2nd-person singular verb) and no вы-forms."""
    ws = words(text)
    return any(_ty_form(w) for w in ws) and not any(_vy_form(w) for w in ws)


def _first_letters(units: list[str]) -> str:
    out = []
    for u in units:
        m = _FIRST_LETTER.search(u)
        out.append(m.group(0).upper() if m else "")
    return "".join(out)


@constraint(
    "ru.russian.acrostic_lines",
    F,
    [
        "Напишите ответ из {n:строка:gent}: первые буквы строк сверху вниз должны складываться в слово «{word}».",
    ],
    lambda rng: {"word": rng.choice(ACROSTIC_WORDS)},
    derive=lambda p: {"n": len(p["word"])},
)
def acrostic_lines(text: str, p: Mapping[str, Any]) -> bool:
    """Non-empty lines' first letters spell ``word`` exactly (list markers and digits skipped)."""
    return _first_letters(lines(text)) == p["word"].upper()


@constraint(
    "ru.russian.acrostic_sentences",
    F,
    ["Напишите ответ из {n:предложение:gent}, первые буквы которых складываются в слово «{word}»."],
    lambda rng: {"word": rng.choice(ACROSTIC_WORDS)},
    derive=lambda p: {"n": len(p["word"])},
)
def acrostic_sentences(text: str, p: Mapping[str, Any]) -> bool:
    """Sentences' first letters spell ``word`` exactly (razdel sentences)."""
    return _first_letters(sentences(text)) == p["word"].upper()


@constraint(
    "ru.russian.syllables_line_max",
    F,
    ["Пишите короткими строками: в каждой строке не более {n:слог:gent}."],
    lambda rng: {"n": rng.choice((8, 10, 12, 15))},
)
def syllables_line_max(text: str, p: Mapping[str, Any]) -> bool:
    """Every non-empty line has at most ``n`` syllables (vowel letters)."""
    ls = lines(text)
    return bool(ls) and all(syllables(ln) <= p["n"] for ln in ls)


@constraint(
    "ru.russian.haiku",
    F,
    ["Ответьте в форме хокку: ровно три строки по 5, 7 и 5 слогов."],
    const(),
)
def haiku(text: str, p: Mapping[str, Any]) -> bool:
    """Exactly three lines with 5, 7 and 5 syllables."""
    return [syllables(ln) for ln in lines(text)] == [5, 7, 5]


def other_tense_verbs(text: str, tense: str) -> list[str]:
    """Words that can only be a finite verb outside ``tense`` (an imperative has no tense).

    An ambiguous word («дуло»: verb or noun) is read in the writer's favour.
    """
    return [w for w in words(text) if all(q.tag.POS == "VERB" and tense not in q.tag for q in parses(w))]


def _tense(name: str, tense: str, ru: str) -> None:
    def check(text: str, p: Mapping[str, Any]) -> bool:
        if other_tense_verbs(text, tense):
            return False
        return any(_is(w, lambda q: q.tag.POS == "VERB") and _in_tense(w, tense) for w in words(text))

    check.__doc__ = (
        f"At least one finite verb in {tense} tense and no word that can only be a finite verb in another "
        "tense or mood (ambiguous words such as «дуло» are not held against the writer)."
    )
    constraint(
        f"ru.russian.{name}_tense",
        F,
        [f"Все глаголы в ответе должны стоять в {ru} времени (причастия и деепричастия не в счёт)."],
        const(),
    )(check)


def _in_tense(w: str, tense: str) -> bool:
    """Some VERB analysis of ``w`` is in ``tense``."""
    return any(q.tag.POS == "VERB" and tense in q.tag for q in parses(w))


_tense("past", "past", "прошедшем")
_tense("present", "pres", "настоящем")
_tense("future", "futr", "будущем")


@constraint(
    "ru.russian.no_first_person",
    F,
    ["Пишите безлично: не используйте «я», «мы», «мой», «наш» и глаголы первого лица."],
    const(),
)
def no_first_person(text: str, p: Mapping[str, Any]) -> bool:
    """No я/мы/мой/наш and no verb whose most likely analysis is 1st person."""
    return not first_person_words(text)


def first_person_words(text: str) -> list[str]:
    """я/мы/мой/наш forms and verbs whose most likely analysis is 1st person («разберёмся»)."""
    def pred(q) -> bool:  # noqa: ANN001
        return q.normal_form in ("я", "мы", "мой", "наш") or (q.tag.POS == "VERB" and "1per" in q.tag)
    return [w for w in words(text) if _is(w, pred)]


def ty_words(text: str) -> list[str]:
    """Words addressing the reader as «ты» (pronoun or verb form)."""
    return [w for w in words(text) if _ty_form(w)]


def vy_words(text: str) -> list[str]:
    """Words addressing the reader as «вы» («Давайте», «Расскажите», «ваш»)."""
    return [w for w in words(text) if _vy_form(w)]
