"""pymorphy3 helpers: lemmas over all analyses, number agreement, syllables.

The analyzer takes ~0.3 s to load, so it is created once, lazily, per process.
"""

from __future__ import annotations

from functools import lru_cache

import pymorphy3

VOWELS = frozenset("аеёиоуыэюяАЕЁИОУЫЭЮЯ")
_OBLIQUE = {"gent", "datv", "ablt", "loct"}


@lru_cache(maxsize=1)
def analyzer() -> pymorphy3.MorphAnalyzer:
    """The process-wide pymorphy3 analyzer."""
    return pymorphy3.MorphAnalyzer()


@lru_cache(maxsize=65536)
def parses(word: str) -> tuple[pymorphy3.analyzer.Parse, ...]:
    """All pymorphy3 analyses of ``word`` (lower-cased, ё-aware), cached."""
    return tuple(analyzer().parse(word.lower()))


def _normal_form(p: pymorphy3.analyzer.Parse) -> str:
    """The normal form without a hyphenated particle («книгу-то» → «книга», not «книга-то»).

    pymorphy3 analyses «книгу-то», «смотри-ка», «город-таки» as the word plus a particle
    and keeps the particle in the normal form; dictionary words such as «кто-то» or
    «когда-то» are not touched (they are words of their own, not «кто» + particle).
    """
    nf = p.normal_form
    last = p.methods_stack[-1] if p.methods_stack else None
    if last is not None and type(last[0]).__name__ == "HyphenSeparatedParticleAnalyzer":
        particle = str(last[1])
        if nf.endswith(particle):
            nf = nf[: -len(particle)]
    return nf.replace("ё", "е")


@lru_cache(maxsize=65536)
def lemmas(word: str) -> frozenset[str]:
    """Every normal form of ``word`` across ALL analyses, with ё folded to е.

    Matching on all analyses catches a forbidden word in any inflection
    («котами» → «кот») while «который» never lemmatises to «кот»; an emphatic
    particle does not hide a word («книгу-то» → «книга»).
    """
    return frozenset(_normal_form(p) for p in parses(word))


def lemma(word: str) -> str:
    """The most likely normal form (first analysis), ё folded to е, particle dropped."""
    return _normal_form(parses(word)[0])


def agree(word: str, n: int, case: str = "nomn") -> str:
    """``word`` in the form that agrees with the number ``n``.

    ``case="nomn"`` (also right for inanimate accusative): 1 слово, 2 слова, 5 слов,
    11 слов, 21 слово. An oblique ``case`` (``"gent"``, as after «не более»):
    1 слова, 2 слов, 5 слов, 21 слова — pymorphy3's ``make_agree_with_number``
    would give «2 слова» there, which is wrong.
    """
    ps = analyzer().parse(word)
    p = next((x for x in ps if {"nomn", "sing"} <= x.tag.grammemes), ps[0])
    if case not in _OBLIQUE:
        form = p.make_agree_with_number(abs(n))
    else:
        number = "sing" if (abs(n) % 10 == 1 and abs(n) % 100 != 11) else "plur"
        form = p.inflect({case, number})
    return form.word if form is not None else word


def syllables(text: str) -> int:
    """Syllables of Russian text = number of vowel letters."""
    return sum(1 for ch in text if ch in VOWELS)


def pos_tags(word: str) -> tuple[str, ...]:
    """Every POS tag pymorphy3 gives ``word`` (in analysis order)."""
    return tuple(str(p.tag.POS) for p in parses(word))
