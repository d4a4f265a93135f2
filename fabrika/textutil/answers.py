"""Parsing untrusted LLM answers (DESIGN contract 3) — the one module every stage, scorer, reward and eval uses.

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

On top of it sit the parsers of the shapes fabrika asks for: a verifier answer
(JSON with Python code, or code in a separate fenced block; only ``ast.parse``
checks it, the sandbox runs it), a list of constraints, a bare instruction and a
score. Each returns the value or a :class:`ParseFailure` that the caller records
as a rejection. It sits at the bottom layer so scorers and rewards need not
import generators.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from typing_extensions import TypeIs

from fabrika.schemas.records import TestCase
from fabrika.textutil.reasoning import answer_text, split_reasoning

__all__ = ["ParseFailure", "ParsedVerifier", "answer_int", "answer_json_text", "extract_json", "is_failure", "parse_constraint_list",
           "parse_instruction", "parse_score", "parse_verifier_answer", "span_end"]

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


def _json_chars(text: str, start: int = 0) -> Iterator[tuple[int, str, bool]]:
    """``(index, char, quoted)`` from ``start``: ``quoted`` for the characters of a JSON string after its
    opening quote (escapes and the closing quote included), so scanners skip string contents alike."""
    in_string = escape = False
    for i in range(start, len(text)):
        ch = text[i]
        quoted = in_string
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        yield i, ch, quoted


def span_end(text: str, start: int) -> int | None:
    """Index just past the bracket that closes ``text[start]``; ``None`` when the text ends first.

    String-aware (brackets inside JSON strings do not count). A mismatched closer
    ends the span there: it is malformed, and the caller skips it whole.
    """
    stack = [_CLOSE[text[start]]]
    for i, ch, quoted in _json_chars(text, start + 1):
        if quoted:
            continue
        if ch in _CLOSE:
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
            end = span_end(text, i)
            yield i, end
            if end is None:
                return
            i = end
        else:
            i += 1


def _drop_trailing_commas(text: str) -> str:
    """``{"a": 1,}`` → ``{"a": 1}``; commas inside strings are kept."""
    out: list[str] = []
    pending: list[str] = []  # a comma and the whitespace after it, held until we see what follows
    for _i, ch, quoted in _json_chars(text):
        if quoted:
            out.append(ch)
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
    names: dict[type, str] = {dict: "an object", list: "a list"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def answer_int(value: Any) -> int | None:
    """An integer a model wrote as a JSON number or a digit string (``3``, ``"3"``); None for anything else,
    booleans included (``true`` is not the index 1)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


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


# ---------------------------------------------------------------------------
# the shapes fabrika asks for

_PY_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
_FUNC_KEYS = ("func", "function", "code", "evaluate", "verifier")
_CASES_KEYS = ("cases", "test_cases", "tests", "examples")
_INPUT_KEYS = ("input", "response", "text")
_LABEL_KEYS = ("output", "label", "expected", "result")
_TRUE = {"true", "yes", "1", "да", "истина"}
_FALSE = {"false", "no", "0", "нет", "ложь"}


@dataclass(frozen=True)
class ParsedVerifier:
    """One verifier answer: ``evaluate`` source code and its labelled test cases."""

    code: str
    test_cases: tuple[TestCase, ...]


def _unescape_code(code: str) -> str:
    """Undo doubly escaped newlines (``"def f():\\\\n    return 1"``) when the code has none of its own."""
    code = code.strip("\n")
    if "\n" not in code and "\\n" in code:
        code = code.replace("\\r\\n", "\n").replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"')
    return code


def _as_label(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    return None


def _first(obj: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if k in obj:
            return obj[k]
    return None


def _verifier_object(text: str | None) -> dict[str, Any] | ParseFailure:
    """The first top-level JSON object of the answer that looks like a verifier answer.

    The shared :func:`extract_json` strips reasoning and never returns a fragment of a
    truncated object; ``strict=False`` accepts raw newlines inside strings (common in
    model-written code).
    """
    value = extract_json(text, expect=dict, strict=False,
                         accept=lambda v: any(k in v for k in (*_FUNC_KEYS, *_CASES_KEYS)))
    return extract_json(text, expect=dict, strict=False) if is_failure(value) else value


def parse_verifier_answer(text: str | None) -> ParsedVerifier | ParseFailure:
    """Parse ``{"func": "def evaluate(response): ...", "cases": [{"input": ..., "output": true}]}``.

    Copes with fenced blocks, surrounding prose, escaped newlines, and a function given
    in a separate ```python block. Reasons: ``invalid_json: …``, ``missing_function``,
    ``no_evaluate_function``, ``syntax_error: …``, ``no_test_cases``, ``bad_test_case: …``.
    """
    value = _verifier_object(text)
    if is_failure(value):
        return value
    code = _first(value, _FUNC_KEYS)
    if not isinstance(code, str) or not code.strip():
        fenced = [m.group(1) for m in _PY_FENCE.finditer(answer_text(text)) if "def evaluate" in m.group(1)]
        if not fenced:
            return ParseFailure("missing_function: answer has no 'func' string")
        code = fenced[0]
    code = _unescape_code(code)
    if not re.search(r"^\s*def\s+evaluate\s*\(", code, re.MULTILINE):
        return ParseFailure("no_evaluate_function: code must define evaluate(response)")
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return ParseFailure(f"syntax_error: line {exc.lineno}: {exc.msg}")
    except ValueError as exc:  # null bytes
        return ParseFailure(f"syntax_error: {exc}")
    cases_raw = _first(value, _CASES_KEYS)
    if not isinstance(cases_raw, list) or not cases_raw:
        return ParseFailure("no_test_cases: answer has no non-empty 'cases' list")
    cases: list[TestCase] = []
    for i, case in enumerate(cases_raw):
        if not isinstance(case, dict):
            return ParseFailure(f"bad_test_case: case {i} is {type(case).__name__}, not an object")
        response = _first(case, _INPUT_KEYS)
        label = _as_label(_first(case, _LABEL_KEYS))
        if not isinstance(response, str) or label is None:
            return ParseFailure(f"bad_test_case: case {i} needs a string 'input' and a boolean 'output'")
        cases.append(TestCase(response=response, label=label))
    return ParsedVerifier(code=code, test_cases=tuple(cases))


_LIST_PREFIX = re.compile(r"^\s*(?:[-*•]+|\d+[.)]|\(\d+\))\s*")


def parse_constraint_list(text: str | None) -> list[str] | ParseFailure:
    """Candidate constraints from an expansion answer: a JSON list of strings, or one per line.

    Numbering, bullets and surrounding quotes are stripped; empty lines dropped.
    """
    text = answer_json_text(text)  # reasoning removed first; unclosed reasoning is a failure
    if is_failure(text):
        return text
    value = extract_json(text, expect=list)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        items = [_LIST_PREFIX.sub("", line).strip().strip('"«»').strip() for line in text.splitlines()]
    items = [i for i in items if i and not i.startswith("```")]
    if not items:
        return ParseFailure("no_constraints: answer has no list items")
    return items


def parse_instruction(text: str | None) -> str | ParseFailure:
    """A back-translated instruction: the answer without labels like ``Инструкция:`` or quotes."""
    text = answer_json_text(text)
    if is_failure(text):
        return text
    out = text.strip().strip("`").strip()
    out = re.sub(r"^(?:инструкция|ограничение|instruction)\s*[:：]\s*", "", out, flags=re.IGNORECASE)
    out = out.strip().strip('"«»').strip()
    return out or ParseFailure("empty_answer")


def parse_score(text: str | None, low: float = 0.0, high: float = 10.0) -> float | ParseFailure:
    """The first number of the answer (reasoning removed) within [low, high] (``"Оценка: 7/10"`` → 7.0)."""
    text = answer_json_text(text)
    if is_failure(text):
        return text
    m = re.search(r"-?\d+(?:[.,]\d+)?", text)
    if not m:
        return ParseFailure("no_score: answer has no number")
    value = float(m.group(0).replace(",", "."))
    if not low <= value <= high:
        return ParseFailure(f"score_out_of_range: {value} not in [{low}, {high}]")
    return value
