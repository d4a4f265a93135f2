"""Rule checks of an LLM-written plan, run before the LLM judge sees it.

The rules are what can be checked without a model: every call names a tool in
the group, its arguments satisfy the schema (required present, types, enums),
the step shapes fit the sample type, every argument value comes from a slot
(canonical value + how the user says it) or an earlier planned result, no
user-facing text gives away a withheld value, a tool or a parameter name (or a
value a later step first needs), and the texts are in the plan's language. The problems go back to the
planner as review issues, exactly like the judge's.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from fabrika.agents.leaks import user_facing_leaks
from fabrika.generators.fc.common import check_calls, language_ok
from fabrika.rewards.fc import values_equal
from fabrika.schemas.fc import Persona, PlanStep, SampleType, ToolSpec
from fabrika.textutil.morph import parses


def parse_steps(data: Any) -> tuple[list[PlanStep] | None, list[str]]:
    """Steps from the planner's JSON (``{"steps": [...]}``) or the problems that prevent it."""
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list) or not data["steps"]:
        return None, ["plan must be an object with a non-empty 'steps' list"]
    steps: list[PlanStep] = []
    problems: list[str] = []
    for i, raw in enumerate(data["steps"]):  # every slip of every step, so one revision can fix them all
        try:
            steps.append(PlanStep.model_validate(raw))
        except ValidationError as exc:
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"])
                problems.append(f"steps[{i}]{'.' + loc if loc else ''}: {err['msg']}")
    return (None, problems) if problems else (steps, [])


def _is_failure_result(result: Any) -> bool:
    """A planned error (``{"error": …}``) or empty result (``[]``, ``{}``, ``{"items": []}``…)."""
    if isinstance(result, dict):
        return "error" in result or not result or all(v in ([], {}, None, 0) for v in result.values())
    return result in ([], None)


def _clarification_problems(steps: list[PlanStep]) -> list[str]:
    """Each clarification step withholds something that a later call passes."""
    for i, step in enumerate(steps):
        if step.kind != "clarification":
            continue
        if not step.withheld:
            return [f"steps[{i}]: a clarification step must name the withheld argument(s) in 'withheld'"]
        if i + 1 >= len(steps) or steps[i + 1].kind != "tool_call":
            return [f"steps[{i}]: a clarification step is followed by the 'tool_call' step that uses the answer"]
        later = [c for s in steps[i + 1:] for c in s.calls()]
        missing = [w for w in step.withheld if not any(w in c.arguments for c in later)]
        if missing:
            return [f"steps[{i}]: withheld arguments {missing} must be passed in a later call"]
    return []


def _shape_problems(steps: list[PlanStep], sample_type: SampleType) -> list[str]:
    kinds = [s.kind for s in steps]
    calls_steps = [s for s in steps if s.kind == "tool_call"]
    if sample_type in ("single", "parallel", "multi_step", "error_recovery"):
        if kinds != ["tool_call"]:
            return [f"{sample_type} plans have exactly one 'tool_call' step, got kinds {kinds}"]
        rounds = steps[0].rounds
        if sample_type == "single" and (len(rounds) != 1 or len(rounds[0]) != 1):
            return ["single plans have one round with one call"]
        if sample_type == "parallel" and (len(rounds) != 1 or len(rounds[0]) < 2):
            return ["parallel plans have one round with at least two calls"]
        if sample_type == "multi_step" and len(rounds) < 2:
            return ["multi_step plans have at least two rounds of calls"]
        if sample_type == "error_recovery" and (len(rounds) < 2 or not any(_is_failure_result(c.result)
                                                                          for c in rounds[0])):
            return ["error_recovery plans have a first round whose result is an error or empty, then a round "
                    "that recovers"]
    elif sample_type == "multi_turn":
        if len(steps) < 2 or not calls_steps:
            return ["multi_turn plans have at least two steps and at least one call"]
        return _clarification_problems(steps)
    elif sample_type == "clarification":
        if len(steps) < 2 or kinds[0] != "clarification" or "tool_call" not in kinds[1:]:
            return ["clarification plans start with a 'clarification' step, followed by a 'tool_call' step"]
        return _clarification_problems(steps)
    elif sample_type in ("text", "irrelevance"):
        if any(k != sample_type for k in kinds):
            return [f"{sample_type} plans have only {sample_type!r} steps, got kinds {kinds}"]
    if "clarification" in kinds:
        return [f"{sample_type} plans have no 'clarification' step"]
    return []


def _in_results(value: Any, results: list[Any]) -> bool:
    """Does ``value`` occur in an earlier planned tool result (multi-step: later arguments come from results)?"""
    needle = json.dumps(value, ensure_ascii=False)
    return any(needle in json.dumps(r, ensure_ascii=False) or (isinstance(value, str) and value in
                                                               json.dumps(r, ensure_ascii=False)) for r in results)


def _slot_problems(steps: list[PlanStep]) -> list[str]:
    """Every call argument comes from a slot (value = the call's value) or from an earlier planned result."""
    problems: list[str] = []
    known: dict[str, list[Any]] = {}
    results: list[Any] = []
    for i, step in enumerate(steps):
        for k, slot in step.slots.items():
            known.setdefault(k, []).append(slot.value)
        for rnd in step.rounds:
            for call in rnd:
                for arg, value in call.arguments.items():
                    arg_slot = step.slots.get(arg)
                    if arg_slot is not None and not values_equal(arg_slot.value, value) and not _in_results(value, results):
                        problems.append(f"steps[{i}]: slots.{arg}.value {arg_slot.value!r} differs from the call's "
                                        f"{call.name}.{arg} = {value!r}; the slot holds the canonical value the call "
                                        "carries")
                    elif arg_slot is None and not any(values_equal(v, value) for v in known.get(arg, [])) \
                            and not _in_results(value, results):
                        problems.append(f"steps[{i}]: argument {call.name}.{arg} = {value!r} has no slot (the value "
                                        "and how the user says it) and comes from no earlier result")
            results += [c.result for c in rnd]
    return problems


_PREPOSITIONS = frozenset("в во на из для у к ко по с со о об от до при за".split())


def canonical_problem(value: Any, schema: dict[str, Any]) -> str | None:
    """Why a Russian free-text argument is not in its canonical form, or ``None`` (only unambiguous cases).

    A leading preposition («в Казани») always is; a city or a first name with no
    nominative reading («Казани», «Анне») is. Surnames and street names are left
    alone: «улица Баумана» is canonical in the genitive.
    """
    if not isinstance(value, str) or schema.get("enum") or schema.get("format") or re.search(r"\d", value):
        return None
    words = value.split()
    if not words or not re.search(r"[А-Яа-яЁё]", value):
        return None
    if len(words) > 1 and words[0].lower() in _PREPOSITIONS:
        return "starts with a preposition"
    for word in words:
        if not word[:1].isupper() or "-" in word:
            continue
        readings = parses(word)
        named = any({"Geox", "Name"} & set(p.tag.grammemes) for p in readings)
        surname = any("Surn" in p.tag.grammemes for p in readings)
        if named and not surname and not any(p.tag.case == "nomn" for p in readings):
            return f"{word!r} is not in the nominative"
    return None


def check_plan(steps: list[PlanStep], tools: list[ToolSpec], sample_type: SampleType, lang: str,
               persona: Persona | None = None) -> list[str]:
    """Every rule violation of ``steps`` (empty list = the plan may go to the judge)."""
    problems = _shape_problems(steps, sample_type)
    by_name = {t.name: t.tool for t in tools}
    for i, step in enumerate(steps):
        calls = [c.model_dump(exclude={"result"}) for r in step.rounds for c in r]
        problems += [f"steps[{i}]: {p}" for p in check_calls(calls, by_name)]
        for field in ("intent", "user_message", "final_answer"):
            text = getattr(step, field)
            if not text.strip():
                problems.append(f"steps[{i}].{field} is empty")
            elif not language_ok(text, lang):
                problems.append(f"steps[{i}].{field} is not in {lang!r}: {text[:60]!r}")
        if lang == "ru":
            for call in step.calls():
                props = (by_name[call.name].function.parameters.get("properties") or {}) if call.name in by_name else {}
                for arg, value in call.arguments.items():
                    schema = props.get(arg)
                    why = canonical_problem(value, schema if isinstance(schema, dict) else {})
                    if why:
                        problems.append(f"steps[{i}]: {call.name}.{arg} = {value!r} is not canonical ({why}); "
                                        "write the nominative form, and how the user says it in slots.say")
        for w in step.withheld:
            if w in step.slots:
                problems.append(f"steps[{i}]: withheld {w!r} must not be in this step's slots (the user gives it "
                                "in a later step)")
        problems += user_facing_leaks(steps, tools, lang, i, persona)
    problems += _slot_problems(steps)
    return problems
