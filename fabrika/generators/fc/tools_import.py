"""``fc.tools_import``: tools a team already has, instead of LLM-written ones, for ``fc.plans``.

Sources (:mod:`fabrika.generators.fc.tool_sources`): a file of OpenAI tools, an MCP
``tools/list`` result or a running MCP server over stdio, an OpenAPI 3 document.

Fidelity first: a sample trains calls to the tools the user's server has, so the tool name,
its parameter names and enum values are kept byte for byte (``get-sum``, ``getMenu``). A name
the target API (``target_api``) cannot carry is a recorded rejection naming the rule; renaming
it is opt-in (``rename: true``) and writes ``tool_names.json`` (exported name -> the server's
name) beside the stage's shards, which :func:`restore_call_names` applies to generated calls
before they are executed or shipped. Vendor ``x-*`` keys never reach the schema a model sees.

Every candidate is otherwise checked like an LLM-written tool (``parse_tool``: valid parameters
schema, four description tiers of increasing length in the stage's language). With
``repair: true`` sloppiness that changes no name and no value the server sees is fixed first and
each fix is kept in the row's ``warnings``: a string ``"false"`` default of a boolean, a numeric
string default, ``required: true`` written inside a property, Python type names (``int``,
``str``), ``required`` names that are no property, a default outside its enum, a declared type
its enum values contradict (the type follows the enum, the values stay).

Descriptions in another language than ``lang`` are refused before any LLM call, unless
``translate_descriptions`` names ``lang``: then :mod:`fabrika.generators.fc.tools_translate`
translates them (checked by back-translation) and the tiers are written in ``lang``.

Only the description tiers a source lacks are written by the LLM (one request per
tool; none when the source gives all four, e.g. ``x-fabrika-tiers``): the source's
description is the detailed tier 3, a shorter ``summary`` (MCP ``title``) the terse tier 0, and the answer can
never change them. Output rows have the columns of ``fc.tools`` (``spec`` is a
``ToolSpec``), so ``fc.plans`` takes ``input: fc.tools_import`` as it takes ``fc.tools``.
"""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path
from typing import Any, ClassVar, Iterator, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, ValidationError, model_validator

import fabrika.generators.fc.columns as cols
from fabrika.errors import InputError
from fabrika.generators.fc import tools_translate as tr
from fabrika.generators.fc.common import language_ok, parse_tool, response_error, signature
from fabrika.generators.fc.prompts import CATALOGUE as FC_PROMPTS
from fabrika.generators.fc.tool_sources import Candidate, candidates_from, duplicate_names, load_document, mcp_list_tools, snake_name
from fabrika.generators.fc.tools import TOOL_COLUMNS
from fabrika.inputs import resolve_data_path
from fabrika.llm.sim import register_sim_responder
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.fc import N_TIERS
from fabrika.schemas.ids import stable_id
from fabrika.schemas.rows import RowModel
from fabrika.schemas.tools import Tool, ToolCall
from fabrika.store import atomic_write_json
from fabrika.textutil.answers import extract_json, is_failure

TAG = "fc.tools_import"
TYPE_ALIASES = {"int": "integer", "long": "integer", "str": "string", "text": "string", "bool": "boolean",
                "float": "number", "double": "number", "decimal": "number", "dict": "object", "map": "object",
                "list": "array", "tuple": "array"}
#: Tool names each target API accepts (as their documentation states them), and fabrika's own rule.
NAME_RULES = {"openai": re.compile(r"^[a-zA-Z0-9_-]{1,64}$"), "anthropic": re.compile(r"^[a-zA-Z0-9_-]{1,64}$"),
              "gemini": re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$")}
FABRIKA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")  # fabrika.schemas.tools.FunctionSpec.name
MAPPING_FILE = "tool_names.json"
#: The source's tool name -> its HTTP operation (method, path, parameter locations, body, spec file; ``null`` for a
#: tool from an MCP or OpenAI source), written when a source is an OpenAPI document, for ``fc.live_calls`` to
#: execute calls as the requests the spec defines; the tool schemas stay as they are.
OPERATIONS_FILE = "operations.json"


class ToolSourceConfig(BaseModel):
    """One place tools come from: a file (``path``) or an MCP server started over stdio (``command``)."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(default=None, description="JSON/YAML/JSON-lines file: OpenAI tools, an MCP tools/list "
                             "result or an OpenAPI 3 document; relative to the config file, or package://fc/...")
    command: list[str] | None = Field(default=None, description="MCP server to start over stdio and ask for "
                                      "tools/list, e.g. [python, -m, my_server]; needs the mcp extra.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment of the MCP server process.")
    format: Literal["auto", "openai", "mcp", "openapi"] = Field(default="auto", description="Source format; "
                                                                "auto detects it from the document.")
    topic: str | None = Field(default=None, description="Topic of these tools (plans group tools by topic); default: "
                              "the OpenAPI tag or title, the MCP server's name, the file name.")
    timeout_s: float = Field(default=30.0, gt=0, description="Longest wait for an MCP server's tool list.")


class ToolsImportConfig(StageConfig):
    """Config of ``fc.tools_import``."""

    sources: list[ToolSourceConfig] = Field(min_length=1, description="Where the tools come from.")
    lang: Literal["ru", "en"] = Field(default="en", description="Language of the tools' descriptions (and of the "
                                      "tiers the LLM writes); a tool whose descriptions are in another one is refused.")
    group_by: Literal["tag", "source"] = Field(default="tag", description="OpenAPI: one topic per operation tag, or "
                                               "one topic per source.")
    repair: bool = Field(default=True, description="Fix schema sloppiness that changes no name and no value the "
                         "server sees (recorded in 'warnings') instead of refusing the tool.")
    target_api: Literal["openai", "anthropic", "gemini"] = Field(default="openai", description="API the trained "
                                                                 "model will call tools through; a tool name it "
                                                                 "cannot carry is refused (or renamed, see rename).")
    rename: bool = Field(default=False, description="Rename a tool whose name the target API cannot carry to "
                         "snake_case instead of refusing it; the mapping goes to tool_names.json beside the "
                         "stage's shards (apply it with restore_call_names before executing calls).")
    translate_descriptions: Literal["ru", "en"] | None = Field(default=None, description="Translate descriptions "
                                                               "not in this language (LLM, cached, checked by "
                                                               "back-translation); names and enum values stay as "
                                                               "the API defines them. Sets lang when lang is unset.")
    min_backtranslation_similarity: float = Field(default=0.5, ge=0, le=1, description="Lowest similarity of a "
                                                  "back-translated text to the original; below it the tool is "
                                                  "refused as backtranslation_mismatch.")
    describe: bool = Field(default=True, description="Ask the LLM for missing description tiers; without it a tool "
                           "lacking tiers is refused.")
    include_deprecated: bool = Field(default=False, description="Import operations marked deprecated.")
    temperature: float = Field(default=0.3, ge=0, le=2, description="Sampling temperature of the tier writer.")
    max_tokens: int = Field(default=1024, ge=128, description="Completion budget of one tier-writing request.")

    @model_validator(mode="after")
    def _translation_target(self) -> "ToolsImportConfig":
        if self.translate_descriptions is not None:
            if "lang" not in self.model_fields_set:
                self.lang = self.translate_descriptions
            elif self.lang != self.translate_descriptions:
                raise ValueError(f"translate_descriptions: {self.translate_descriptions} makes "
                                 f"{self.translate_descriptions!r} descriptions, but lang is {self.lang!r}; "
                                 "set them to the same language")
        return self


# -- repair -----------------------------------------------------------------------------------
def _js(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _boolish(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return value


def _numberish(value: Any, integer: bool) -> Any:
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return value
        if integer and number.is_integer():
            return int(number)
        if not integer:
            return number
    return value


def repair_schema(schema: Any, warnings: list[str], where: str = "parameters") -> Any:
    """A copy of ``schema`` with the sloppiness listed in the module docs fixed; each fix appended to ``warnings``."""
    if not isinstance(schema, dict):
        return schema
    s = dict(schema)
    t = s.get("type")
    if isinstance(t, str) and t.lower() in TYPE_ALIASES:
        s["type"] = TYPE_ALIASES[t.lower()]
        warnings.append(f"{where}: type {t!r} read as {s['type']!r}")
    elif isinstance(t, str) and t != t.lower() and t.lower() in ("string", "integer", "number", "boolean", "object",
                                                                 "array", "null"):
        s["type"] = t.lower()
        warnings.append(f"{where}: type {t!r} read as {s['type']!r}")
    if "type" not in s and isinstance(s.get("properties"), dict):
        s["type"] = "object"
        warnings.append(f"{where}: missing type, set to 'object'")
    t = s.get("type")
    enum = s.get("enum")
    if (t in ("boolean", "integer", "number") and isinstance(enum, list) and enum
            and all(isinstance(v, str) for v in enum)):  # the server takes the enum's values: they win
        s["type"] = "string"
        warnings.append(f"{where}: type {t!r} read as 'string' to match its enum {_js(enum)} (values kept)")
        t = "string"
    coerce = {"boolean": _boolish, "integer": lambda v: _numberish(v, True),
              "number": lambda v: _numberish(v, False)}.get(t) if isinstance(t, str) else None
    if coerce is not None:
        if "default" in s and coerce(s["default"]) is not s["default"] and coerce(s["default"]) != s["default"]:
            warnings.append(f"{where}: default {_js(s['default'])} (a string) read as {_js(coerce(s['default']))}")
            s["default"] = coerce(s["default"])
    if isinstance(s.get("enum"), list) and "default" in s and s["default"] not in s["enum"]:
        warnings.append(f"{where}: default {_js(s['default'])} is not in its enum; dropped")
        s.pop("default")
    if isinstance(s.get("properties"), dict):
        required = list(s["required"]) if isinstance(s.get("required"), list) else []
        props = {}
        for name, sub in s["properties"].items():
            if isinstance(sub, dict) and isinstance(sub.get("required"), bool):
                sub = dict(sub)
                flag = sub.pop("required")
                if flag and name not in required:
                    required.append(name)
                warnings.append(f"{where}.{name}: 'required: {str(flag).lower()}' inside the property moved to "
                                "the object's required list")
            props[name] = repair_schema(sub, warnings, f"{where}.{name}")
        s["properties"] = props
        unknown = [r for r in required if r not in props]
        if unknown:
            warnings.append(f"{where}: required names no property: {unknown}; dropped")
            required = [r for r in required if r in props]
        if required or "required" in s:
            s["required"] = required
    for key in ("items", "additionalProperties", "not"):
        if isinstance(s.get(key), dict):
            s[key] = repair_schema(s[key], warnings, f"{where}.{key}")
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(s.get(key), list):
            s[key] = [repair_schema(v, warnings, f"{where}.{key}[{i}]") for i, v in enumerate(s[key])]
    return s


def properties(schema: Any, prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """``(dotted path, property schema)`` of every property, nested objects and array items too
    (``pickup.date``; array items add ``[]``)."""
    if not isinstance(schema, dict):
        return
    for name, sub in (schema.get("properties") or {}).items():
        if not isinstance(sub, dict):
            continue
        path = f"{prefix}{name}"
        yield path, sub
        yield from properties(sub, path + ".")
        if isinstance(sub.get("items"), dict):
            yield from properties(sub["items"], path + "[].")


def _description(sub: dict[str, Any]) -> str:
    text = sub.get("description")
    return text.strip() if isinstance(text, str) else ""


def undescribed(schema: Any, prefix: str = "") -> list[str]:
    """Dotted paths of properties without a description (``pickup.date``; array items add ``[]``)."""
    return [path for path, sub in properties(schema, prefix) if not _description(sub)]


def describe_parameters(schema: dict[str, Any], descriptions: Any, wanted: list[str]) -> list[str]:
    """Put the LLM's descriptions (``{path: text}``) into ``schema`` in place; returns the paths still missing."""
    done = []
    if isinstance(descriptions, dict):
        for path in wanted:
            text = descriptions.get(path)
            if not isinstance(text, str) or not text.strip():
                continue
            node: Any = schema
            for part in path.split("."):
                key = part[:-2] if part.endswith("[]") else part
                node = (node.get("properties") or {}).get(key)
                if part.endswith("[]") and isinstance(node, dict):
                    node = node.get("items")
                if not isinstance(node, dict):
                    break
            else:
                node["description"] = text.strip()
                done.append(path)
    return [p for p in wanted if p not in done]


# -- tiers ------------------------------------------------------------------------------------------
#: the tiers prompt is ``tiers`` of the ``fc`` catalogue (fabrika/generators/fc/prompts_ru.yaml, prompts_en.yaml)


def given_tiers(cand: Candidate) -> dict[int, str]:
    """Tiers the source states: all four when it has them, else description → 3 and a shorter summary → 0."""
    if cand.tiers and len(cand.tiers) == N_TIERS and all(isinstance(t, str) and t.strip() for t in cand.tiers):
        return {i: t.strip() for i, t in enumerate(cand.tiers)}
    given: dict[int, str] = {}
    detailed = cand.description or cand.summary
    if detailed:
        given[N_TIERS - 1] = detailed
    if cand.summary and cand.description and len(cand.summary) < len(cand.description):
        given[0] = cand.summary  # a summary is the terse tier
    return given


def tiers_request(name: str, parameters: dict[str, Any], given: dict[int, str], lang: str, topic: str,
                  cfg: ToolsImportConfig, undescribed_params: Sequence[str] = ()) -> ChatRequest:
    missing = [i for i in range(N_TIERS) if i not in given]
    task = {"name": name, "topic": topic, "lang": lang, "parameters": parameters,
            "given_tiers": {str(i): t for i, t in sorted(given.items())}, "missing_tiers": missing,
            "missing_parameter_descriptions": list(undescribed_params)}
    content = FC_PROMPTS.text("tiers", lang, n=N_TIERS, last=N_TIERS - 1, missing=missing,
                              task=json.dumps(task, ensure_ascii=False, indent=1))
    return ChatRequest(messages=({"role": "user", "content": content},), temperature=cfg.temperature,
                       max_tokens=cfg.max_tokens, tag=TAG)


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def strip_thinking(text: str | None) -> str | None:
    """The answer without ``<think>…</think>`` blocks (reasoning models put drafts, JSON included, there)."""
    return None if text is None else _THINK.sub("", text)


def merge_tiers(answer: Any, given: dict[int, str]) -> list[str] | str:
    """The LLM's tiers with the given ones put back; a rejection reason when the answer has no usable tiers."""
    if is_failure(answer):
        return str(answer)
    tiers = answer.get("tiers") if isinstance(answer, dict) else None
    if not isinstance(tiers, list) or len(tiers) != N_TIERS:
        return f"invalid_tiers: expected {N_TIERS} tiers, got {tiers!r:.80}"
    out = []
    for i, t in enumerate(tiers):
        if i in given:
            out.append(given[i])
        elif isinstance(t, str) and t.strip():
            out.append(t.strip())
        else:
            return f"invalid_tiers: tier {i} is empty"
    return out


def sim_tiers_responder(request: ChatRequest, rng: random.Random) -> str:
    """``sim`` tier writer: tier 0 is the tool's key phrase, each next tier extends the one before
    (the convention the sim planner and assistant rely on); given tiers are copied."""
    text = request.messages[-1]["content"]
    task = json.loads(text.split("```json\n", 1)[1].rsplit("```", 1)[0])
    lang, name = task["lang"], task["name"]
    given = {int(k): v for k, v in task["given_tiers"].items()}
    params = ", ".join((v.get("description") or k) for k, v in task["parameters"].get("properties", {}).items())
    source = given.get(N_TIERS - 1, "")  # the key phrase: the given terse tier, else the start of the detailed one
    split = re.sub(r"[^\w\s-]", " ", source.split(".")[0]).split()
    words = " ".join(split[: max(1, min(4, len(split) - 1))]) or name.replace("_", " ")
    t0 = given.get(0) or words[0].upper() + words[1:]
    topic = task["topic"] if language_ok(task["topic"], lang) else tr.sim_transliterate(task["topic"], lang, ())
    if lang == "ru":
        extra = [f"Тема: {topic}", f"Параметры: {params or 'нет'}", "Возвращает результат операции"]
    else:
        extra = [f"Topic: {topic}", f"Parameters: {params or 'none'}", "Returns the operation's result"]
    tiers = [given.get(0, t0)]
    for i in range(1, N_TIERS):
        tiers.append(given.get(i) or f"{tiers[-1]}. {extra[i - 1]}")
    for i in range(N_TIERS - 2, -1, -1):  # a short given tier: cut the written ones below it
        if i not in given and len(tiers[i]) >= len(tiers[i + 1]):
            tiers[i] = tiers[i][: max(1, len(tiers[i + 1]) - 1)].rstrip(" .,")
    label = "значение параметра" if lang == "ru" else "value of"
    described = {p: f"{label} {p.split('.')[-1].replace('[]', '').replace('_', ' ')}"
                 for p in task.get("missing_parameter_descriptions") or []}
    return json.dumps({"tiers": tiers, "parameters": described}, ensure_ascii=False)


register_sim_responder(TAG, sim_tiers_responder)


# -- names and languages ---------------------------------------------------------------------------
def name_problem(name: str, target_api: str) -> str | None:
    """Why ``target_api`` (or fabrika's tool schema) cannot carry ``name``; ``None`` when both can."""
    rule = NAME_RULES[target_api]
    if not rule.match(name):
        return f"the {target_api} API takes tool names matching {rule.pattern}"
    if not FABRIKA_NAME.match(name):
        return f"tool names must match {FABRIKA_NAME.pattern}"
    return None


def exported_name(name: str, target_api: str) -> str | None:
    """The snake_case name ``rename: true`` gives ``name`` (``None`` when even that cannot be carried)."""
    new = snake_name(name)
    return new if new and name_problem(new, target_api) is None else None


def renames(cands: Sequence[Candidate], cfg: "ToolsImportConfig") -> dict[str, str]:
    """Exported name -> source name of the tools ``rename: true`` renames (names the target API cannot
    carry); a snake_case name another tool already has, or that two renamed tools share, is left out
    (those tools are refused as duplicates)."""
    taken = {c.name for c in cands if c.name and not c.error}
    out: dict[str, str] = {}
    clashes: set[str] = set()
    for c in cands:
        if not c.name or c.error or name_problem(c.name, cfg.target_api) is None:
            continue
        new = exported_name(c.name, cfg.target_api)
        if new is None:
            continue
        if new in out and out[new] != c.name:
            clashes.add(new)
        out[new] = c.name
    return {k: v for k, v in out.items() if k not in clashes and k not in taken}


def parameter_texts(schema: Any, prefix: str = "") -> dict[str, str]:
    """Dotted path -> description of every described property (the paths of :func:`undescribed`)."""
    return {path: text for path, sub in properties(schema, prefix) if (text := _description(sub))}


def identifiers(name: str, schema: Any) -> list[str]:
    """The tool's name, its parameter names and string enum values: what a translation must keep."""
    out = {name}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            out.update(k for k in (node.get("properties") or {}) if isinstance(k, str))
            out.update(v for v in node.get("enum") or [] if isinstance(v, str))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(schema)
    return sorted(out)


def _pointer(parts: Sequence[str]) -> str:
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def schema_texts(schema: Any, at: tuple[str, ...] = ()) -> dict[str, str]:
    """JSON pointer (without the leading ``/``) -> text of every ``description`` in a schema, at any depth
    (``anyOf`` branches and array items too); names under ``properties`` are walked, never read as texts."""
    out: dict[str, str] = {}
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "description" and isinstance(value, str) and value.strip():
                out[_pointer([*at, key])] = value.strip()
            elif key not in ("enum", "const", "default", "examples", "required"):
                out.update(schema_texts(value, (*at, key)))
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            out.update(schema_texts(value, (*at, str(i))))
    return out


def source_texts(cand: Candidate, params: Any) -> dict[str, str]:
    """Every description text of a candidate, keyed for translation (``description``, ``tier:1``,
    ``param:properties/a/description``)."""
    texts = {"description": cand.description, "summary": cand.summary}
    for i, t in enumerate(cand.tiers or []):
        if isinstance(t, str):
            texts[f"tier:{i}"] = t
    texts.update({f"param:{k}": v for k, v in schema_texts(params).items()})
    return {k: v for k, v in texts.items() if v and v.strip()}


def foreign_texts(texts: dict[str, str], lang: str, keep: Sequence[str] = ()) -> dict[str, str]:
    """The texts not in ``lang`` (the tool's own identifiers in them do not count as language)."""
    return {k: v for k, v in texts.items() if not tr.text_language_ok(v, lang, keep)}


def apply_texts(cand: Candidate, params: Any, texts: dict[str, str]) -> None:
    """Put translated texts back where :func:`source_texts` found them (``params`` in place)."""
    for key, text in texts.items():
        if key in ("description", "summary"):
            setattr(cand, key, text)
        elif key.startswith("tier:") and cand.tiers:
            cand.tiers[int(key[5:])] = text
        elif key.startswith("param:"):
            *parts, last = [p.replace("~1", "/").replace("~0", "~") for p in key[6:].split("/")]
            node: Any = params
            for part in parts:
                node = node[int(part)] if isinstance(node, list) else node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node[last] = text


def restore_call_names(calls: Sequence[Any], mapping: dict[str, str]) -> list[ToolCall]:
    """Calls with the server's tool names put back (``mapping``: exported name -> source name, from
    ``tool_names.json``); names not in the mapping were never renamed and stay."""
    out = []
    for raw in calls:
        call = raw if isinstance(raw, ToolCall) else ToolCall.model_validate(raw)
        out.append(call.model_copy(update={"name": mapping.get(call.name, call.name)}))
    return out


def load_name_mapping(stage_dir: str | Path) -> dict[str, str]:
    """The ``tool_names.json`` of an ``fc.tools_import`` stage directory (empty when nothing was renamed)."""
    path = Path(stage_dir) / MAPPING_FILE
    return dict(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else {}


def run_name_mappings(run_dir: str | Path) -> dict[str, str]:
    """Every ``tool_names.json`` of a run's stages merged (exported name -> the server's name); the export
    ships it beside the dataset so whoever executes the trained model's calls can put the names back."""
    merged: dict[str, str] = {}
    for path in sorted(Path(run_dir).glob(f"stages/*/{MAPPING_FILE}")):
        merged.update(load_name_mapping(path.parent))
    return merged


def run_operations(run_dir: str | Path) -> dict[str, dict[str, Any] | None]:
    """Every ``operations.json`` of a run's stages merged (the source's tool name -> its HTTP operation, or
    ``None`` for an imported tool that is not one)."""
    merged: dict[str, dict[str, Any] | None] = {}
    for path in sorted(Path(run_dir).glob(f"stages/*/{OPERATIONS_FILE}")):
        merged.update(json.loads(path.read_text(encoding="utf-8")))
    return merged


# -- the stage ----------------------------------------------------------------------------------
def _row(status_row: Row, cand: Candidate, lang: str, topic_id: str, **cols: Any) -> Row:
    base = {c: cols.get(c) for c in TOOL_COLUMNS}
    base.update(topic_id=topic_id, topic=cand.topic, lang=lang, name=cols.get("name", cand.name))
    return {**status_row, **base, "source": cand.key,
            "warnings": json.dumps(cand.warnings, ensure_ascii=False) if cand.warnings else None}


def _language_issue(cands: list[Candidate], lang: str, where: str) -> tuple[str, str] | None:
    """A config issue when every described candidate is documented in another language than ``lang``."""
    described = [c for c in cands if not c.error and source_texts(c, c.parameters)]
    foreign = [c for c in described if foreign_texts(source_texts(c, c.parameters), lang)]
    if described and len(foreign) == len(described):
        return (where, f"all {len(described)} tools are described in another language than lang {lang!r}; "
                f"set translate_descriptions: {lang} to translate them (names and enums stay), or lang to theirs")
    return None


class ImportItem(RowModel):
    """One item of ``fc.tools_import`` (its own input rows: a tool candidate read from a source file)."""

    id: str
    label: str
    candidate: InstanceOf[Candidate]
    duplicate_of: str | None = None


@register_stage
class ToolsImportStage(Stage[ToolsImportConfig]):
    """Source stage: one row per imported tool (ok, or rejected with its reason)."""

    kind = "fc.tools_import"
    prompt_templates: ClassVar[tuple[Any, ...]] = (tr.CATALOGUE.select("translate"), FC_PROMPTS.select("tiers"))
    reads = ()  # tools files and MCP servers
    writes = cols.TOOL_IMPORT
    input_files = (cols.TOOL_SOURCES,)

    def __init__(self, config: ToolsImportConfig, ctx: Any) -> None:
        super().__init__(config, ctx)
        self._live: dict[int, dict[str, Any]] = {}  # source index -> tools/list result of a running MCP server

    @classmethod
    def check_config(cls, config: ToolsImportConfig, pipeline: Any) -> list[tuple[str, str]]:
        issues: list[tuple[str, str]] = []
        resolve = getattr(pipeline, "resolve_path", None)
        for i, src in enumerate(config.sources):
            where = f"sources[{i}]"
            if (src.path is None) == (src.command is None):
                issues.append((where, "give exactly one of 'path' (a file) or 'command' (an MCP server)"))
                continue
            if src.path is None:  # an MCP server
                if not src.command:
                    issues.append((f"{where}.command", "empty command"))
                continue
            path = resolve_data_path(src.path, resolve)
            if not path.is_file():
                issues.append((f"{where}.path", f"tools source not found: {path}"))
                continue
            try:
                cands = candidates_from(load_document(path), src.format, path.stem, group_by=config.group_by,
                                        base_dir=path.parent, uri=path.resolve().as_uri())
            except InputError as exc:
                issues.append((f"{where}.path", str(exc)))
                continue
            issue = None if config.translate_descriptions else _language_issue(cands, config.lang, f"{where}.path")
            if issue:
                issues.append(issue)
        return issues

    async def setup(self) -> None:
        cfg = self.config
        for i, src in enumerate(cfg.sources):
            if src.command is not None:
                self._live[i] = await mcp_list_tools(src.command, src.env, None, src.timeout_s)
                issue = None if cfg.translate_descriptions else _language_issue(
                    candidates_from(self._live[i], "mcp", "mcp"), cfg.lang, f"sources[{i}].command")
                if issue:
                    raise InputError(f"{self.name}.{issue[0]}: {issue[1]}")
        cands = [c for _, c in self._candidates()]
        mapping = renames(cands, cfg) if cfg.rename else {}
        path = self.ctx.stage_dir(self.name) / MAPPING_FILE
        if mapping or path.exists():
            atomic_write_json(path, dict(sorted(mapping.items())))
        ops: dict[str, Any] = {}
        for c in cands:  # the first of a name wins, as in the import (later ones are duplicate_name refusals)
            if c.name and not c.error:
                ops.setdefault(c.name, c.operation)  # null: not an HTTP operation (an MCP or OpenAI source)
        path = self.ctx.stage_dir(self.name) / OPERATIONS_FILE
        if any(ops.values()) or path.exists():
            atomic_write_json(path, dict(sorted(ops.items())))

    def _candidates(self) -> Iterator[tuple[str, Candidate]]:
        cfg = self.config
        resolve = getattr(self.ctx.pipeline, "resolve_path", None)
        for i, src in enumerate(cfg.sources):
            if src.path is None:  # an MCP server (validation admits exactly one of path and command)
                doc = self._live[i]
                label = str(doc.get("server") or snake_name(" ".join(src.command or [])) or f"mcp{i}")
                cands = candidates_from(doc, "mcp", label)
            else:
                path = resolve_data_path(src.path, resolve)
                label = path.stem
                cands = candidates_from(load_document(path), src.format, label, group_by=cfg.group_by,
                                        base_dir=path.parent, uri=path.resolve().as_uri())
            for cand in cands:
                if src.topic:
                    cand.topic = src.topic
                yield label, cand

    def input_rows(self) -> Iterator[Row]:
        items = list(self._candidates())
        dups = duplicate_names(c for _, c in items)
        taken = {c.name: c.key for _, c in items if c.name and not c.error}
        renamed = renames([c for _, c in items], self.config) if self.config.rename else {}
        for n, (label, cand) in enumerate(items):
            dup = dups.get(n)
            new = (exported_name(cand.name, self.config.target_api) if self.config.rename and cand.name
                   and not cand.error and name_problem(cand.name, self.config.target_api) else None)
            if dup is None and new is not None and renamed.get(new) != cand.name:  # its snake_case name is taken
                dup = f"{taken.get(new) or 'another renamed tool'} (as {new!r})"
            yield {"id": stable_id(label, cand.key, prefix="import-"), "label": label, "n": n,
                   "candidate": cand, "duplicate_of": dup}

    async def _translate(self, cand: Candidate, name: str, params: dict[str, Any]) -> str | None:
        """Translate the candidate's foreign texts in place; the rejection reason when that fails."""
        cfg = self.config
        to = cfg.lang
        keep = identifiers(cand.name or name, params)
        original = foreign_texts(source_texts(cand, params), to, keep)
        if not original:
            return None
        resp = await self.ctx.llm.complete_one(tr.translation_request(
            name, original, keep, to, tr.TAG_TRANSLATE, cfg.temperature, cfg.max_tokens))
        err = response_error(resp)
        translated = err or tr.parse_translation(strip_thinking(resp.text), original)
        if isinstance(translated, str):
            return translated
        resp = await self.ctx.llm.complete_one(tr.translation_request(
            name, translated, keep, tr.other_lang(to), tr.TAG_BACK, 0.0, cfg.max_tokens))
        err = response_error(resp)
        back = err or tr.parse_translation(strip_thinking(resp.text), original)
        if isinstance(back, str):
            return f"backtranslation_failed: {back}"
        verdict = tr.check_translation(original, translated, back, keep, to, cfg.min_backtranslation_similarity)
        if verdict.reason:
            return verdict.reason
        apply_texts(cand, params, translated)
        cand.warnings.append(f"{len(translated)} description text(s) translated into {to} "
                             f"(back-translation similarity >= {verdict.min_similarity:.2f})")
        return None

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        item = ImportItem.of(row)
        cand: Candidate = copy.deepcopy(item.candidate)
        lang = cfg.lang
        topic_id = stable_id(item.label, cand.topic, prefix="topic-")
        bad_id = stable_id(item.id, prefix="tool-bad-")

        def refuse(reason: str) -> list[Row]:
            return [_row(rejected(bad_id, reason), cand, lang, topic_id)]

        if cand.error:
            return refuse(cand.error)
        if cand.deprecated and not cfg.include_deprecated:
            return refuse("deprecated: the operation is marked deprecated (include_deprecated: true imports it)")
        if not cand.name:
            return refuse("invalid_name: the tool has no name")
        if item.duplicate_of:
            return refuse(f"duplicate_name: {cand.name} is already taken by {item.duplicate_of}")
        name = cand.name
        problem = name_problem(name, cfg.target_api)
        if problem:
            new = exported_name(name, cfg.target_api) if cfg.rename else None
            if new is None:
                hint = "" if cfg.rename else f"; rename: true exports it as {snake_name(name)!r} with a mapping"
                return refuse(f"invalid_name: {name!r}: {problem}{hint}")
            cand.warnings.append(f"name {name!r} exported as {new!r} ({MAPPING_FILE} maps calls back)")
            name = new
        params = cand.parameters if cand.parameters is not None else {"type": "object", "properties": {}}
        if cfg.repair and params == {}:  # an argument-less tool written as {} (some MCP servers do)
            params = {"type": "object", "properties": {}}
            cand.warnings.append("parameters: empty schema read as an object without properties")
        if cfg.repair:
            params = repair_schema(params, cand.warnings)
        try:
            Tool.model_validate({"function": {"name": name, "description": cand.description or name,
                                              "parameters": params}})
        except ValidationError as exc:
            return refuse(f"invalid_schema: {name}: {exc.errors()[0]['msg']}")
        params = copy.deepcopy(params)
        if cfg.translate_descriptions:
            reason = await self._translate(cand, name, params)
            if reason:
                return refuse(reason)
        foreign = foreign_texts(source_texts(cand, params), lang, identifiers(cand.name or name, params))
        if foreign:  # refused before the tier writer spends a call on it
            key, text = next(iter(foreign.items()))
            return refuse(f"wrong_language: {name} {key} not in {lang!r}: {text[:60]!r} "
                          f"(translate_descriptions: {lang} translates it)")
        given = given_tiers(cand)
        bare = undescribed(params)
        tiers: list[str] | str = [given[i] for i in range(N_TIERS)] if len(given) == N_TIERS else ""
        if not cfg.describe and not tiers:
            return refuse(f"missing_tiers: {name} has {len(given)} of {N_TIERS} description tiers (describe: true "
                          "lets the LLM write the rest)")
        if cfg.describe and (not tiers or bare):
            resp = await self.ctx.llm.complete_one(tiers_request(name, params, given, lang, cand.topic, cfg, bare))
            err = response_error(resp)
            if err:
                return refuse(err)
            answer = extract_json(strip_thinking(resp.text), expect=dict)
            if not tiers:
                tiers = merge_tiers(answer, given)
            if bare and not is_failure(answer):
                bare = describe_parameters(params, answer.get("parameters"), bare)
        if isinstance(tiers, str):
            return refuse(tiers)
        if bare:
            cand.warnings.append(f"parameters without a description: {', '.join(bare)}")
        spec, reason = parse_tool({"name": name, "tiers": tiers, "parameters": params}, topic_id=topic_id, lang=lang,
                                  name_re=FABRIKA_NAME, identifiers=identifiers(cand.name or name, params))
        if spec is None:
            return refuse(str(reason))
        return [_row(ok(spec.id), cand, lang, topic_id, name=spec.name, signature=signature(spec.tool),
                     spec=spec.model_dump_json())]


def import_tools(path: str | Path, fmt: str = "auto") -> list[Candidate]:
    """The candidates of one tools file (what ``fc.tools_import`` would read), for scripts and tests."""
    p = Path(path)
    return candidates_from(load_document(p), fmt, p.stem, base_dir=p.parent, uri=p.resolve().as_uri())
