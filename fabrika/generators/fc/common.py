"""Shared checks of the FC stages: language, tool validation, call validation.

Everything here judges untrusted LLM output and returns reasons (strings) instead
of raising, so each stage can turn them into recorded rejections.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from typing import Any, Iterable

import jsonschema
import orjson
from pydantic import ValidationError

from fabrika.llm.rejections import answer_problem
from fabrika.llm.types import ChatResponse
from fabrika.schemas.fc import N_TIERS, ToolSpec
from fabrika.schemas.ids import canonical_json, stable_id
from fabrika.schemas.tools import Tool, ToolCall

SNAKE_RE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
_CYR = re.compile(r"[А-Яа-яЁё]")
_LAT = re.compile(r"[A-Za-z]")
_IDENTIFIERS = re.compile(r"`[^`]*`|\S+@\S+|https?://\S+|\b(?=\w*\d)[\w.-]+\b")  # code in backticks too


def cyrillic_share(text: str) -> float:
    """Share of Cyrillic among the letters of ``text`` (0 when there are no letters)."""
    cyr = len(_CYR.findall(text))
    lat = len(_LAT.findall(text))
    return cyr / (cyr + lat) if cyr + lat else 0.0


@functools.lru_cache(maxsize=8192)  # pure; a plan's texts are checked in every round, a tool's in every run
def language_ok(text: str, lang: str, min_share: float = 0.6) -> bool:
    """Cheap script check, good enough to catch an English answer to a Russian prompt.

    Text with no letters at all (numbers, JSON punctuation) passes: it has no language.
    E-mail addresses, URLs, codes with digits (``A1024``) and code in backticks are
    identifiers, not language, and do not count.
    """
    text = _IDENTIFIERS.sub(" ", text)
    if not _CYR.search(text) and not _LAT.search(text):
        return True
    share = cyrillic_share(text)
    if lang == "ru":
        return share >= min_share
    if lang == "en":
        return share <= 1 - min_share
    return True




def response_error(resp: ChatResponse) -> str | None:
    """A rejection reason for a failed, empty or truncated response, else ``None`` (the standard wording)."""
    return answer_problem(resp)


def signature(tool: Tool) -> str:
    """Name + parameter signature hash: two tools with the same one are duplicates."""
    props = tool.function.parameters.get("properties", {}) or {}
    sig = {
        "name": tool.name,
        "params": sorted((k, json.dumps(v.get("type"), sort_keys=True) if isinstance(v, dict) else "?")
                         for k, v in props.items()),
        "required": sorted(tool.function.parameters.get("required", []) or []),
    }
    return hashlib.sha256(canonical_json(sig).encode()).hexdigest()[:16]


def _schema_texts(schema: Any) -> Iterable[str]:
    """Every description string inside a parameters schema."""
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "description" and isinstance(v, str):
                yield v
            else:
                yield from _schema_texts(v)
    elif isinstance(schema, list):
        for v in schema:
            yield from _schema_texts(v)


def parse_tool(raw: Any, *, topic_id: str, lang: str,
               name_re: re.Pattern[str] = SNAKE_RE, identifiers: Iterable[str] = ()) -> tuple[ToolSpec | None, str | None]:
    """Validate one LLM-written tool dict into a :class:`ToolSpec`, or give the rejection reason.

    ``name_re``: the names admitted; LLM-written tools are snake_case, imported ones keep their own names.
    ``identifiers``: names (parameters, enum values) that texts may quote; they are no language.
    """
    if not isinstance(raw, dict):
        return None, f"invalid_tool: expected an object, got {type(raw).__name__}"
    if "function" in raw and isinstance(raw["function"], dict):  # OpenAI shape with tiers beside it
        raw = {**raw["function"], "tiers": raw.get("tiers", raw["function"].get("tiers"))}
    name = raw.get("name")
    if not isinstance(name, str) or not name_re.match(name):
        return None, (f"invalid_name: {name!r} is not snake_case" if name_re is SNAKE_RE
                      else f"invalid_name: {name!r} does not match {name_re.pattern}")
    tiers = raw.get("tiers")
    if not isinstance(tiers, list) or len(tiers) != N_TIERS or not all(isinstance(t, str) and t.strip() for t in tiers):
        return None, f"invalid_tiers: {name} needs {N_TIERS} non-empty description strings"
    tiers = [t.strip() for t in tiers]
    if any(len(a) >= len(b) for a, b in zip(tiers, tiers[1:])):
        return None, f"tiers_not_increasing: {name} tier lengths {[len(t) for t in tiers]}"
    params = raw.get("parameters") or {"type": "object", "properties": {}}
    try:
        tool = Tool.model_validate({"function": {"name": name, "description": tiers[-1], "parameters": params}})
    except ValidationError as exc:
        return None, f"invalid_schema: {name}: {exc.errors()[0]['msg']}"
    texts = tiers + list(_schema_texts(params))
    ids = sorted((i for i in identifiers if i), key=len, reverse=True)
    quoted = re.compile("|".join(rf"(?<![\w-]){re.escape(i)}(?![\w-])" for i in ids)) if ids else None
    wrong = [t for t in texts if not language_ok(quoted.sub(" ", t) if quoted else t, lang)]
    if wrong:
        return None, f"wrong_language: {name} description not in {lang!r}: {wrong[0][:60]!r}"
    spec = ToolSpec(id=stable_id(topic_id, name, prefix="tool-"), topic_id=topic_id, lang=lang, tool=tool, tiers=tiers)
    return spec, None


_FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def argument_problems(tool: Tool, arguments: dict[str, Any]) -> list[str]:
    """Schema problems of ``arguments``, formats included (``date`` is ISO 8601, ``email`` has an @…).

    ``Tool.validate_arguments`` ignores ``format`` (JSON Schema makes it an
    annotation); a runtime would reject «14 марта» for a ``date``, so the FC
    stages check it.
    """
    schema_key = _json_key(tool.function.parameters)
    validator = _format_validator(tool.function.parameters, schema_key)
    # the same arguments meet the same schema again and again (a plan's calls in every check round, then the
    # assistant's right calls in its episode): the problems of a (schema, arguments) pair are remembered
    args_key = None if schema_key is None else _args_key(arguments)
    memo_key = None if schema_key is None or args_key is None else (schema_key, args_key)
    if memo_key is not None:
        got = _PROBLEMS.get(memo_key)
        if got is not None:
            return list(got)
    problems = _argument_problems(tool, arguments, validator)
    if memo_key is not None:
        if len(_PROBLEMS) >= 8192:
            _PROBLEMS.clear()
        _PROBLEMS[memo_key] = tuple(problems)
    return problems


def _argument_problems(tool: Tool, arguments: dict[str, Any], validator: jsonschema.Draft202012Validator) -> list[str]:
    if validator.is_valid(arguments):  # formats are checked on top of every other keyword: nothing else fails
        return []
    problems = tool.validate_arguments(arguments)
    if problems:
        return problems
    return [f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
            for err in sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))]


_FORMAT_VALIDATORS: dict[bytes, jsonschema.Draft202012Validator] = {}
#: (schema key, arguments key) → :func:`argument_problems` (keys from :func:`_json_key` and :func:`_args_key`)
_PROBLEMS: dict[tuple[bytes, bytes], tuple[str, ...]] = {}


def _json_key(value: Any) -> bytes | None:
    """``value``'s JSON in insertion order as a memo key, or ``None`` where it is not a safe one: orjson
    refuses it (a lone surrogate, a huge integer, a non-JSON type), or it holds ``null`` (NaN and infinities
    are ``null`` to orjson too)."""
    try:
        key = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return None
    return None if b"null" in key else key


def _args_key(value: Any) -> bytes | None:
    """Call arguments' JSON as a memo key, or ``None`` unless they are plain JSON data: exact ``dict`` (text
    keys), ``list``, ``str``, ``int``, finite ``float``, ``bool``, ``None`` — a tuple, a subclass or a date
    would write the same JSON as a value the schema judges differently."""
    if not _plain_json(value, 0):
        return None
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits, a lone surrogate
        return None


def _plain_json(v: Any, depth: int) -> bool:
    t = type(v)
    if t is str or v is None or t is bool or t is int:
        return True
    if t is float:
        return math.isfinite(v)
    if depth > 32:
        return False
    if t is dict:
        return all(type(k) is str and _plain_json(x, depth + 1) for k, x in v.items())
    if t is list:
        return all(_plain_json(x, depth + 1) for x in v)
    return False


def _format_validator(parameters: dict[str, Any], key: bytes | None) -> jsonschema.Draft202012Validator:
    """The format-checking validator of a parameters schema (``key``: :func:`_json_key` of it), built once per
    distinct schema (keyed on its JSON in insertion order, the order the validator walks keywords in);
    uncached where there is no key."""
    if key is None:
        return jsonschema.Draft202012Validator(parameters, format_checker=_FORMATS)
    validator = _FORMAT_VALIDATORS.get(key)
    if validator is None:
        if len(_FORMAT_VALIDATORS) >= 8192:
            _FORMAT_VALIDATORS.clear()
        validator = _FORMAT_VALIDATORS[key] = jsonschema.Draft202012Validator(orjson.loads(key),
                                                                              format_checker=_FORMATS)
    return validator


def check_calls(calls: Iterable[Any], tools: dict[str, Tool]) -> list[str]:
    """Rule checks of calls against the visible tools: known name, object args, schema (required, types, enums)."""
    problems: list[str] = []
    for raw in calls:
        try:
            call = raw if isinstance(raw, ToolCall) else ToolCall.model_validate(raw)
        except ValidationError as exc:
            problems.append(f"malformed_call: {exc.errors()[0]['msg']}")
            continue
        tool = tools.get(call.name)
        if tool is None:
            problems.append(f"unknown_tool: {call.name!r} is not among {sorted(tools)}")
            continue
        for err in argument_problems(tool, call.arguments):
            problems.append(f"schema_violation: {call.name}: {err}")
    return problems
