"""Language identification with lingua, restricted to languages that matter here.

Restricting the candidate set keeps short Russian texts from being called
Bulgarian or Serbian («Привет» → ru). Full (not low-accuracy) mode: short
instructions and one-line answers are exactly where low-accuracy mode fails.
"""

from __future__ import annotations

import re
from functools import lru_cache

from lingua import Language, LanguageDetector, LanguageDetectorBuilder

from fabrika.textutil.normalize import normalize

LANGUAGES: dict[str, Language] = {
    "ru": Language.RUSSIAN,
    "uk": Language.UKRAINIAN,
    "be": Language.BELARUSIAN,
    "bg": Language.BULGARIAN,
    "sr": Language.SERBIAN,
    "mk": Language.MACEDONIAN,
    "kk": Language.KAZAKH,
    "mn": Language.MONGOLIAN,
    "en": Language.ENGLISH,
    "de": Language.GERMAN,
    "fr": Language.FRENCH,
    "es": Language.SPANISH,
    "it": Language.ITALIAN,
    "tr": Language.TURKISH,
}
_CODES = {lang: code for code, lang in LANGUAGES.items()}
LANGUAGE_NAMES_RU: dict[str, str] = {
    "ru": "русском", "uk": "украинском", "be": "белорусском", "bg": "болгарском",
    "sr": "сербском", "mk": "македонском", "kk": "казахском", "mn": "монгольском",
    "en": "английском", "de": "немецком", "fr": "французском", "es": "испанском",
    "it": "итальянском", "tr": "турецком",
}  # fmt: skip


@lru_cache(maxsize=1)
def detector() -> LanguageDetector:
    """The process-wide lingua detector over :data:`LANGUAGES` (built lazily, ~1 s)."""
    return LanguageDetectorBuilder.from_languages(*LANGUAGES.values()).build()


def detect_language(text: str) -> str | None:
    """ISO 639-1 code of the most likely language, or None when undecidable."""
    lang = detector().detect_language_of(text)
    return _CODES.get(lang) if lang is not None else None


def language_confidence(text: str, code: str) -> float:
    """lingua's confidence in [0, 1] that ``text`` is in language ``code``."""
    if code not in LANGUAGES:
        raise ValueError(f"language code {code!r} is not supported; use one of {sorted(LANGUAGES)}")
    return float(detector().compute_language_confidence(text, LANGUAGES[code]))


# Letters a Russian word never has: those of Ukrainian, Belarusian, Serbian, Macedonian, Kazakh …
_RUSSIAN_WORD = re.compile(r"^[а-яё]+(?:-[а-яё]+)*$", re.IGNORECASE)
_SHORT_WORDS = 8
_SHORT_RATIO = 0.5
_FLAT = 0.3  # a top confidence below this is lingua's prior, not evidence


def _short_russian(text: str) -> bool:
    """A short text (≤ 8 words) of Russian dictionary words only: «Да.», «Не знаю.», «Так.».

    lingua has too little evidence here and calls «Да.» Kazakh and «Не знаю.» Ukrainian;
    pymorphy3's dictionary decides instead. A word with a letter foreign to Russian
    («ї», «ў», «ј», «ә») or one the dictionary does not hold («дякую») leaves it to lingua.
    """
    from fabrika.textutil.morph import analyzer
    from fabrika.textutil.segment import words

    ws = words(text)
    if not ws or len(ws) > _SHORT_WORDS:
        return False
    return all(_RUSSIAN_WORD.match(w) and analyzer().word_is_known(w.lower()) for w in ws)


def is_language(text: str, code: str) -> bool:
    """Is ``text`` written in ``code``? lingua, except that a short text of Russian
    dictionary words counts as Russian (see :func:`_short_russian`) whatever lingua
    says, unless lingua has evidence against it (see the comment in the body):
    a careful grader reads «Да.» as a Russian answer, even though the same letters are
    also Bulgarian, Kazakh or Ukrainian."""
    if code not in LANGUAGES:
        raise ValueError(f"language code {code!r} is not supported; use one of {sorted(LANGUAGES)}")
    text = normalize(text)
    if detect_language(text) == code:
        return True
    if code != "ru" or not _short_russian(text):
        return False
    # lingua must have no evidence against Russian: either it is flat (for «Да.» every Cyrillic
    # language gets 0.08–0.18) or Russian is near the top («Не знаю.»: uk 0.27, ru 0.25) —
    # not far behind, as for the Bulgarian «Здравей, как си?» (bg 0.40, ru 0.14)
    values = detector().compute_language_confidence_values(text)
    top = values[0].value if values else 0.0
    ru = next((v.value for v in values if v.language == Language.RUSSIAN), 0.0)
    return top < _FLAT or ru >= _SHORT_RATIO * top


_CYR = re.compile(r"[А-Яа-яЁё]")
_LAT = re.compile(r"[A-Za-z]")


@lru_cache(maxsize=1)
def _russian_detector() -> LanguageDetector:
    langs = [Language.RUSSIAN, Language.ENGLISH, Language.UKRAINIAN, Language.BELARUSIAN,
             Language.BULGARIAN, Language.GERMAN, Language.FRENCH, Language.SPANISH]
    return LanguageDetectorBuilder.from_languages(*langs).build()


def check_russian(text: str, *, min_cyrillic_share: float = 0.6) -> str | None:
    """``None`` if ``text`` reads as Russian, else a reason (``not_russian: …``, ``garbled: …``).

    Latin inside quotes/code (``JSON``, ``P.S.``) is fine; the share counts letters only.
    """
    if "\ufffd" in text:
        return "garbled: contains U+FFFD replacement characters"
    letters = len(_CYR.findall(text)) + len(_LAT.findall(text))
    if letters < 3:
        return "garbled: too few letters"
    if sum(ch.isalpha() or ch.isspace() for ch in text) / len(text) < 0.5:
        return "garbled: mostly symbols"
    share = len(_CYR.findall(text)) / letters
    if share < min_cyrillic_share:
        return f"not_russian: cyrillic share {share:.2f} < {min_cyrillic_share}"
    lang = _russian_detector().detect_language_of(text)
    if lang is not None and lang.name != "RUSSIAN":
        return f"not_russian: detected {lang.name.lower()}"
    return None
