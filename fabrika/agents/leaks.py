"""What the user agent must never be told: withheld values, tool and parameter names, future values.

The user agent sees the persona and the goal card of its turn (DESIGN contract 8).
A plan's user-facing text (``intent``, ``user_message``, each slot's ``say``) and
the persona are checked here for anything the user must not say yet: a withheld
argument's value in any surface form (canonical, said, enum literal — and any
inflection, short form, abbreviation or transliteration of it: «в Казани» gives
away ``Казань``, «в Питере» ``Санкт-Петербург``; :mod:`fabrika.agents.surface`), a tool name, a
parameter identifier, or a value that only a later step introduces. The plan
stage turns the findings into review issues; the user view raises
:class:`PlanLeak` as the last guard.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from fabrika.agents.surface import mentions, numbers_in, value_given
from fabrika.schemas.fc import Persona, PlanStep, ToolSpec
from fabrika.textutil.morph import lemmas

__all__ = ["PlanLeak", "mentions", "said_value", "user_facing_leaks", "withheld_values"]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class PlanLeak(ValueError):
    """A user-facing text of the plan gives away what the user must not say (withheld value, tool, parameter)."""


def _contains(haystack: str, needle: str) -> bool:
    return mentions(haystack, needle)


@lru_cache(maxsize=1 << 14)  # pure; a plan's texts meet the same forms at every step, round and in its episode
def said_value(text: str, form: str) -> bool:
    """``form`` in ``text`` as written, inflected, or by an alias, short form or transliteration («в Питере»).

    Digits-only forms are matched as written: «на 2 человек» says no withheld ``2`` of another slot.
    """
    return _contains(text, form) or (re.fullmatch(r"[\d\s.,-]+", form) is None and value_given(form, text)) \
        or _count_said(text, form)


def _count_said(text: str, form: str) -> bool:
    """A count said as ``form`` («5 билетов на поезд», «на 2 персоны», "3 train tickets") said in ``text`` with the
    same noun, the number in digits or in words («пять билетов», "three tickets")."""
    m = re.search(r"(?<![\w.,:+-])(\d+)\s+([^\W\d_]+)", form)
    if m is None or re.search(r"\d", form[:m.start()] + form[m.end():]) or float(m[1]) not in numbers_in(text):
        return False
    nouns = [w for w in re.findall(r"[^\W\d_]+", form[m.start(2):].lower()) if len(w) >= 3][:2]  # "train tickets"
    want = {x for noun in nouns for x in (noun, noun.rstrip("s"), *lemmas(noun))}
    return any(w in want or w.rstrip("s") in want or bool(set(lemmas(w)) & want)
               for w in re.findall(r"[^\W\d_]+", text.lower()))


def withheld_values(steps: list[PlanStep], step_i: int) -> dict[str, list[str]]:
    """withheld argument → every surface of its value (canonical, said, enum literal) the user must not say now."""
    step = steps[step_i]
    out: dict[str, list[str]] = {}
    for w in step.withheld:
        forms: list[str] = []
        for later in steps[step_i:]:
            slot = later.slots.get(w)
            if slot is not None:
                forms += [_text(slot.value), slot.say]
            forms += [_text(c.arguments[w]) for c in later.calls() if w in c.arguments]
        out[w] = [f for f in dict.fromkeys(forms) if f and len(f.strip()) >= 2]
    return out


def user_facing_leaks(steps: list[PlanStep], tools: list[ToolSpec], lang: str, step_i: int,
                      persona: Persona | None = None) -> list[str]:
    """Every way step ``step_i``'s user-facing text gives away something the user must not say.

    Checked: withheld arguments (their values in any surface form, enum literal
    included), tool names and parameter names, in ``intent``, ``user_message`` and
    the facts. A step's text may say what a *later* step first needs only if it
    also passes it now.
    """
    step = steps[step_i]
    texts = {"intent": step.intent, "user_message": step.user_message}
    for k, slot in step.slots.items():
        if k not in step.withheld:
            texts[f"slots.{k}.say"] = slot.say
    problems: list[str] = []
    if persona is not None:  # the persona is in the user's prompt too: it must not hold a withheld value
        for w, forms in withheld_values(steps, step_i).items():
            hit = next((f for f in forms if said_value(f"{persona.description} {persona.style}", f)), None)
            if hit is not None:
                problems.append(f"steps[{step_i}]: the persona ({persona.name}) already says the withheld {w!r} "
                                f"({hit!r}); withhold another value")
    for w, forms in withheld_values(steps, step_i).items():
        for field, text in texts.items():
            hit = next((f for f in forms if said_value(text, f)), None)
            if hit is not None:
                problems.append(f"steps[{step_i}].{field} gives away the withheld {w!r} ({hit!r})")
    names = {t.name for t in tools}
    params = {p for t in tools for p in (t.tool.function.parameters.get("properties") or {})}
    for field, text in texts.items():
        for n in sorted(names):
            if _contains(text, n):
                problems.append(f"steps[{step_i}].{field} names the tool {n!r}")
        for p in sorted(params):  # identifiers (snake_case, camelCase): a plain word like "city" is no leak
            if ("_" in p or re.search(r"[a-z][A-Z]", p)) and _contains(text, p):
                problems.append(f"steps[{step_i}].{field} names the parameter {p!r}")
    now = {_text(v) for slot in step.slots.values() for v in (slot.value, slot.say)}
    now |= {_text(v) for c in step.calls() for v in c.arguments.values()}
    for later_i in range(step_i + 1, len(steps)):
        for slot in steps[later_i].slots.values():
            if _text(slot.value) in now:
                continue
            for value in dict.fromkeys((_text(slot.value), slot.say)):
                if len(value.strip()) < 3:
                    continue
                for field, text in texts.items():
                    if _contains(text, value):
                        problems.append(f"steps[{step_i}].{field} already says {value!r}, which step {later_i} "
                                        "first needs (the user gives it then)")
    return list(dict.fromkeys(problems))


