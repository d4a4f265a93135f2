"""Russian text helpers shared by constraints, rewards and filters.

Normalisation to what a reader sees (:mod:`normalize`), segmentation (razdel), morphology (pymorphy3), homoglyphs and NFC, language id
(lingua). Heavy objects (analyzer, detector) load lazily, once per process.

Names are imported on first use, so a module that needs one helper (the shard writer needs
:func:`fabrika.textutil.sanitize.clean_text`) does not load the lingua, razdel and pymorphy3 wrappers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# eager: ``normalize`` is both a name here and a submodule, and the function must win whichever is imported first
from fabrika.textutil.normalize import is_invisible, normalize

if TYPE_CHECKING:
    from fabrika.textutil.lang import LANGUAGES, detect_language, language_confidence
    from fabrika.textutil.morph import agree, lemma, lemmas, parses, syllables
    from fabrika.textutil.script import (
        fold_homoglyphs,
        has_cyrillic,
        has_latin,
        homoglyph_words,
        is_mixed_script,
    )
    from fabrika.textutil.segment import (
        lines,
        nfc,
        paragraphs,
        sentences,
        strip_markdown,
        tokens,
        words,
    )

_WHERE: dict[str, str] = {
    "LANGUAGES": "fabrika.textutil.lang",
    "agree": "fabrika.textutil.morph",
    "detect_language": "fabrika.textutil.lang",
    "fold_homoglyphs": "fabrika.textutil.script",
    "has_cyrillic": "fabrika.textutil.script",
    "has_latin": "fabrika.textutil.script",
    "homoglyph_words": "fabrika.textutil.script",
    "is_mixed_script": "fabrika.textutil.script",
    "language_confidence": "fabrika.textutil.lang",
    "lemma": "fabrika.textutil.morph",
    "lemmas": "fabrika.textutil.morph",
    "lines": "fabrika.textutil.segment",
    "nfc": "fabrika.textutil.segment",
    "paragraphs": "fabrika.textutil.segment",
    "parses": "fabrika.textutil.morph",
    "sentences": "fabrika.textutil.segment",
    "strip_markdown": "fabrika.textutil.segment",
    "syllables": "fabrika.textutil.morph",
    "tokens": "fabrika.textutil.segment",
    "words": "fabrika.textutil.segment",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fabrika.textutil' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "LANGUAGES",
    "agree",
    "detect_language",
    "fold_homoglyphs",
    "has_cyrillic",
    "has_latin",
    "homoglyph_words",
    "is_invisible",
    "is_mixed_script",
    "language_confidence",
    "lemma",
    "lemmas",
    "lines",
    "nfc",
    "normalize",
    "paragraphs",
    "parses",
    "sentences",
    "strip_markdown",
    "syllables",
    "tokens",
    "words",
]
