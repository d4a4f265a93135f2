"""One normalisation step for every verifier: what a reader cannot see cannot change a verdict.

Every hand-written case (positive and negative) of every constraint keeps its verdict when
soft hyphens and zero-width characters are inserted into words, stress marks are put on
vowels, spaces become no-break or thin spaces, and line ends become CRLF.
"""

from __future__ import annotations

import re

import pytest

from fabrika.constraints import REGISTRY

from .test_library import _IDS, ALL_CASES

_CYR_WORD = re.compile(r"[а-яёА-ЯЁ]{3,}")
_VOWEL = re.compile(r"([аеиоуыэюяАЕИОУЫЭЮЯ])")


def _invisible_noise(text: str) -> str:
    """Soft hyphen after the 2nd letter, zero-width space before the last one, word joiner at the end."""
    return _CYR_WORD.sub(lambda m: f"{m[0][:2]}\u00ad{m[0][2:-1]}\u200b{m[0][-1]}\u2060", text)


def _stress(text: str) -> str:
    """An acute stress mark on the first vowel of each word of three or more letters."""
    return _CYR_WORD.sub(lambda m: _VOWEL.sub("\\1\u0301", m[0], count=1), text)


def _spaces(text: str) -> str:
    return text.replace(" ", "\u00a0").replace("\n", "\r\n")


def _thin(text: str) -> str:
    return text.replace(" ", "\u2009")


NOISES = {"invisible": _invisible_noise, "stress": _stress, "nbsp+crlf": _spaces, "thin": _thin}
# JSON checks code points by design (RFC 8259): its invisible-character cases are in test_grader.py
_CASES = [(case, i) for case, i in zip(ALL_CASES, _IDS) if not REGISTRY[case[0]].raw_input]


@pytest.mark.parametrize("noise", sorted(NOISES))
@pytest.mark.parametrize(("cid", "params", "positives", "negatives"), [c for c, _ in _CASES], ids=[i for _, i in _CASES])
def test_invisible_differences_do_not_change_a_verdict(
    noise: str, cid: str, params: dict, positives: list[str], negatives: list[str]
) -> None:
    c = REGISTRY[cid]
    for text, expected in [(t, True) for t in positives] + [(t, False) for t in negatives]:
        noisy = NOISES[noise](text)
        assert c.verify(noisy, params) is expected, f"{cid} {params}: {noise} changed the verdict on {noisy!r}"
