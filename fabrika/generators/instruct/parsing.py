"""Parsers for the IF pipeline's LLM answers (all untrusted, DESIGN contract 3).

Each parser returns the parsed value or a reason string (``ParseFailure``) that the
stage records as a rejection. Nothing here executes LLM-written code: ``ast.parse``
only checks syntax, the sandbox runs it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fabrika.generators.parsing import ParseFailure, answer_json_text, extract_json, is_failure
from fabrika.schemas.records import TestCase
from fabrika.textutil.reasoning import answer_text

__all__ = [
    "ParseFailure",
    "ParsedVerifier",
    "check_russian",
    "is_failure",
    "parse_constraint_list",
    "parse_instruction",
    "parse_score",
    "parse_verifier_answer",
]

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


_CYR = re.compile(r"[А-Яа-яЁё]")
_LAT = re.compile(r"[A-Za-z]")


@lru_cache(maxsize=1)
def _detector() -> Any:
    from lingua import Language, LanguageDetectorBuilder

    langs = [Language.RUSSIAN, Language.ENGLISH, Language.UKRAINIAN, Language.BELARUSIAN,
             Language.BULGARIAN, Language.GERMAN, Language.FRENCH, Language.SPANISH]
    return LanguageDetectorBuilder.from_languages(*langs).build()


def check_russian(text: str, *, min_cyrillic_share: float = 0.6) -> str | None:
    """``None`` if ``text`` reads as Russian, else a reason (``not_russian: …``, ``garbled: …``).

    Latin inside quotes/code (``JSON``, ``P.S.``) is fine; the share counts letters only.
    """
    if "\ufffd" in text:
        return "garbled: contains U+FFFD replacement characters"
    letters = len(_CYR.findall(text)) + len(_LAT.findall(text))
    if letters < 3:
        return "garbled: too few letters"
    if sum(ch.isalpha() or ch.isspace() for ch in text) / len(text) < 0.5:
        return "garbled: mostly symbols"
    share = len(_CYR.findall(text)) / letters
    if share < min_cyrillic_share:
        return f"not_russian: cyrillic share {share:.2f} < {min_cyrillic_share}"
    lang = _detector().detect_language_of(text)
    if lang is not None and lang.name != "RUSSIAN":
        return f"not_russian: detected {lang.name.lower()}"
    return None
