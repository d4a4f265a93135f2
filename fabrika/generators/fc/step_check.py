"""Checking one assistant answer against the reference round: rules, then the FC matcher.

Rules come first because they produce the message a real tool runtime would
send back (unknown tool, missing required argument, wrong type or enum); the
matcher (:func:`fabrika.rewards.fc.calls_match`, the same one the reward uses)
then decides whether a rule-clean answer is the reference one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fabrika.generators.fc.common import argument_problems, language_ok
from fabrika.llm.types import Choice
from fabrika.rewards.fc import calls_match
from fabrika.schemas.fc import ExpectedCall, Plan
from fabrika.schemas.tools import Tool, ToolCall
from fabrika.textutil.answers import is_failure
from fabrika.textutil.morph import lemmas
from fabrika.textutil.reasoning import split_reasoning
from fabrika.textutil.script import has_cyrillic
from fabrika.textutil.segment import words
from fabrika.textutil.tool_calls import read_calls


@dataclass
class StepVerdict:
    correct: bool
    reasons: list[str] = field(default_factory=list)
    call_errors: dict[str, str] = field(default_factory=dict)  # call id → validator message
    pairing: list[ExpectedCall | None] = field(default_factory=list)  # expected call matched by each call


def parse_assistant_choice(choice: Choice) -> tuple[str | None, list[ToolCall], list[str]]:
    """(text, calls, problems) from a model answer: OpenAI ``tool_calls`` or calls written into the text in any
    format :func:`fabrika.textutil.tool_calls.read_calls` knows (Hermes, Llama 3, Mistral, harmony, bare JSON).

    Reasoning (``<think>`` blocks, harmony analysis) is removed from the text first; it is
    never part of a target's content.
    """
    problems: list[str] = []
    calls: list[ToolCall] = []
    raw_calls: list[Any] = list(choice.tool_calls)
    content = choice.content
    if content:
        read = read_calls(content) if not raw_calls else None  # harmony calls sit where split_reasoning sees none
        if read is not None and not is_failure(read) and read.calls:
            raw_calls, content = list(read.calls), read.text
        else:
            if is_failure(read):
                problems.append(str(read))
            split = split_reasoning(content)
            if not split.complete:
                problems.append("unclosed_reasoning: the answer was cut off inside a reasoning block")
            content = split.answer
    for raw in raw_calls:
        try:
            calls.append(ToolCall.model_validate(raw))
        except ValidationError as exc:
            name = raw.get("name") or (raw.get("function") or {}).get("name") if isinstance(raw, dict) else None
            problems.append(f"malformed_call: {exc.errors()[0]['msg']}")
            if isinstance(name, str) and name:
                calls.append(ToolCall(name=name, arguments={}))
    text = content.strip() if isinstance(content, str) and content.strip() else None
    return text, calls, problems


def _pair(calls: list[ToolCall], expected: list[ExpectedCall], tools: list[Tool]) -> list[ExpectedCall | None]:
    """For each call, the expected call it matches (so the tool agent gets that call's planned result)."""
    unused = list(expected)
    out: list[ExpectedCall | None] = []
    for call in calls:
        # a call matches only an expected call of its name (``calls_match`` of one call each): others are not tried
        hit = next((e for e in unused if e.name == call.name
                    and calls_match([call.model_dump()], [e.model_dump(exclude={"result"})], tools)), None)
        if hit is not None:
            unused.remove(hit)
        out.append(hit)
    return out


_STOP = frozenset("и в во на с со по для о об к от из за у the a an of to for and in on".split())


def _lemmas(text: str, lang: str) -> set[str]:
    out: set[str] = set()
    for w in words(text.lower()):
        if w in _STOP or len(w) < 3:
            continue
        out |= set(lemmas(w)) if lang == "ru" and has_cyrillic(w) else {w.rstrip("s")}
    return out


def asks_for(text: str, withheld: list[str], plan: Plan, lang: str) -> bool:
    """Does a clarification ``text`` ask about a withheld argument (a word of its description or name)?"""
    if not withheld or "?" not in text:
        return False
    said = _lemmas(text, lang)
    for w in withheld:
        hints = " ".join(str((t.tool.function.parameters.get("properties") or {}).get(w, {}).get("description", ""))
                         for t in plan.tools)
        if said & (_lemmas(hints, lang) | _lemmas(w.replace("_", " "), lang)):
            return True
    return False


def check_step(text: str | None, calls: list[ToolCall], parse_problems: list[str],
               expected: list[ExpectedCall] | None, tools: dict[str, Tool], lang: str,
               question: bool = False) -> StepVerdict:
    """Is this answer the reference round (``expected``; ``None`` = a text answer)?

    ``question``: the text answer must ask (a clarification target).
    """
    reasons = list(parse_problems)
    call_errors: dict[str, str] = {}
    for call in calls:
        tool = tools.get(call.name)
        if tool is None:
            call_errors[call.id or ""] = f"unknown tool {call.name!r}; available: {sorted(tools)}"
            continue
        errs = argument_problems(tool, call.arguments)
        if errs:
            call_errors[call.id or ""] = f"invalid arguments for {call.name}: {'; '.join(errs)}"
    reasons += list(call_errors.values())
    if expected is None:
        if calls:
            reasons.append("expected a text answer, got tool calls")
        elif not text:
            reasons.append("empty answer")
        elif not language_ok(text, lang):
            reasons.append(f"answer not in {lang!r}")
        elif question and "?" not in text:
            reasons.append("expected a clarifying question, got a statement")
        return StepVerdict(correct=not reasons, reasons=reasons, call_errors=call_errors)
    if not calls:
        reasons.append("expected tool calls, got text")
    elif len(calls) != len(expected):
        reasons.append(f"expected {len(expected)} call(s), got {len(calls)}")
    visible = list(tools.values())
    if not reasons and not calls_match([c.model_dump() for c in calls],
                                       [e.model_dump(exclude={"result"}) for e in expected], visible):
        reasons.append("calls differ from the reference")
    return StepVerdict(correct=not reasons, reasons=reasons, call_errors=call_errors,
                       pairing=_pair(calls, expected, visible) if not reasons else [None] * len(calls))


__all__ = ["StepVerdict", "asks_for", "check_step", "parse_assistant_choice"]
