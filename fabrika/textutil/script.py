"""Scripts and homoglyphs: Latin look-alikes hidden inside Cyrillic words.

A model can "avoid" a forbidden word or fake a Cyrillic-only answer by writing
Latin 'о', 'а', 'е', 'р', 'с' … inside a Cyrillic word. These helpers find such
mixed-script words and fold them back so verifiers can count them as violations.
"""

from __future__ import annotations

import re
import unicodedata

from fabrika.textutil.normalize import normalize
from fabrika.textutil.segment import words

# Latin letter -> Cyrillic look-alike (lower and upper case).
LATIN_TO_CYRILLIC: dict[str, str] = {
    "a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "y": "у", "k": "к",
    "A": "А", "B": "В", "E": "Е", "K": "К", "M": "М", "H": "Н", "O": "О", "P": "Р",
    "C": "С", "T": "Т", "X": "Х", "Y": "У", "i": "і", "I": "І",
}  # fmt: skip

_CYR = re.compile(r"[\u0400-\u04FF]")
_LAT = re.compile(r"[A-Za-z]")
_LATIN_ANY = re.compile(r"[A-Za-z\u00C0-\u024F]")


def has_cyrillic(text: str) -> bool:
    """True if ``text`` holds at least one Cyrillic letter."""
    return bool(_CYR.search(text))


def has_latin(text: str) -> bool:
    """True if ``text`` holds a Latin letter (basic or with diacritics; fullwidth and mathematical forms too)."""
    return bool(_LATIN_ANY.search(normalize(text)))


def is_mixed_script(word: str) -> bool:
    """A word with both Cyrillic and Latin letters («прoграмма» with Latin 'o')."""
    return bool(_CYR.search(word)) and bool(_LAT.search(word))


def homoglyph_words(text: str) -> list[str]:
    """Mixed-script words of ``text`` (each is a homoglyph violation)."""
    return [w for w in words(text) if is_mixed_script(w)]


def fold_homoglyphs(word: str) -> str:
    """Replace Latin look-alikes by Cyrillic letters in a mixed-script word; others unchanged."""
    if not is_mixed_script(word):
        return word
    return "".join(LATIN_TO_CYRILLIC.get(ch, ch) for ch in word)


RUSSIAN_LETTERS = frozenset("абвгдеёжзийклмнопрстуфхцчшщъыьэюя")
_CYR_TO_RUSSIAN = {"і": "и", "ї": "и", "є": "е", "ґ": "г", "ј": "j"}


def _russian_lookalike(ch: str) -> str:
    """A non-Russian Cyrillic letter as the Russian letter it resembles («ў» → «у», «ѓ» → «г»)."""
    low = ch.lower()
    if low in RUSSIAN_LETTERS or not _CYR.match(ch):
        return ch
    if low in _CYR_TO_RUSSIAN:
        out = _CYR_TO_RUSSIAN[low]
    else:
        out = "".join(c for c in unicodedata.normalize("NFD", low) if unicodedata.category(c) != "Mn")
        if out not in RUSSIAN_LETTERS:
            return ch
    return out.upper() if ch.isupper() else out


def is_lookalike_word(word: str) -> bool:
    """A word a reader takes for a Russian one but whose letters are not all Russian:
    mixed Cyrillic/Latin («прoграмма») or with a foreign Cyrillic letter («книгў»)."""
    if is_mixed_script(word):
        return True
    return bool(_CYR.search(word)) and any(_russian_lookalike(ch) != ch for ch in word)


def fold_lookalikes(word: str) -> str:
    """``word`` with Latin look-alikes and foreign Cyrillic letters as Russian letters (for bans)."""
    if not is_lookalike_word(word):
        return word
    return "".join(_russian_lookalike(ch) for ch in fold_homoglyphs(word))
