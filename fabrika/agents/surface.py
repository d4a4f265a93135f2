"""How people say a value: inflections, short forms, abbreviations, transliterations, number words, dates.

Two checks need one answer — does this text say this value, in any form a person
uses? The user agent must not say a withheld value (:mod:`fabrika.agents.leaks`),
and a clarification is wrong when the value it asks for was already given
(:mod:`fabrika.filters.fc_given`). The rules here know

* **any word's inflections** (pymorphy3 lemmas: «в Казани» says ``Казань``);
* **cities and places** by a small alias table of short forms, abbreviations and
  nicknames («в Питере», «СПб» = Санкт-Петербург, «в Нижнем» = Нижний Новгород,
  «МСК», «Екб») and by transliteration across scripts («Ekaterinburg»,
  «Yekaterinburg» = Екатеринбург), compared as a Latin skeleton;
* **numbers** by value and in words («три», «two», «1 500» = 1500, «2,5» = 2.5);
* **dates** in ISO, dotted, and word forms («14 марта», «14.03», "March 14").
"""

from __future__ import annotations

import re
from datetime import date
from functools import lru_cache
from typing import Any

from fabrika.textutil.morph import lemmas

__all__ = ["ALIASES", "dates_in", "mentions", "numbers_in", "skeleton", "surface_forms", "value_given"]

_WORD_RE = re.compile(r"[\w-]+")


_CYRILLIC_RE = re.compile(r"[А-Яа-яЁё]")


@lru_cache(maxsize=4096)
def _lemma_seq(text: str) -> tuple[frozenset[str], ...]:
    """Each word's lemmas; cached because a leak check asks one text about many values (profiled:
    the user-facing text of a plan step is checked against every withheld form, tool and parameter)."""
    return tuple(lemmas(w) if _CYRILLIC_RE.search(w) else frozenset({w}) for w in _WORD_RE.findall(text.lower()))


def mentions(haystack: str, needle: str) -> bool:
    """Does ``haystack`` say ``needle`` (case-insensitive; whole words for a one-word needle)?"""
    return _contains(haystack, needle)


@lru_cache(maxsize=1 << 15)  # pure, and asked again and again: every tool name and value against a step's texts
def _contains(haystack: str, needle: str) -> bool:
    needle = needle.strip().lower()
    if len(needle) < 2:
        return False
    if re.fullmatch(r"[\w-]+", needle):
        if re.search(rf"(?<![\w-]){re.escape(needle)}(?![\w-])", haystack.lower()) is not None:
            return True
    elif needle in haystack.lower():
        return True
    if not _CYRILLIC_RE.search(needle):
        return False
    # Russian: the same words in another case («Казань» in «в Казани») are the same value
    want, have = _lemma_seq(needle), _lemma_seq(haystack)
    return bool(want) and any(all(want[j] & have[i + j] for j in range(len(want)))
                              for i in range(len(have) - len(want) + 1))


#: canonical place → other ways people write it (short forms, abbreviations, Latin spellings).
ALIASES: dict[str, tuple[str, ...]] = {
    "Санкт-Петербург": ("Питер", "Петербург", "СПб", "Спб", "С.-Петербург", "Saint Petersburg", "St. Petersburg",
                        "St Petersburg", "Petersburg", "SPb"),
    "Москва": ("МСК", "Мск", "Moscow", "Moskva", "Первопрестольная"),
    "Нижний Новгород": ("Нижний", "Нижнем", "Нижнего", "Н. Новгород", "Н.Новгород", "Нижний Н.", "Nizhny Novgorod",
                        "Nizhniy Novgorod", "NN"),
    "Екатеринбург": ("Екб", "ЕКБ", "Ёбург", "Ебург", "Ekaterinburg", "Yekaterinburg", "Ekb"),
    "Новосибирск": ("Новосиб", "Nsk", "Novosibirsk"),
    "Ростов-на-Дону": ("Ростов", "Rostov", "Rostov-on-Don"),
    "Владивосток": ("Владик", "Vladivostok"),
    "Калининград": ("Кёнигсберг", "Kaliningrad"),
    "Краснодар": ("Krasnodar", "КРД"),
    "Казань": ("Kazan",),
    "Самара": ("Samara",),
    "Пермь": ("Perm",),
    "Уфа": ("Ufa",),
    "Челябинск": ("Челяба", "Chelyabinsk"),
    "Набережные Челны": ("Челны", "Naberezhnye Chelny"),
    "Петропавловск-Камчатский": ("Петропавловск", "Камчатка"),
    "Соединённые Штаты": ("США", "Штаты", "USA", "US"),
    "Великобритания": ("Британия", "UK", "Англия"),
    "New York": ("NYC", "NY", "Нью-Йорк"),
    "Los Angeles": ("LA", "Лос-Анджелес"),
    "San Francisco": ("SF", "Сан-Франциско", "Frisco"),
    "London": ("Лондон",),
    "рубль": ("руб", "руб.", "₽", "RUB", "рубли"),
    "доллар": ("$", "USD", "бакс", "dollar"),
    "евро": ("€", "EUR", "euro"),
}

_ALIAS_INDEX: dict[str, str] = {}
for _canon, _forms in ALIASES.items():
    for _f in (_canon, *_forms):
        _ALIAS_INDEX.setdefault(_f.lower().replace("ё", "е"), _canon)

_TRANSLIT = {"а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "е": "e", "ё": "e", "ж": "zh", "з": "z", "и": "i",
             "й": "i", "к": "k", "л": "l", "м": "m", "н": "n", "о": "o", "п": "p", "р": "r", "с": "s", "т": "t",
             "у": "u", "ф": "f", "х": "h", "ц": "ts", "ч": "ch", "ш": "sh", "щ": "sch", "ъ": "", "ы": "y", "ь": "",
             "э": "e", "ю": "yu", "я": "ya"}


@lru_cache(maxsize=4096)
def skeleton(text: str) -> str:
    """A Latin consonant-and-vowel skeleton that Russian and its common transliterations share.

    «Екатеринбург», "Ekaterinburg" and "Yekaterinburg" all give ``ekaterinburg``;
    "Nizhny" and "Nizhniy" give ``nizhni``.
    """
    out = "".join(_TRANSLIT.get(ch, ch) for ch in text.lower())
    out = re.sub(r"[^a-z0-9]+", " ", out)
    for a, b in (("kh", "h"), ("iy", "i"), ("yi", "i"), ("ij", "i"), ("j", "i"), ("y", "i"), ("ie", "e"),
                 ("ts", "c"), ("tz", "c"), ("w", "v"), ("ph", "f"), ("x", "ks"), ("q", "k")):
        out = out.replace(a, b)
    out = re.sub(r"(?<=\w)ii\b", "i", out)
    out = re.sub(r"(.)\1", r"\1", out)
    return re.sub(r"^e", "e", out).strip()


# --- numbers -------------------------------------------------------------------------------------

_RU_UNITS = {"ноль": 0, "один": 1, "одна": 1, "одно": 1, "два": 2, "две": 2, "три": 3, "четыре": 4, "пять": 5,
             "шесть": 6, "семь": 7, "восемь": 8, "девять": 9, "десять": 10, "одиннадцать": 11, "двенадцать": 12,
             "тринадцать": 13, "четырнадцать": 14, "пятнадцать": 15, "шестнадцать": 16, "семнадцать": 17,
             "восемнадцать": 18, "девятнадцать": 19, "двадцать": 20, "тридцать": 30, "сорок": 40, "пятьдесят": 50,
             "шестьдесят": 60, "семьдесят": 70, "восемьдесят": 80, "девяносто": 90, "сто": 100, "двести": 200,
             "триста": 300, "пятьсот": 500, "тысяча": 1000, "полтора": 1.5, "полторы": 1.5, "пара": 2,
             "двое": 2, "трое": 3, "четверо": 4, "пятеро": 5, "первый": 1, "второй": 2, "третий": 3}
_EN_UNITS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
             "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30,
             "forty": 40, "fifty": 50, "hundred": 100, "thousand": 1000, "couple": 2, "dozen": 12, "once": 1,
             "twice": 2, "first": 1, "second": 2, "third": 3, "half": 0.5, "single": 1, "double": 2}
_NUM = re.compile(r"(?<![\w.,])\d{1,3}(?:[  ]\d{3})+(?![\d])|(?<![\w.,])\d+(?:[.,]\d+)?(?![\w])")
_WORD = re.compile(r"[A-Za-zА-Яа-яЁё]+")


def _word_number(word: str) -> float | None:
    low = word.lower().replace("ё", "е")
    if low in _EN_UNITS:
        return float(_EN_UNITS[low])
    if re.search(r"[а-я]", low):
        if low in _RU_UNITS:
            return float(_RU_UNITS[low])
        from fabrika.textutil.morph import lemmas

        for lem in lemmas(low):
            if lem in _RU_UNITS:
                return float(_RU_UNITS[lem])
    return None


def numbers_in(text: str, words: bool = True) -> list[float]:
    """Every number ``text`` states, by value: digits («1 500», «2,5») and, with ``words``, number words."""
    out = [float(re.sub(r"[  ]", "", n).replace(",", ".")) for n in _NUM.findall(text)]
    if words:
        out += [v for v in (_word_number(w) for w in _WORD.findall(text)) if v is not None]
    return out


# --- dates ---------------------------------------------------------------------------------------

_MONTHS_RU = ("январ", "феврал", "март", "апрел", "ма", "июн", "июл", "август", "сентябр", "октябр", "ноябр",
              "декабр")
_MONTHS_EN = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})")
_DOTTED = re.compile(r"(?<![\d.])(\d{1,2})[./](\d{1,2})(?:[./](\d{2,4}))?(?![\d])")
_RU_DAY_MONTH = re.compile(r"\b(\d{1,2})(?:-?го|-е)?\s+(январ\w*|феврал\w*|март\w*|апрел\w*|ма[йяе]\w*|июн\w*|"
                           r"июл\w*|август\w*|сентябр\w*|октябр\w*|ноябр\w*|декабр\w*)", re.IGNORECASE)
_EN_MONTH_DAY = re.compile(r"\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?\b"
                           r"|\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
                           r"[a-z]*", re.IGNORECASE)


def _ru_month(word: str) -> int:
    low = word.lower()
    if low.startswith("ма") and not low.startswith("март"):
        return 5
    return next(i + 1 for i, stem in enumerate(_MONTHS_RU) if low.startswith(stem))


def dates_in(text: str) -> set[tuple[int, int]]:
    """(month, day) of every date ``text`` names: ISO, ``14.03[.2025]``, «14 марта», "March 14", "14th of March"."""
    out: set[tuple[int, int]] = set()
    for _y, m, d in _ISO.findall(text):
        out.add((int(m), int(d)))
    stripped = _ISO.sub(" ", text)
    for d, m, _y in _DOTTED.findall(stripped):
        if 1 <= int(m) <= 12 and 1 <= int(d) <= 31:
            out.add((int(m), int(d)))
    for d, month in _RU_DAY_MONTH.findall(stripped):
        out.add((_ru_month(month), int(d)))
    for m1, d1, d2, m2 in _EN_MONTH_DAY.findall(stripped):
        month = (m1 or m2).lower()[:3]
        out.add((_MONTHS_EN.index(month) + 1, int(d1 or d2)))
    return {(m, d) for m, d in out if 1 <= d <= 31}


def _as_date(value: str) -> tuple[int, int] | None:
    m = _ISO.fullmatch(value.strip()[:10]) if _ISO.match(value.strip()) else None
    if m is None:
        return None
    try:
        parsed = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None
    return parsed.month, parsed.day


# --- values --------------------------------------------------------------------------------------


def surface_forms(value: str) -> list[str]:
    """The value and every alias of it from :data:`ALIASES` (the canonical form first)."""
    canon = _ALIAS_INDEX.get(value.strip().lower().replace("ё", "е"))
    if canon is None:
        return [value]
    return list(dict.fromkeys([value, canon, *ALIASES[canon]]))


def _alias_said(text: str, form: str, canonical: bool) -> bool:
    """Is ``form`` said in ``text``? A nickname with one capital («Питер», «Нижний») must be written with it:
    «на нижнюю полку» names no city. Abbreviations («СПб», «МСК») match in any case."""
    nickname = not canonical and re.fullmatch(r"[А-ЯЁA-Z][а-яёa-z-]+", form) is not None
    if not nickname:
        return mentions(text, form)
    if re.fullmatch(r"[А-ЯЁ][а-яё]{3,}", form):  # inflected: «в Питере», «в Нижнем», «из Новосиба»
        stem = form[:-2] if form.endswith(("ий", "ый", "ой")) else form[:-1] if form[-1] in "аяйьоеи" else form
        return re.search(rf"(?<![\w-]){re.escape(stem)}[а-яё]{{0,3}}(?![\w-])", text) is not None
    return re.search(rf"(?<![\w-]){re.escape(form)}(?![\w-])", text) is not None


def value_given(value: Any, text: str) -> bool:
    """Does ``text`` say ``value`` in any form a person uses (see module doc)?"""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return float(value) in numbers_in(text)
    if isinstance(value, list):
        return bool(value) and all(value_given(v, text) for v in value)
    if isinstance(value, dict):
        parts = [v for v in value.values() if not isinstance(v, bool)]
        return bool(parts) and all(value_given(v, text) for v in parts)
    value = str(value).strip()
    if len(value) < 2:
        return False
    when = _as_date(value)
    if when is not None:
        return when in dates_in(text)
    if re.fullmatch(r"-?\d+(?:[.,]\d+)?", value):
        return float(value.replace(",", ".")) in numbers_in(text)
    forms = surface_forms(value)
    if any(_alias_said(text, f, canonical=i == 0 or f == _ALIAS_INDEX.get(value.lower())) for i, f in enumerate(forms)):
        return True
    # transliteration: «Ekaterinburg» for Екатеринбург, "Piter" for «Питер», «Казань» for Kazan — across
    # scripts only (a Cyrillic form against the Latin words of the text, and back)
    latin = f" {skeleton(' '.join(re.findall(r'[A-Za-z][A-Za-z-]*', text)))} "
    cyrillic = f" {skeleton(' '.join(re.findall(r'[А-Яа-яЁё][А-Яа-яЁё-]*', text)))} "
    return any(len(skeleton(f)) >= 4 and f" {skeleton(f)} " in (latin if re.search(r"[А-Яа-яЁё]", f) else cyrillic)
               for f in forms)


