"""Russian text helpers shared by constraints, rewards and filters.

Normalisation to what a reader sees (:mod:`normalize`), segmentation (razdel), morphology (pymorphy3), homoglyphs and NFC, language id
(lingua). Heavy objects (analyzer, detector) load lazily, once per process.
"""

from fabrika.textutil.lang import LANGUAGES, detect_language, language_confidence
from fabrika.textutil.morph import agree, lemma, lemmas, parses, syllables
from fabrika.textutil.normalize import is_invisible, normalize
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
