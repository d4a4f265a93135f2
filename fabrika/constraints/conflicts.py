"""Which constraints cannot be combined in one prompt.

Two levels:

* **id level** (:data:`PAIRS`): incompatible whatever the parameters
  (JSON vs bullets, all-lowercase vs all-caps, ё everywhere vs ё nowhere);
* **parameter level** (:func:`params_conflict`): incompatible for these values
  (words_max=50 with words_min=100; a lipogram on «ф» with the keyword «фонарь»;
  «P.S.» with no-Latin; «Давайте разберёмся.» as the start with «no first person»:
  text a constraint requires verbatim that another constraint forbids, see
  :func:`forbid_text`).

``tests/constraints/test_conflict_pairs.py`` checks the table automatically: every
pair it lets combine has a witness text that passes both verifiers.

:func:`apply_conflicts` writes the symmetric id-level sets into each
``SeedConstraint.conflicts`` once every family is registered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fabrika.constraints.base import SeedConstraint
from fabrika.constraints.bounds import bounds_conflict
from fabrika.textutil.morph import lemma, lemmas
from fabrika.textutil.script import has_latin
from fabrika.textutil.segment import words

# (a, [b, ...]) — a conflicts with every b (made symmetric).
PAIRS: list[tuple[str, list[str]]] = []
# Constraints that fix the whole response and combine with nothing.
EXCLUSIVE: set[str] = set()
# Constraints that forbid characters; params of other constraints must not require them.
_FORBIDDEN_CHARS: dict[str, Callable[[Mapping[str, Any]], str]] = {}
# Constraints that forbid words or forms; text other constraints require verbatim must not hold them.
_FORBIDDEN_TEXT: dict[str, Callable[[str, Mapping[str, Any]], bool]] = {}


def add_pairs(a: str, others: Iterable[str]) -> None:
    """Declare that ``a`` conflicts with each of ``others``."""
    PAIRS.append((a, list(others)))


def apply_conflicts(registry: dict[str, SeedConstraint]) -> None:
    """Fill ``conflicts`` of every registered constraint (symmetric); unknown ids are a bug."""
    table: dict[str, set[str]] = {cid: set() for cid in registry}
    for a, others in PAIRS:
        for b in others:
            for x in (a, b):
                if x not in registry:
                    raise KeyError(f"conflict table names unknown constraint id {x!r}")
            table[a].add(b)
            table[b].add(a)
    for cid in EXCLUSIVE:
        table[cid] |= set(registry) - {cid}
        for other in registry:
            if other != cid:
                table[other].add(cid)
    for cid, c in registry.items():
        registry[cid] = dataclasses.replace(c, conflicts=frozenset(table[cid]))


# Parameters whose text must appear in the response (not settings such as ``relation`` or ``lang``).
TEXT_PARAMS = frozenset({"phrase", "keywords", "keyword", "word", "request", "marker", "letter"})
# Of those, the ones that must appear word for word (a keyword may be inflected).
VERBATIM_PARAMS = frozenset({"phrase", "request", "marker"})


def verbatim_texts(params: Mapping[str, Any]) -> list[str]:
    """The texts ``params`` require word for word (see :data:`VERBATIM_PARAMS`)."""
    return [v for k, v in params.items() if k in VERBATIM_PARAMS and isinstance(v, str)]


def _strings(params: Mapping[str, Any]) -> list[str]:
    """The response text a constraint's parameters require (see :data:`TEXT_PARAMS`)."""
    out: list[str] = []
    for k, v in params.items():
        if k not in TEXT_PARAMS:
            continue
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, str))
    return out


def _num(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """Numeric incompatibilities: implied bounds (see :mod:`bounds`) plus a few direct ones."""
    if bounds_conflict(a, pa, b, pb):
        return True
    if a == "ru.length.paragraphs_exact" and b == "ru.keywords.paragraph_first_word":
        return pa["n"] != pb["n"]
    if a == "ru.case.capital_words_max" and b == "ru.case.capital_words_min":
        return pa["n"] < pb["n"]
    if a == "ru.keywords.frequency" and b == "ru.keywords.frequency" and pa["keyword"] == pb["keyword"]:
        return True
    return False


def _keyword_ban(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """A banned lemma that another constraint's parameters require."""
    if a != "ru.keywords.exclude":
        return False
    banned = {lemma(k) for k in pa["keywords"]}
    return any(banned & lemmas(w) for s in _strings(pb) for w in words(s))


def _chars(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """A forbidden character (or Latin, or ё) that another constraint's parameters contain."""
    if a not in _FORBIDDEN_CHARS:
        return False
    forbidden = _FORBIDDEN_CHARS[a](pa)
    texts = _strings(pb)
    if forbidden == "LATIN":
        return any(has_latin(s) for s in texts)
    return any(ch in s.lower() for s in texts for ch in forbidden)


def forbid_chars(cid: str, chars: Callable[[Mapping[str, Any]], str]) -> None:
    """Declare the characters ``cid`` forbids (``"LATIN"`` for any Latin letter)."""
    _FORBIDDEN_CHARS[cid] = chars


def forbid_text(cid: str, violates: Callable[[str, Mapping[str, Any]], bool]) -> None:
    """Declare what ``cid`` forbids in any part of a response: ``violates(text, params)``.

    The check must be local (a part that violates makes the whole response violate),
    so a phrase or request another constraint requires verbatim can be tested alone.
    """
    _FORBIDDEN_TEXT[cid] = violates


def _text_ban(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """Verbatim text ``b`` requires that ``a`` forbids («Давайте разберёмся.» vs no first person)."""
    if a not in _FORBIDDEN_TEXT:
        return False
    return any(_FORBIDDEN_TEXT[a](s, pa) for s in verbatim_texts(pb))


_PARAM_RULES: list[Callable[[str, Mapping[str, Any], str, Mapping[str, Any]], bool]] = [
    _num,
    _keyword_ban,
    _chars,
    _text_ban,
]


def params_conflict(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """True if ``a`` with ``pa`` and ``b`` with ``pb`` cannot both hold (either order).

    The same id twice always conflicts: a combination holds each constraint once.
    """
    if a == b:
        return True
    return any(rule(x, px, y, py) for rule in _PARAM_RULES for x, px, y, py in ((a, pa, b, pb), (b, pb, a, pa)))


def add_param_rule(rule: Callable[[str, Mapping[str, Any], str, Mapping[str, Any]], bool]) -> None:
    """Register an extra parameter-level rule (called in both orders)."""
    _PARAM_RULES.append(rule)
