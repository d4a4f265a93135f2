"""Numeric bounds each constraint implies, for parameter-level conflict checks.

Instead of listing every numeric pair (words_max vs words_min, sentences_max vs a
5-item list, chars_max vs an acrostic of 5 lines …), each constraint states the
least and the most words / sentences / paragraphs a response can have under it;
two constraints conflict when one's minimum exceeds the other's maximum.
Minimums are deliberately low (one word per sentence or list item), so a
reported conflict is a real one.

The same bounds find **redundant** pairs (:func:`bounds_redundant`): a pure length
constraint (its verifier checks nothing but a count) adds nothing to a prompt when
another constraint's bounds already sit inside its own — «не более 120 слов» next to
«от 20 до 80 слов», or «не более 200 слов» next to «не более 150 символов». Implied
minimums are low and implied maximums are true maximums, so a reported redundancy is
a real one: every text passing the other constraint passes the redundant one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabrika.textutil.segment import words

Bounds = dict[str, tuple[int, int | None]]  # quantity -> (min, max or None)


def _rel(p: Mapping[str, Any]) -> tuple[int, int | None]:
    n, rel = p["n"], p["relation"]
    return {"at_least": (n, None), "at_most": (0, n), "exactly": (n, n)}[rel]


def implied_bounds(cid: str, p: Mapping[str, Any]) -> Bounds:
    """Bounds on ``words``, ``sentences``, ``paragraphs`` and ``chars`` implied by ``cid`` with ``p``."""
    b: Bounds = {}
    n: int = p.get("n", 0)  # the count of the constraints that have one
    if cid == "ru.length.words_max":
        b["words"] = (0, n)
    elif cid == "ru.length.words_min":
        b["words"] = (n, None)
    elif cid == "ru.length.words_range":
        b["words"] = (p["lo"], p["hi"])
    elif cid == "ru.length.sentences_max":
        b["sentences"] = (0, n)
    elif cid == "ru.length.sentences_min":
        b["sentences"] = (n, None)
    elif cid == "ru.length.sentences_exact":
        b["sentences"] = (n, n)
    elif cid == "ru.length.paragraphs_exact":
        b["paragraphs"] = (n, n)
        b["sentences"] = (n, None)
    elif cid == "ru.length.paragraphs_min":
        b["paragraphs"] = (n, None)
        b["sentences"] = (n, None)
    elif cid == "ru.length.chars_max":
        b["chars"] = (0, n)
        b["words"] = (0, (n + 1) // 2)  # a word takes at least a letter and a space
    elif cid == "ru.keywords.paragraph_first_word":
        b["paragraphs"] = (n, n)
        b["sentences"] = (n, None)
    elif cid in ("ru.format.bullets_exact", "ru.format.numbered_list", "ru.format.headers"):
        b["sentences"] = (n, None)  # every item/heading line is at least one sentence
    elif cid == "ru.format.sections":
        b["sentences"] = (n, None)
    elif cid == "ru.format.markdown_table":
        b["sentences"] = (n + 1, None)
    elif cid in ("ru.russian.acrostic_lines", "ru.russian.acrostic_sentences"):
        k = len(p["word"])
        b["sentences"] = (k, k) if cid.endswith("sentences") else (k, None)
    elif cid == "ru.russian.haiku":
        b["sentences"] = (3, None)
        b["chars"] = (15, None)
    elif cid in ("ru.format.two_responses", "ru.language.ru_then_en", "ru.format.postscript"):
        b["sentences"] = (2, None)
        if cid == "ru.language.ru_then_en":
            b["paragraphs"] = (2, None)
    elif cid == "ru.keywords.frequency":
        b["words"] = (_rel(p)[0], None)
    elif cid == "ru.keywords.include":
        b["words"] = (len(p["keywords"]), None)
    elif cid == "ru.case.capital_words_min":
        b["words"] = (n, None)
    elif cid == "ru.repeat.phrase_n":
        b["words"] = (n * len(words(p["phrase"])), None)
        b["chars"] = (n * len(p["phrase"]), None)
    elif cid == "ru.repeat.request_first":
        b["words"] = (len(words(p["request"])) + 1, None)
        b["chars"] = (len(p["request"]) + 2, None)
    elif cid == "ru.startend.start_phrase" or cid == "ru.startend.end_phrase":
        b["chars"] = (len(p["phrase"]), None)
    # every answer has at least one word and one sentence
    lo_w, hi_w = b.get("words", (1, None))
    b["words"] = (max(lo_w, 1), hi_w)
    if "sentences" in b:
        lo_s, hi_s = b["sentences"]
        b["words"] = (max(b["words"][0], lo_s), b["words"][1])  # a sentence holds a word
    return b


def bounds_conflict(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """True if some quantity's minimum under one exceeds its maximum under the other."""
    ba, bb = implied_bounds(a, pa), implied_bounds(b, pb)
    for q in set(ba) & set(bb):
        lo = max(ba[q][0], bb[q][0])
        his = [h for h in (ba[q][1], bb[q][1]) if h is not None]
        if his and lo > min(his):
            return True
    # words need characters: ~2 per word at the very least
    lo_words = max(ba["words"][0], bb["words"][0])
    chars_hi = [x["chars"][1] for x in (ba, bb) if "chars" in x and x["chars"][1] is not None]
    return bool(chars_hi) and 2 * lo_words - 1 > min(chars_hi)


#: Pure length constraints: the quantities their verifiers check, and nothing else.
PURE_BOUNDS: dict[str, tuple[str, ...]] = {
    "ru.length.words_max": ("words",), "ru.length.words_min": ("words",), "ru.length.words_range": ("words",),
    "ru.length.sentences_max": ("sentences",), "ru.length.sentences_min": ("sentences",),
    "ru.length.sentences_exact": ("sentences",), "ru.length.paragraphs_exact": ("paragraphs",),
    "ru.length.paragraphs_min": ("paragraphs",), "ru.length.chars_max": ("chars",),
}


def _inside(inner: tuple[int, int | None], outer: tuple[int, int | None]) -> bool:
    lo_in, hi_in = inner
    lo_out, hi_out = outer
    return lo_in >= lo_out and (hi_out is None or (hi_in is not None and hi_in <= hi_out))


def bounds_redundant(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """True if ``a`` holds for every text that satisfies ``b``; both pure length constraints (same id: never)."""
    if a == b or a not in PURE_BOUNDS or b not in PURE_BOUNDS:
        return False
    ba, bb = implied_bounds(a, pa), implied_bounds(b, pb)
    return all(q in bb and _inside(bb[q], ba[q]) for q in PURE_BOUNDS[a])

