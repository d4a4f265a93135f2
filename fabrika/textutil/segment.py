"""Russian-aware segmentation: words, sentences, paragraphs, lines.

Results are cached per text (a reward checks one completion against several
constraints). Why not ``\\w+`` and English sentence rules: «кто-то» is one word, «3,5» is one
number, «т. е.», «г.» and initials («А. С. Пушкин») do not end a sentence.
razdel handles all of these; we only decide what counts as a *word* token.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import razdel

_HAS_ALNUM = re.compile(r"[^\W_]", re.UNICODE)
_BLANK_LINE = re.compile(r"\n\s*\n")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.MULTILINE)
_MD_LIST = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+", re.MULTILINE)


def nfc(text: str) -> str:
    """NFC-normalise: «й»/«ё» typed as base letter + combining mark become one code point."""
    return unicodedata.normalize("NFC", text)


def tokens(text: str) -> list[str]:
    """razdel tokens (see :func:`_tokens`); a fresh list, so callers may mutate it."""
    return list(_tokens(text))


@lru_cache(maxsize=512)
def _tokens(text: str) -> tuple[str, ...]:
    """razdel tokens (words, numbers, punctuation) of NFC-normalised ``text``.

    razdel splits a word at a script change («пр», «o», «грамма» for a Cyrillic
    word with a Latin 'o'); contiguous word pieces are glued back so that a
    homoglyph word stays one (mixed-script) word.
    """
    out: list[str] = []
    last_stop = -1
    last_alnum = False
    for t in razdel.tokenize(nfc(text)):
        alnum = bool(_HAS_ALNUM.search(t.text))
        if out and alnum and last_alnum and t.start == last_stop:
            out[-1] += t.text
        else:
            out.append(t.text)
        last_stop, last_alnum = t.stop, alnum
    return tuple(out)


def words(text: str) -> list[str]:
    """Word tokens: razdel tokens holding a letter or digit.

    Hyphenated words («кто-то», «2020-м») and decimal numbers («3,5») count once;
    dashes, quotes and other punctuation do not count.
    """
    return [t for t in tokens(text) if _HAS_ALNUM.search(t)]


def lines(text: str) -> list[str]:
    """Non-empty lines, stripped."""
    return [ln.strip() for ln in nfc(text).splitlines() if ln.strip()]


def paragraphs(text: str) -> list[str]:
    """Paragraphs separated by blank lines (empty ones dropped)."""
    return [p.strip() for p in _BLANK_LINE.split(nfc(text).strip()) if p.strip()]


def sentences(text: str) -> list[str]:
    """Sentences by razdel, each line on its own (list items and titles end a sentence).

    Fragments without a letter or digit (a lone «—» or «***») are not sentences.
    """
    return list(_sentences(text))


@lru_cache(maxsize=512)
def _sentences(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for line in lines(text):
        for s in razdel.sentenize(line):
            if _HAS_ALNUM.search(s.text):
                out.append(s.text.strip())
    return tuple(out)


def strip_markdown(text: str) -> str:
    """Drop markdown emphasis, headings and list markers (used by loose verification)."""
    text = _MD_HEADING.sub("", text)
    text = _MD_LIST.sub("", text)
    return text.replace("**", "").replace("*", "").replace("`", "")
