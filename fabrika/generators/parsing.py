"""Parsing untrusted LLM answers into JSON (DESIGN contract 3).

Models wrap JSON in markdown fences, add prose before or after it, or emit
Python-style escaped newlines. :func:`extract_json` finds the first complete
JSON value and returns it, or a reason string that becomes a recorded rejection.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


class ParseFailure(str):
    """A reason why an answer could not be parsed (a ``str`` so it can go straight into ``reason``)."""


def extract_json(text: str | None, *, expect: type | tuple[type, ...] = (dict, list)) -> Any:
    """Return the first JSON value of type ``expect`` found in ``text``, else a :class:`ParseFailure`.

    Tries, in order: the whole text, fenced blocks, then every ``{``/``[`` position
    with :meth:`json.JSONDecoder.raw_decode` (so trailing prose is ignored).
    """
    if text is None or not text.strip():
        return ParseFailure("empty_answer")
    decoder = json.JSONDecoder()
    candidates = [text.strip()] + [m.group(1).strip() for m in _FENCE.finditer(text)]
    for cand in candidates:
        try:
            value = json.loads(cand)
        except json.JSONDecodeError:
            continue
        if isinstance(value, expect):
            return value
    for i, ch in enumerate(text):
        if ch not in "{[":
            continue
        try:
            value, _ = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            continue
        if isinstance(value, expect):
            return value
    if text.count("{") > text.count("}"):
        return ParseFailure("invalid_json: truncated (unbalanced braces)")
    return ParseFailure("invalid_json: no JSON object found")


def is_failure(value: Any) -> bool:
    return isinstance(value, ParseFailure)
