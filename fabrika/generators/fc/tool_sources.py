"""Tools from the formats teams already have: OpenAI tool lists, MCP ``tools/list``, OpenAPI 3.

Each source becomes a list of :class:`Candidate` — a name, descriptions and a raw
parameters schema, or the reason it cannot be one. Nothing here decides whether a
tool is good; :mod:`fabrika.generators.fc.tools_import` validates, repairs and
records a rejection per refused candidate.

* OpenAI: ``[{"type": "function", "function": {...}}]``, ``{"tools": [...]}`` or bare
  ``{"name", "description", "parameters"}`` objects (a JSON array, an object, or JSON lines).
* MCP: a ``tools/list`` result (``{"tools": [{"name", "description", "inputSchema"}]}``,
  or the whole JSON-RPC response around it), or a live server over stdio
  (:func:`mcp_list_tools`, with the ``mcp`` SDK, following ``nextCursor`` pages).
* OpenAPI 3.0/3.1 (JSON or YAML): one tool per operation. Path and query parameters and
  a JSON request body become one ``object`` schema (body properties merged at the top
  level, or under ``body`` when they clash or the body is not an object); header and cookie
  parameters are left out with a warning. ``$ref`` s are resolved with ``referencing``
  (the library ``jsonschema`` uses): JSON pointers into the document, other local files,
  escaped pointer tokens; a recursive ``$ref`` is cut to ``{"type": "object"}`` with a
  warning; an unresolvable one makes the operation a rejection. OpenAPI 3.0 dialect is
  turned into JSON Schema (``nullable``, boolean ``exclusiveMinimum``, ``readOnly``
  properties out of request bodies, ``example``/``xml``/``discriminator`` dropped).

Names are kept as the source spells them (``get-sum``, ``getMenu``): a trained call must reach
the tool the user's server has. Only an operation without ``operationId`` gets a derived name
(``GET /pets/{id}`` -> ``get_pets_id``), with a warning. Vendor extension keys (``x-*``) are
documentation for other tools, not argument constraints: :func:`drop_vendor_keys` takes them out
of every parameters schema (a *property* named ``x-…`` is a parameter and stays).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from fabrika.errors import InputError, TransientError

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
#: OpenAPI's default ``style`` per parameter location (``explode`` defaults to true for ``form`` only).
DEFAULT_STYLES = {"path": "simple", "query": "form", "header": "simple", "cookie": "form"}
#: OpenAPI keys that are documentation, not argument constraints.
DROPPED_KEYS = ("example", "examples", "xml", "externalDocs", "discriminator")
#: Schema keywords whose values map names (of parameters, definitions) to schemas: keys there are names.
NAME_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
JSON_MEDIA = re.compile(r"^application/(.+\+)?json(;.*)?$")


@dataclass
class Candidate:
    """One would-be tool as a source states it."""

    key: str  # where it came from: "openapi:GET /pets/{id}", "mcp:get_forecast", "openai:#2"
    name: str | None
    topic: str
    description: str = ""
    summary: str = ""
    parameters: Any = None
    tiers: list[str] | None = None
    error: str | None = None  # the reason it cannot become a tool (reading it already failed)
    warnings: list[str] = field(default_factory=list)
    deprecated: bool = False
    topic_description: str = ""
    #: OpenAPI: how a call becomes the HTTP request (:class:`Operation` as a dict), for ``fc.live_calls``;
    #: never part of the schema shown to models.
    operation: dict[str, Any] | None = None


@dataclass(frozen=True)
class Operation:
    """What an imported OpenAPI tool's call is on the wire: ``method path``, where each argument goes.

    ``params`` maps a parameter name to its location (``path``, ``query``, ``header``, ``cookie``;
    header and cookie parameters are not in the tool's schema, the model never fills them);
    ``body`` is ``merged`` (the body's properties are top-level arguments), ``wrapped`` (the body
    is the ``body`` argument) or ``None`` (no body); ``media`` the request body's media type.
    """

    method: str
    path: str
    params: dict[str, str]
    body: str | None = None
    media: str | None = None
    spec: str | None = None  # the OpenAPI document it came from (an absolute path), for the mock
    #: parameters serialised other than by their location's default (``[style, explode]``), e.g. deepObject
    styles: dict[str, list[Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"method": self.method, "path": self.path, "params": dict(self.params), "body": self.body,
               "media": self.media, "spec": self.spec}
        return {**out, "styles": dict(self.styles)} if self.styles else out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Operation":
        return cls(method=str(data["method"]), path=str(data["path"]), params=dict(data.get("params") or {}),
                   body=data.get("body"), media=data.get("media"), spec=data.get("spec"),
                   styles=dict(data.get("styles") or {}))


def drop_vendor_keys(schema: Any, dropped: set[str] | None = None) -> Any:
    """``schema`` without vendor extension keys (``x-*``) at any depth; their names are added to ``dropped``.

    Keys of ``properties`` (and the other name maps) are parameter names, never keywords: they stay.
    """
    if isinstance(schema, list):
        return [drop_vendor_keys(v, dropped) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key.startswith("x-"):
            if dropped is not None:
                dropped.add(key)
            continue
        if key in NAME_MAPS and isinstance(value, dict):
            out[key] = {name: drop_vendor_keys(sub, dropped) for name, sub in value.items()}
        elif key in ("enum", "const", "default", "required", "examples", "example"):
            out[key] = value  # values, not schemas
        else:
            out[key] = drop_vendor_keys(value, dropped)
    return out


def _clean(cand: Candidate) -> Candidate:
    """``cand`` with vendor keys out of its parameters (and a warning naming them)."""
    dropped: set[str] = set()
    cand.parameters = drop_vendor_keys(cand.parameters, dropped)
    if dropped:
        cand.warnings.append(f"vendor keys dropped from the schema: {', '.join(sorted(dropped))}")
    return cand


# -- reading documents -------------------------------------------------------------------
def load_document(path: Path) -> Any:
    """A JSON, JSON-lines or YAML document; :class:`InputError` naming the file when it is none of them."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read tools source ({exc.strerror})") from exc
    try:
        return json.loads(text)
    except ValueError:
        pass
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines and all(ln.lstrip().startswith("{") for ln in lines):
        try:
            return [json.loads(ln) for ln in lines]
        except ValueError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not JSON, JSON lines or YAML ({exc})") from exc


def detect_format(doc: Any) -> str:
    """``openapi``, ``mcp`` or ``openai``; :class:`InputError` for anything else."""
    if isinstance(doc, dict) and isinstance(doc.get("openapi"), str):
        return "openapi"
    if isinstance(doc, dict) and "swagger" in doc:
        raise InputError("Swagger 2.0 documents are not supported; convert to OpenAPI 3 (e.g. with swagger2openapi)")
    tools = _mcp_tools(doc)
    if tools is not None and all(isinstance(t, dict) and "inputSchema" in t for t in tools):
        return "mcp"
    if _openai_tools(doc) is not None:
        return "openai"
    raise InputError("not a tools source: expected an OpenAPI 3 document ('openapi: 3.x'), an MCP tools/list "
                     "result ({'tools': [{'name', 'inputSchema'}]}) or a list of OpenAI tools")


def _mcp_tools(doc: Any) -> list[Any] | None:
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict):  # the JSON-RPC response around it
        doc = doc["result"]
    if isinstance(doc, dict) and isinstance(doc.get("tools"), list):
        return doc["tools"]
    return None


def _openai_tools(doc: Any) -> list[Any] | None:
    if isinstance(doc, dict) and isinstance(doc.get("tools"), list):
        return doc["tools"]
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict) and ("function" in doc or "name" in doc):
        return [doc]
    return None


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def openai_candidates(doc: Any, topic: str) -> list[Candidate]:
    out = []
    for i, raw in enumerate(_openai_tools(doc) or []):
        key = f"openai:#{i}"
        if not isinstance(raw, dict):
            out.append(Candidate(key=key, name=None, topic=topic, error=f"invalid_tool: item {i} is not an object"))
            continue
        fn: dict[str, Any] = f if isinstance(f := raw.get("function"), dict) else raw
        tiers = raw.get("tiers", fn.get("tiers"))
        out.append(_clean(Candidate(key=key, name=fn.get("name") if isinstance(fn.get("name"), str) else None,
                                    topic=topic, description=_text(fn.get("description")),
                                    parameters=fn.get("parameters"), tiers=tiers if isinstance(tiers, list) else None)))
    return out


def mcp_candidates(doc: Any, topic: str) -> list[Candidate]:
    out = []
    for i, raw in enumerate(_mcp_tools(doc) or []):
        name = raw.get("name") if isinstance(raw, dict) else None
        key = f"mcp:{name or f'#{i}'}"
        if not isinstance(raw, dict):
            out.append(Candidate(key=key, name=None, topic=topic, error=f"invalid_tool: item {i} is not an object"))
            continue
        schema = raw.get("inputSchema")
        cand = Candidate(key=key, name=name if isinstance(name, str) else None, topic=topic,
                         description=_text(raw.get("description")), summary=_text(raw.get("title")))
        try:
            cand.parameters = resolve_refs(schema, _registry(schema, "urn:fabrika:mcp"), "urn:fabrika:mcp",
                                           cand.warnings)
        except ValueError as exc:
            cand.error = str(exc)
        out.append(_clean(cand))
    return out


async def mcp_list_tools(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
                         timeout_s: float = 30.0) -> dict[str, Any]:
    """Start an MCP server over stdio, ``initialize``, page through ``tools/list``; the result as JSON.

    Raises :class:`InputError` (with the command) when the SDK is missing or the server fails.
    """
    try:
        from mcp import ClientSession, StdioServerParameters, types
        from mcp.client.stdio import stdio_client
    except ImportError as exc:
        raise InputError("reading tools from an MCP server needs the mcp SDK: pip install 'fabrika[mcp]'") from exc
    params = StdioServerParameters(command=command[0], args=list(command[1:]), env=env or None,
                                   cwd=str(cwd) if cwd else None)

    async def fetch() -> dict[str, Any]:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                tools: list[dict[str, Any]] = []
                cursor: str | None = None
                for _ in range(1000):  # pages; a server that never stops paging is cut off
                    page = await session.list_tools(
                        params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
                    tools += [t.model_dump(by_alias=True, exclude_none=True) for t in page.tools]
                    cursor = page.next_cursor
                    if not cursor:
                        break
                info = getattr(init, "server_info", None)
                return {"server": getattr(info, "name", None), "tools": tools}

    try:
        return await asyncio.wait_for(fetch(), timeout_s)
    except TimeoutError as exc:
        raise InputError(f"MCP server {' '.join(command)!r} did not list its tools within {timeout_s:g} s") from exc
    except Exception as exc:  # noqa: BLE001 - any failure of a user's server is an input problem
        raise InputError(f"MCP server {' '.join(command)!r} failed: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class CallVerdict:
    """What a live server said to one call: ``ok`` false when it refused it (``isError`` or a protocol error)."""

    name: str
    ok: bool
    detail: str


class McpSession:
    """One stdio session with an MCP server, kept open for many calls (``fc.live_calls``, :func:`mcp_call_tools`).

    The SDK's client lives in one background task (its anyio scopes must be entered and left
    in the same task); :meth:`call` hands it one call at a time and awaits the verdict. A
    JSON-RPC error or ``isError`` is the server's *verdict* on the call; a server that died,
    or a call with no answer within ``timeout_s``, raises :class:`~fabrika.errors.TransientError`
    (nothing was learned about the call). :meth:`start` raises :class:`InputError` naming the
    command when the SDK is missing or the server does not start.
    """

    def __init__(self, command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
                 timeout_s: float = 30.0) -> None:
        self.command = list(command)
        self.env = env
        self.cwd = cwd
        self.timeout_s = timeout_s
        self._queue: asyncio.Queue[tuple[str, dict[str, Any], asyncio.Future[CallVerdict]] | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None

    @property
    def label(self) -> str:
        return " ".join(self.command)

    async def start(self) -> "McpSession":
        try:
            from mcp import ClientSession, StdioServerParameters
            from mcp.client.stdio import stdio_client
        except ImportError as exc:
            raise InputError("calling an MCP server needs the mcp SDK: pip install 'fabrika[mcp]'") from exc
        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=self.env or None,
                                       cwd=str(self.cwd) if self.cwd else None)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready = ready

        async def serve() -> None:
            try:
                async with stdio_client(params) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        ready.set_result(None)
                        while (job := await self._queue.get()) is not None:
                            name, arguments, fut = job
                            try:
                                result = await session.call_tool(name, arguments)
                            except Exception as exc:  # noqa: BLE001 - a JSON-RPC error is the server's verdict
                                if _transport_failure(exc):
                                    raise
                                fut.set_result(CallVerdict(name, False, f"{type(exc).__name__}: {exc}"[:300]))
                                continue
                            text = " ".join(getattr(c, "text", "") for c in result.content or [])[:300]
                            fut.set_result(CallVerdict(name, not result.is_error, text))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits: start() or the calls
                if not ready.done():
                    ready.set_exception(exc)
                self._fail_pending(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise

        self._task = asyncio.create_task(serve(), name=f"mcp:{self.label}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.timeout_s)
        except TimeoutError as exc:
            await self.close()
            raise InputError(f"MCP server {self.label!r} did not start within {self.timeout_s:g} s") from exc
        except Exception as exc:  # noqa: BLE001 - any failure of a user's server is an input problem
            await self.close()
            raise InputError(f"MCP server {self.label!r} failed: {type(exc).__name__}: {exc}") from exc
        return self

    def _fail_pending(self, exc: BaseException) -> None:
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if job is not None and not job[2].done():
                job[2].set_exception(TransientError(f"MCP server {self.label!r} stopped: {type(exc).__name__}"))

    async def call(self, name: str, arguments: dict[str, Any]) -> CallVerdict:
        """Execute one call; the server's verdict (see the class docs for what raises)."""
        if self._task is None or self._task.done():
            raise TransientError(f"MCP server {self.label!r} is not running")
        fut: asyncio.Future[CallVerdict] = asyncio.get_running_loop().create_future()
        await self._queue.put((name, arguments, fut))
        task = self._task
        waiting: set[asyncio.Future[Any]] = {fut, task}
        done, _ = await asyncio.wait(waiting, timeout=self.timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if fut in done:
            return fut.result()
        if task in done:
            raise TransientError(f"MCP server {self.label!r} stopped during a call to {name!r}")
        raise TransientError(f"MCP server {self.label!r} did not answer a call to {name!r} within {self.timeout_s:g} s")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        await self._queue.put(None)
        try:
            await asyncio.wait_for(task, self.timeout_s)
        except BaseException:  # noqa: BLE001 - a server that does not stop is cancelled; nothing to report
            task.cancel()

    async def __aenter__(self) -> "McpSession":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _transport_failure(exc: BaseException) -> bool:
    """The stream to the server broke (as opposed to the server refusing a call with a JSON-RPC error)."""
    from mcp.shared import exceptions

    # the SDK's JSON-RPC error type: MCPError (McpError in older releases)
    protocol_error = getattr(exceptions, "MCPError", None) or getattr(exceptions, "McpError", Exception)
    if not isinstance(exc, protocol_error if isinstance(protocol_error, type) else Exception):
        return True
    # the SDK reports a closed stream as a JSON-RPC error too (CONNECTION_CLOSED, -32000)
    code = getattr(getattr(exc, "error", None), "code", None)
    return code == CONNECTION_CLOSED or "connection closed" in str(exc).lower()


#: JSON-RPC code the MCP SDK gives a call whose connection closed (``mcp.types.CONNECTION_CLOSED``).
CONNECTION_CLOSED = -32000


async def mcp_call_tools(command: list[str], calls: list[tuple[str, dict[str, Any]]], env: dict[str, str] | None = None,
                         timeout_s: float = 30.0) -> list[CallVerdict]:
    """Execute ``(name, arguments)`` calls on an MCP server over stdio, one session, in order.

    For checking generated calls against the user's own server (a call it rejects is one the data
    should not teach; the ``fc.live_calls`` stage does this for a run's samples). The calls really
    run: point it at a test instance, not production. Raises :class:`InputError` when the server
    cannot be started, :class:`~fabrika.errors.TransientError` when it stops answering.
    """
    async with McpSession(command, env=env, timeout_s=timeout_s) as session:
        return [await session.call(name, arguments) for name, arguments in calls]


# -- $ref resolution ------------------------------------------------------------------------
def _registry(doc: Any, uri: str, base_dir: Path | None = None) -> Registry:
    def retrieve(target: str) -> Resource:
        if not target.startswith("file:") or base_dir is None:
            raise ValueError(f"only local files are followed, not {target!r}")
        from urllib.parse import unquote, urlparse

        path = Path(unquote(urlparse(target).path))
        return Resource.from_contents(load_document(path), default_specification=DRAFT202012)

    resource = Resource.from_contents(doc if isinstance(doc, (dict, bool)) else {}, default_specification=DRAFT202012)
    return Registry(retrieve=retrieve).with_resource(uri, resource)  # type: ignore[call-arg]


def resolve_refs(node: Any, registry: Registry, base_uri: str, warnings: list[str]) -> Any:
    """``node`` with every ``$ref`` inlined (siblings of a ``$ref`` kept); ``ValueError`` on an unresolvable one."""
    resolver = registry.resolver(base_uri=base_uri)

    def walk(value: Any, res: Any, stack: tuple[int, ...]) -> Any:
        if isinstance(value, list):
            return [walk(v, res, stack) for v in value]
        if not isinstance(value, dict):
            return value
        ref = value.get("$ref")
        if isinstance(ref, str):
            try:
                found = res.lookup(ref)
            except (Unresolvable, ValueError, InputError) as exc:
                raise ValueError(f"unresolved_ref: {ref} ({type(exc).__name__})") from exc
            siblings = {k: walk(v, res, stack) for k, v in value.items() if k != "$ref"}
            if id(found.contents) in stack:
                warnings.append(f"recursive $ref {ref} cut to an object")
                return {"type": "object", **siblings}
            target = walk(found.contents, found.resolver, stack + (id(found.contents),))
            return {**target, **siblings} if isinstance(target, dict) else target
        return {k: walk(v, res, stack) for k, v in value.items()}

    return walk(node, resolver, ())


# -- OpenAPI ------------------------------------------------------------------------------------
def oas_to_json_schema(schema: Any, version: str, request: bool = True) -> Any:
    """OpenAPI schema dialect → JSON Schema 2020-12 (see module docs); 3.1 schemas only lose doc keys."""
    if isinstance(schema, list):
        return [oas_to_json_schema(s, version, request) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: oas_to_json_schema(v, version, request) for k, v in schema.items() if k not in DROPPED_KEYS}
    if "properties" in schema and isinstance(schema["properties"], dict):
        props = {k: oas_to_json_schema(v, version, request) for k, v in schema["properties"].items()}
        if request:  # readOnly properties are set by the server, never sent
            hidden = [k for k, v in schema["properties"].items() if isinstance(v, dict) and v.get("readOnly") is True]
            props = {k: v for k, v in props.items() if k not in hidden}
            if isinstance(out.get("required"), list):
                out["required"] = [r for r in out["required"] if r not in hidden]
        out["properties"] = props
    if version.startswith("3.0"):
        if out.pop("nullable", False) is True and "type" in out:
            out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
            if isinstance(out.get("enum"), list) and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]  # a nullable enum admits null (OpenAPI 3.0.3)
        for bound in ("Minimum", "Maximum"):
            flag = out.get(f"exclusive{bound}")
            if isinstance(flag, bool):
                limit = out.pop(bound.lower(), None)
                out.pop(f"exclusive{bound}")
                if flag and limit is not None:
                    out[f"exclusive{bound}"] = limit
                elif limit is not None:
                    out[bound.lower()] = limit
    return out


def snake_name(text: str) -> str:
    """``listPets`` / ``get-pet.by-id`` / ``GET /pets/{id}`` → ``list_pets`` / ``get_pet_by_id`` / ``get_pets_id``."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", text)
    text = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()
    text = re.sub(r"_+", "_", text)
    if text and text[0].isdigit():
        text = "op_" + text
    return text[:64].rstrip("_")


def _media_schema(body: dict[str, Any], warnings: list[str]) -> tuple[Any, str | None, str | None]:
    """``(schema, problem, media type)`` of a request body: JSON first, then form fields."""
    content = body.get("content") or {}
    if not isinstance(content, dict) or not content:
        return None, "request body has no content", None
    for media, spec in content.items():
        if JSON_MEDIA.match(str(media)) and isinstance(spec, dict) and "schema" in spec:
            return spec["schema"], None, str(media)
    for media, spec in content.items():
        if isinstance(spec, dict) and "schema" in spec and str(media) in (
                "application/x-www-form-urlencoded", "multipart/form-data"):
            warnings.append(f"request body {media} taken as JSON fields")
            return spec["schema"], None, str(media)
    return None, f"unsupported request body media type(s): {', '.join(map(str, content))}", None


def _operation(doc: dict[str, Any], path: str, method: str, item: dict[str, Any], op: dict[str, Any],
               registry: Registry, base_uri: str, version: str, topic: str, spec_file: str | None = None) -> Candidate:
    key = f"openapi:{method.upper()} {path}"
    op_id = oid if isinstance(oid := op.get("operationId"), str) and oid else None
    name = op_id or snake_name(f"{method} {path}")
    cand = Candidate(key=key, name=name or None, topic=topic, summary=_text(op.get("summary")),
                     description=_text(op.get("description")), deprecated=op.get("deprecated") is True)
    if name != op_id:
        cand.warnings.append(f"no operationId: name {name!r} derived from {method.upper()} {path}")
    tiers = op.get("x-fabrika-tiers")
    cand.tiers = tiers if isinstance(tiers, list) else None
    try:
        shared = resolve_refs(item.get("parameters") or [], registry, base_uri, cand.warnings)
        own = resolve_refs(op.get("parameters") or [], registry, base_uri, cand.warnings)
        body = resolve_refs(op.get("requestBody"), registry, base_uri, cand.warnings) if op.get("requestBody") else None
    except ValueError as exc:
        cand.error = str(exc)
        return cand
    params: dict[tuple[str, str], dict[str, Any]] = {}
    for p in [*shared, *own]:  # the operation's own parameters override the path item's
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or p.get("in") not in (
                "path", "query", "header", "cookie"):
            cand.error = f"invalid_parameter: {json.dumps(p, ensure_ascii=False)[:120]}"
            return cand
        params[(p["name"], p["in"])] = p
    props: dict[str, Any] = {}
    required: list[str] = []
    locations = {name: where for (name, where) in params}
    styles = {name: [p.get("style", DEFAULT_STYLES[where]), p.get("explode", p.get("style", DEFAULT_STYLES[where])
                                                                  == "form")]
              for (name, where), p in params.items() if "style" in p or "explode" in p}
    body_kind: str | None = None
    media: str | None = None
    for (name, where), p in params.items():
        if where in ("header", "cookie"):
            cand.warnings.append(f"{where} parameter {name!r} left out")
            continue
        schema = p.get("schema")
        if schema is None and isinstance(p.get("content"), dict) and p["content"]:
            schema = next(iter(p["content"].values())).get("schema")
        if not isinstance(schema, dict):
            cand.error = f"invalid_parameter: {name!r} has no schema"
            return cand
        schema = oas_to_json_schema(schema, version)
        if _text(p.get("description")) and not schema.get("description"):
            schema = {**schema, "description": _text(p.get("description"))}
        props[name] = schema
        if p.get("required") is True or where == "path":
            required.append(name)
    if body is not None:
        schema, problem, media = _media_schema(body, cand.warnings)
        if problem:
            if body.get("required") is True:
                cand.error = f"unsupported_body: {problem}"
                return cand
            cand.warnings.append(f"optional body left out: {problem}")
        else:
            schema = oas_to_json_schema(schema, version)
            body_props = schema.get("properties") if isinstance(schema, dict) else None
            mergeable = (isinstance(body_props, dict) and isinstance(schema, dict)
                         and schema.get("type", "object") == "object" and not (set(body_props) & set(props)))
            if mergeable and isinstance(body_props, dict) and isinstance(schema, dict):
                body_kind = "merged"
                props.update(body_props)
                if body.get("required") is True:
                    required += [r for r in schema.get("required") or [] if r in body_props]
            else:
                if isinstance(body_props, dict) and set(body_props) & set(props):
                    cand.warnings.append("body fields clash with parameters: body kept under 'body'")
                body_kind = "wrapped"
                props["body"] = schema
                if body.get("required") is True:
                    required.append("body")
    cand.parameters = {"type": "object", "properties": props, **({"required": required} if required else {})}
    cand.operation = Operation(method=method, path=path, params=locations, body=body_kind,
                               media=media if body_kind else None, spec=spec_file, styles=styles).to_dict()
    return _clean(cand)


def openapi_candidates(doc: dict[str, Any], source_name: str, group_by: str = "tag",
                       base_dir: Path | None = None, uri: str | None = None) -> list[Candidate]:
    """One candidate per operation, in document order; the topic is its first tag (or the API's title)."""
    version = str(doc.get("openapi"))
    if not version.startswith("3."):
        raise InputError(f"OpenAPI version {version!r} is not supported (3.0 or 3.1)")
    info: dict[str, Any] = i if isinstance(i := doc.get("info"), dict) else {}
    title = _text(info.get("title")) or source_name
    tag_docs = {t.get("name"): _text(t.get("description")) for t in doc.get("tags") or [] if isinstance(t, dict)}
    base_uri = uri or "urn:fabrika:openapi"
    registry = _registry(doc, base_uri, base_dir)
    spec_file = _file_of(uri)
    out: list[Candidate] = []
    for path, item in (doc.get("paths") or {}).items():
        if not isinstance(item, dict):
            continue
        if "$ref" in item:
            try:
                item = resolve_refs(item, registry, base_uri, [])
            except ValueError as exc:
                out.append(Candidate(key=f"openapi:{path}", name=None, topic=title, error=str(exc)))
                continue
        for method in METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            tags = [t for t in op.get("tags") or [] if isinstance(t, str)]
            topic = tags[0] if tags and group_by == "tag" else title
            cand = _operation(doc, path, method, item, op, registry, base_uri, version, topic, spec_file)
            cand.topic_description = tag_docs.get(topic, "") or _text(info.get("description"))
            out.append(cand)
    return out


def _file_of(uri: str | None) -> str | None:
    """The local path of a ``file:`` URI (where the spec lives, recorded for the mock), else ``None``."""
    if not uri or not uri.startswith("file:"):
        return None
    from urllib.parse import unquote, urlparse

    return str(Path(unquote(urlparse(uri).path)))


def candidates_from(doc: Any, fmt: str, source_name: str, *, group_by: str = "tag", base_dir: Path | None = None,
                    uri: str | None = None) -> list[Candidate]:
    """The candidates of a loaded document (``fmt`` ``auto`` detects it)."""
    fmt = detect_format(doc) if fmt == "auto" else fmt
    if fmt == "openapi":
        if not isinstance(doc, dict):
            raise InputError("an OpenAPI document must be an object")
        return openapi_candidates(doc, source_name, group_by, base_dir, uri)
    if fmt == "mcp":
        server = doc.get("server") if isinstance(doc, dict) else None
        return mcp_candidates(doc, str(server or source_name))
    return openai_candidates(doc, source_name)


def duplicate_names(cands: Iterable[Candidate]) -> dict[int, str]:
    """Index → key of the first candidate with the same name (later ones are duplicates)."""
    first: dict[str, str] = {}
    dups: dict[int, str] = {}
    for i, c in enumerate(cands):
        if c.name is None or c.error:
            continue
        if c.name in first:
            dups[i] = first[c.name]
        else:
            first[c.name] = c.key
    return dups
