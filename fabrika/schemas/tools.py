"""Tools (OpenAI function format) and tool calls."""

from __future__ import annotations

import functools
import json
import re
import weakref
from typing import TYPE_CHECKING, Any, Callable, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    import jsonschema

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def value_matches_type(value: Any, json_type: str | list[str]) -> bool:
    """True when ``value`` is an instance of the JSON Schema ``type`` (bool is not a number)."""
    types = [json_type] if isinstance(json_type, str) else list(json_type)
    for t in types:
        py = _JSON_TYPES.get(t)
        if py is None:
            continue
        if isinstance(value, bool) and t in ("integer", "number"):
            continue
        if isinstance(value, py):
            return True
    return False


def check_parameters_schema(parameters: dict[str, Any]) -> list[str]:
    """Every problem with a tool's ``parameters`` schema, as readable strings (empty = valid).

    Checks the JSON Schema meta-schema, ``type: object``, ``required ⊆ properties``,
    enum values against their declared type and defaults against their property schema.
    Memoised on the schema's canonical JSON: the meta-schema check costs ~5 ms and
    every Tool built from a row (samples, episodes) would otherwise repeat it.
    """
    key: str | bytes | None = _schema_key(parameters, sort=True)
    if key is None:
        try:
            key = json.dumps(parameters, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError):
            return _check_parameters_schema(parameters)
    return list(_check_parameters_cached(key))


def _schema_key(schema: dict[str, Any], *, sort: bool) -> bytes | None:
    """``schema`` as JSON bytes for a memo key (orjson: ~10x the stdlib's speed); ``None`` where orjson
    would not keep it apart (non-string keys, integers beyond 64 bits, and ``null``: orjson writes NaN
    and infinities as ``null`` too) — the caller then keys on the stdlib's JSON or checks uncached."""
    try:
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS if sort else 0)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return None
    return None if b"null" in key else key


@functools.lru_cache(maxsize=8192)
def _check_parameters_cached(key: str | bytes) -> tuple[str, ...]:
    return tuple(_check_parameters_schema(json.loads(key)))


_VALIDATORS: dict[bytes, jsonschema.Draft202012Validator] = {}


def _arguments_validator(parameters: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """One compiled validator per distinct parameters schema, keyed on its JSON in insertion order (the
    order the validator walks keywords in, and so the order of equal-path errors)."""
    import jsonschema  # here: a reader of tool rows (``fabrika browse``) never validates arguments

    key = _schema_key(parameters, sort=False)
    if key is None:
        return jsonschema.Draft202012Validator(parameters)
    validator = _VALIDATORS.get(key)
    if validator is None:
        if len(_VALIDATORS) >= 8192:
            _VALIDATORS.clear()
        validator = _VALIDATORS[key] = jsonschema.Draft202012Validator(json.loads(key))
    return validator


def _check_parameters_schema(parameters: dict[str, Any]) -> list[str]:
    import jsonschema

    problems: list[str] = []
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as exc:
        problems.append(f"parameters is not a valid JSON Schema: {exc.message}")
        return problems
    if parameters.get("type") != "object":
        problems.append(f"parameters.type must be 'object', got {parameters.get('type')!r}")
    props = parameters.get("properties", {}) or {}
    if not isinstance(props, dict):
        problems.append("parameters.properties must be an object")
        return problems
    missing = [r for r in parameters.get("required", []) or [] if r not in props]
    if missing:
        problems.append(f"required names parameters that are not in properties: {missing}")
    for pname, pschema in props.items():
        if not isinstance(pschema, dict):
            continue
        ptype = pschema.get("type")
        for value in pschema.get("enum", []) or []:
            if ptype is not None and not value_matches_type(value, ptype):
                problems.append(f"enum value {value!r} of '{pname}' does not match type {ptype!r}")
        if "default" in pschema:
            try:
                jsonschema.validate(pschema["default"], pschema)
            except jsonschema.ValidationError as exc:
                problems.append(f"default of '{pname}' is invalid: {exc.message}")
    return problems


class FunctionSpec(BaseModel):
    """The ``function`` part of an OpenAI tool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Function name; letters, digits, '_', '.', '-'; at most 64 chars.")
    description: str = Field(default="", description="What the function does, in the sample's language.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments object.",
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"tool name {v!r} must match {_NAME_RE.pattern}")
        return v

    @field_validator("parameters")
    @classmethod
    def _valid_parameters(cls, v: dict[str, Any]) -> dict[str, Any]:
        problems = check_parameters_schema(v)
        if problems:
            raise ValueError("; ".join(problems))
        return v


#: ``id(tool)`` → (a weak reference to the tool, its function, its wire dict) for :meth:`Tool.to_openai`: an
#: entry lives exactly as long as its tool (the reference's callback drops it), so a memo never keeps a tool
#: alive; not a private attribute, which pydantic would compare in ``==``. ``model_copy(update=...)`` makes a
#: new tool (and a new function object), so a copy never reads another's dump.
_WIRE: dict[int, tuple["weakref.ref[Tool]", Any, dict[str, Any]]] = {}


def _forget(key: int) -> Callable[[Any], None]:
    def forget(_ref: Any) -> None:
        _WIRE.pop(key, None)

    return forget


class Tool(BaseModel):
    """A tool in OpenAI function format: ``{"type": "function", "function": {...}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["function"] = "function"
    function: FunctionSpec

    @property
    def name(self) -> str:
        return self.function.name

    def validate_arguments(self, arguments: dict[str, Any]) -> list[str]:
        """Problems with ``arguments`` against this tool's schema (empty list = valid)."""
        validator = _arguments_validator(self.function.parameters)
        return [
            f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
            for err in sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        ]

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI wire dict, dumped once per (frozen) tool: every assistant request of an episode sends
        the same tools. Read only — callers that change it copy it first."""
        key = id(self)
        got = _WIRE.get(key)
        if got is not None and got[0]() is self and got[1] is self.function:
            return got[2]
        wire = self.model_dump(mode="json")
        _WIRE[key] = (weakref.ref(self, _forget(key)), self.function, wire)
        return wire


class ToolCall(BaseModel):
    """One call: a name and an arguments object (the JSON-string form is parsed)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _accept_openai_shape(cls, data: Any) -> Any:
        # Accept {"type": "function", "function": {"name", "arguments"}} as well.
        if isinstance(data, dict) and "function" in data and "name" not in data:
            fn = data["function"] or {}
            data = {"id": data.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments", {})}
        return data

    @field_validator("arguments", mode="before")
    @classmethod
    def _parse_json_string(cls, v: Any) -> Any:
        if v is None or v == "":
            return {}
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError as exc:
                raise ValueError(f"arguments is not valid JSON: {exc.msg} at char {exc.pos}") from exc
        if not isinstance(v, dict):
            raise ValueError(f"arguments must be a JSON object, got {type(v).__name__}")
        return v

    def to_openai(self) -> dict[str, Any]:
        """OpenAI wire form: arguments as a JSON string (Cyrillic kept as is)."""
        out: dict[str, Any] = {
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }
        if self.id is not None:
            out["id"] = self.id
        return out
