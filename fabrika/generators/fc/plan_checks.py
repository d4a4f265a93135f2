"""Rule checks of an LLM-written plan, run before the LLM judge sees it.

The rules are what can be checked without a model: every call names a tool in
the group, its arguments satisfy the schema (required present, types, enums),
the step shapes fit the sample type, withheld facts are not in the user's
words, and the texts are in the plan's language. The problems go back to the
planner as review issues, exactly like the judge's.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from fabrika.generators.fc.common import check_calls, language_ok
from fabrika.schemas.fc import PlanStep, SampleType, ToolSpec


def parse_steps(data: Any) -> tuple[list[PlanStep] | None, list[str]]:
    """Steps from the planner's JSON (``{"steps": [...]}``) or the problems that prevent it."""
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list) or not data["steps"]:
        return None, ["plan must be an object with a non-empty 'steps' list"]
    steps: list[PlanStep] = []
    for i, raw in enumerate(data["steps"]):
        try:
            steps.append(PlanStep.model_validate(raw))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            return None, [f"steps[{i}].{loc}: {err['msg']}"]
    return steps, []


def _shape_problems(steps: list[PlanStep], sample_type: SampleType) -> list[str]:
    kinds = [s.kind for s in steps]
    calls_steps = [s for s in steps if s.kind == "tool_call"]
    if sample_type in ("single", "parallel", "multi_step"):
        if kinds != ["tool_call"]:
            return [f"{sample_type} plans have exactly one 'tool_call' step, got kinds {kinds}"]
        rounds = steps[0].rounds
        if sample_type == "single" and (len(rounds) != 1 or len(rounds[0]) != 1):
            return ["single plans have one round with one call"]
        if sample_type == "parallel" and (len(rounds) != 1 or len(rounds[0]) < 2):
            return ["parallel plans have one round with at least two calls"]
        if sample_type == "multi_step" and len(rounds) < 2:
            return ["multi_step plans have at least two rounds of calls"]
    elif sample_type == "multi_turn":
        if len(steps) < 2 or not calls_steps:
            return ["multi_turn plans have at least two steps and at least one call"]
    elif sample_type == "clarification":
        if len(steps) < 2 or kinds[0] != "clarification" or "tool_call" not in kinds[1:]:
            return ["clarification plans start with a 'clarification' step, followed by a 'tool_call' step"]
        if not steps[0].withheld:
            return ["the clarification step must name the withheld argument(s) in 'withheld'"]
        later = [c for s in steps[1:] for r in s.rounds for c in r]
        missing = [w for w in steps[0].withheld if not any(w in c.arguments for c in later)]
        if missing:
            return [f"withheld arguments {missing} must be passed in a later call"]
    elif sample_type in ("text", "irrelevance"):
        if any(k != sample_type for k in kinds):
            return [f"{sample_type} plans have only {sample_type!r} steps, got kinds {kinds}"]
    return []


def check_plan(steps: list[PlanStep], tools: list[ToolSpec], sample_type: SampleType, lang: str) -> list[str]:
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
        for call in (c for r in step.rounds for c in r):
            props = (by_name[call.name].function.parameters.get("properties") or {}) if call.name in by_name else {}
            for arg, value in call.arguments.items():
                if isinstance(props.get(arg), dict) and props[arg].get("enum") and str(value) not in step.enum_phrases:
                    problems.append(f"steps[{i}]: enum value {value!r} of {call.name}.{arg} needs an entry in "
                                    "enum_phrases (how the user says it)")
        for w in step.withheld:
            phrase = step.slots.get(w)
            if phrase and phrase.lower() in step.user_message.lower():
                problems.append(f"steps[{i}]: withheld {w!r} appears in user_message ({phrase!r})")
    return problems
