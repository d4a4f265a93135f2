"""Is a value already given? The rules of :mod:`fabrika.agents.surface`, plus what a question asks for.

A clarification is a right target only when the slot it asks for is really
missing. :func:`value_given` (re-exported from :mod:`fabrika.agents.surface`,
where the user-leak check uses it too) says whether a text says a value in any
form a person uses — inflection, alias or short form («в Питере», «в Нижнем»,
«МСК»), transliteration («Ekaterinburg»), number words, written dates;
:func:`asked_params` says which parameters a question asks for, and
:func:`result_has` whether a tool result already carries one.

Everything is a pure function; an LLM check is layered on top by
:mod:`fabrika.generators.fc.target_judge`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from fabrika.agents.surface import ALIASES, dates_in, numbers_in, skeleton, surface_forms, value_given

__all__ = [
    "ALIASES", "asked_params", "dates_in", "given_in", "numbers_in", "result_has", "skeleton", "surface_forms",
    "value_given",
]


def given_in(value: Any, texts: Iterable[str]) -> bool:
    """:func:`value_given` over several texts (user turns, tool results)."""
    return any(value_given(value, t) for t in texts)


def asked_params(question: str, params: dict[str, dict[str, Any]], lang: str) -> list[str]:
    """The parameters a question asks about: a word of the name or description in any inflection.

    ``params`` maps a parameter name to its JSON Schema property.
    """
    from fabrika.rewards.fc_text import _text_lemmas, missing_info_terms

    if "?" not in question and not re.search(r"уточн|подскаж|укаж|назов|tell me|let me know|specify|which|what",
                                             question, re.IGNORECASE):
        return []
    said = _text_lemmas(question)
    out = []
    for name, schema in params.items():
        terms = missing_info_terms({"withheld": [{"name": name, "description": schema.get("description", "")}]},
                                   None)
        if terms and terms[0] & said:
            out.append(name)
    return out


def result_has(param: str, results: Iterable[str]) -> bool:
    """Does a tool result carry ``param`` as a non-empty key (the tool already answered it)?"""
    for raw in results:
        try:
            data = json.loads(raw)
        except (TypeError, ValueError):
            continue
        stack = [data]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if node.get(param) not in (None, "", [], {}):
                    return True
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    return False
