"""Spoken forms of slot values that are not plain strings (numbers, lists, objects).

The user agent writes what a person would write. A list of order items or an
address object is not said as JSON: «молоко — 2, хлеб — 1», not
``[{"product": "молоко", "qty": 2}, …]``. The goal card therefore carries the
spoken form of such values (never their JSON), marked not verbatim; the
assistant is the one who turns words back into the call's structure. Enum
literals, dates, codes and e-mails stay verbatim (they are strings).
"""

from __future__ import annotations

import json
from typing import Any

from fabrika.schemas.fc import Fact, GoalCard

__all__ = ["spoken", "spoken_card"]

_AND = {"ru": "и", "en": "and"}
_YES_NO = {"ru": ("да", "нет"), "en": ("yes", "no")}


def _number(value: float | int, lang: str) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text.replace(".", ",") if lang == "ru" else text


def spoken(value: Any, lang: str) -> str:
    """How a person says ``value``: numbers as written in a sentence, lists as enumerations, objects by their values."""
    if isinstance(value, bool):
        return _YES_NO.get(lang, _YES_NO["en"])[0 if value else 1]
    if isinstance(value, (int, float)):
        return _number(value, lang)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        parts = [spoken(v, lang) for v in value.values() if v not in (None, "", [], {})]
        return " — ".join(parts) if len(parts) == 2 else ", ".join(parts)
    if isinstance(value, list):
        parts = [spoken(v, lang) for v in value]
        sep = "; " if any(isinstance(v, dict) for v in value) else ", "
        if len(parts) <= 1:
            return "".join(parts)
        return f"{sep.join(parts[:-1])} {_AND.get(lang, 'and')} {parts[-1]}"
    return str(value)


def _structured(text: str) -> Any:
    if not text or text[:1] not in "[{":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) else None


def spoken_card(card: GoalCard, lang: str) -> GoalCard:
    """``card`` with every list or object fact replaced by its spoken form (not verbatim)."""
    facts: list[Fact] = []
    for f in card.facts:
        value = _structured(f.value)
        if value is None:
            facts.append(f)
            continue
        words = spoken(value, lang)
        say = f.say if f.say and _structured(f.say) is None and f.say != f.value else words
        facts.append(Fact(value=words, say=say, verbatim=False))
    return card.model_copy(update={"facts": facts})
