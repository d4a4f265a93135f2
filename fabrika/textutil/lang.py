"""Language identification with lingua, restricted to languages that matter here.

Restricting the candidate set keeps short Russian texts from being called
Bulgarian or Serbian («Привет» → ru). Full (not low-accuracy) mode: short
instructions and one-line answers are exactly where low-accuracy mode fails.
"""

from __future__ import annotations

from functools import lru_cache

from lingua import Language, LanguageDetector, LanguageDetectorBuilder

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
