""""Did you mean": the closest known names to a mistyped one (``difflib``), for error messages."""

from __future__ import annotations

import difflib
from typing import Iterable


def close_matches(word: str, options: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to ``n`` options closest to ``word``; a case-only or dotted-prefix difference counts as close."""
    opts = [str(o) for o in options]
    exact = [o for o in opts if o.lower() == word.lower() and o != word]
    found = difflib.get_close_matches(word, opts, n=n, cutoff=cutoff)
    return list(dict.fromkeys(exact + found))[:n]


def did_you_mean(word: object, options: Iterable[str]) -> str:
    """``"; did you mean 'fc.tools'?"`` (to append to a message) or ``""`` when nothing is close."""
    if not isinstance(word, str) or not word:
        return ""
    found = close_matches(word, options)
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(f) for f in found) + "?"
