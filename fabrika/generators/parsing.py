"""Parsing untrusted LLM answers into JSON (DESIGN contract 3) — the one parser every stage uses.

A real model's answer is rarely bare JSON: reasoning models think first
(``<think>…</think>``, harmony ``analysis`` channel, a server's
``reasoning_content``), instruct models wrap JSON in prose and fences, and any
model can be cut off mid-object. :func:`extract_json` therefore

1. removes the reasoning with :func:`fabrika.textutil.reasoning.split_reasoning`
   (a block opened and never closed is a failure: the model never answered, and
   JSON *inside* the reasoning is a draft, not the answer);
2. tries the whole answer, then each complete fenced block, then each
   *top-level* bracketed span of the answer, left to right;
3. returns the first complete top-level value of the wanted type, or a
   :class:`ParseFailure` whose text becomes the rejection reason.

It never descends into a span that failed to parse, so a truncated
``{"tool": {"a": 1}, "b": `` is a failure, not the fragment ``{"a": 1}``. The
one repair it makes is deleting trailing commas (``{"a": 1,}``), which changes
no value.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterator

from typing_extensions import TypeIs

from fabrika.textutil.reasoning import split_reasoning

__all__ = ["ParseFailure", "answer_json_text", "extract_json", "is_failure"]

_FENCE = re.compile(r"```(?:json|JSON|json5)?[ \t]*\n?(.*?)```", re.DOTALL)
_CLOSE = {"{": "}", "[": "]"}


class ParseFailure(str):
    """A reason why an answer could not be parsed (a ``str`` so it can go straight into ``reason``)."""


def is_failure(value: object) -> TypeIs[ParseFailure]:
    """True for a :class:`ParseFailure`; narrows ``X | ParseFailure`` to ``X`` in the other branch."""
    return isinstance(value, ParseFailure)


def answer_json_text(text: str | None, reasoning_content: str | None = None) -> str | ParseFailure:
    """The visible answer of a completion, or why there is none (empty, unclosed reasoning)."""
    if text is None or not text.strip():
        return ParseFailure("empty_answer")
    split = split_reasoning(text, reasoning_content)
    if not split.complete:
        return ParseFailure("unclosed_reasoning: the answer was cut off inside a reasoning block")
    if not split.answer:
        return ParseFailure("empty_answer: only reasoning, no answer after it")
    return split.answer


def _span_end(text: str, start: int) -> int | None:
    """Index just past the bracket that closes ``text[start]``; ``None`` when the text ends first.

    String-aware (brackets inside JSON strings do not count). A mismatched closer
    ends the span there: it is malformed, and the caller skips it whole.
    """
    stack = [_CLOSE[text[start]]]
    in_string = escape = False
    for i in range(start + 1, len(text)):
        ch = text[i]
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _CLOSE:
            stack.append(_CLOSE[ch])
        elif ch in "}]":
            if ch != stack.pop():
                return i + 1
            if not stack:
                return i + 1
    return None


def _top_level_spans(text: str) -> Iterator[tuple[int, int | None]]:
    """(start, end) of every top-level ``{…}``/``[…]`` span; end ``None`` = unclosed (last one)."""
    i = 0
    while i < len(text):
        if text[i] in _CLOSE:
            end = _span_end(text, i)
            yield i, end
            if end is None:
                return
            i = end
        else:
            i += 1


def _drop_trailing_commas(text: str) -> str:
    """``{"a": 1,}`` → ``{"a": 1}``; commas inside strings are kept."""
    out: list[str] = []
    in_string = escape = False
    pending: list[str] = []  # a comma and the whitespace after it, held until we see what follows
    for ch in text:
        if in_string:
            out.append(ch)
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
            continue
        if pending:
            if ch.isspace():
                pending.append(ch)
                continue
            if ch in "}]":
                out.extend(pending[1:])
            else:
                out.extend(pending)
            pending = []
        if ch == ",":
            pending = [ch]
            continue
        out.append(ch)
        if ch == '"':
            in_string = True
    out.extend(pending)
    return "".join(out)


def _loads(candidate: str, strict: bool) -> tuple[Any, str | None]:
    """(value, None) or (None, the decoder's message)."""
    try:
        return json.loads(candidate, strict=strict), None
    except json.JSONDecodeError as exc:
        repaired = _drop_trailing_commas(candidate)
        if repaired != candidate:
            try:
                return json.loads(repaired, strict=strict), None
            except json.JSONDecodeError:
                pass
        return None, f"{exc.msg} at char {exc.pos}"


def _type_name(expect: type | tuple[type, ...]) -> str:
    types = expect if isinstance(expect, tuple) else (expect,)
    names = {dict: "an object", list: "a list"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def extract_json(text: str | None, *, expect: type | tuple[type, ...] = (dict, list),
                 reasoning_content: str | None = None, strict: bool = True,
                 accept: Callable[[Any], bool] | None = None) -> Any:
    """The complete top-level JSON value of type ``expect`` in the answer, else a :class:`ParseFailure`.

    Args:
        text: the completion text as the server returned it.
        expect: the type(s) the caller wants; a top-level value of another type is
            skipped whole (never searched inside).
        reasoning_content: the server's separate reasoning field, if any.
        strict: ``False`` accepts raw control characters (newlines) inside strings.
        accept: an extra predicate a value must satisfy (the first top-level value
            that does is returned).

    Failure reasons: ``empty_answer``, ``unclosed_reasoning: …``, ``invalid_json:
    truncated …``, ``invalid_json: malformed …``, ``invalid_json: expected … got …``,
    ``invalid_json: no JSON value found``.
    """
    answer = answer_json_text(text, reasoning_content)
    if is_failure(answer):
        return answer

    def fits(value: Any) -> bool:
        return isinstance(value, expect) and (accept is None or accept(value))

    wrong_type: str | None = None
    value, _ = _loads(answer, strict)
    if value is not None or answer.strip() == "null":
        if fits(value):
            return value
        wrong_type = type(value).__name__
    for fence in _FENCE.finditer(answer):
        value, _ = _loads(fence.group(1).strip(), strict)
        if fits(value):
            return value
    malformed: str | None = None
    for start, end in _top_level_spans(answer):
        if end is None:
            return ParseFailure(f"invalid_json: truncated at char {len(answer)} (unclosed {answer[start]!r} "
                                f"opened at char {start})")
        value, err = _loads(answer[start:end], strict)
        if err is not None:
            malformed = malformed or f"invalid_json: malformed value at char {start}: {err}"
        elif fits(value):
            return value
        else:
            wrong_type = wrong_type or type(value).__name__
    if malformed:
        return ParseFailure(malformed)
    if wrong_type:
        return ParseFailure(f"invalid_json: expected {_type_name(expect)}, got {wrong_type}")
    return ParseFailure("invalid_json: no JSON value found")
