"""A loopback HTTP mock of an OpenAPI 3.0/3.1 document: validates each request, answers with the spec's example.

``fc.live_calls`` with ``openapi: {mock: true}`` sends every generated call to it as the HTTP
request the operation defines. The mock validates path, query, header and cookie parameters and
the request body with ``openapi-core`` — the library made for exactly this (it deserialises
parameters by their ``style``/``explode``, casts them to the schema's types and validates them with
``openapi-schema-validator``, the OpenAPI dialects of JSON Schema), so fabrika serialises the call
and an independent implementation of the spec judges it. A request the spec refuses gets ``400``
with the reasons (``{"error": ..., "errors": [...]}``); an unknown path ``404``, a method the path
lacks ``405``. A valid one gets the operation's first 2xx response: its ``example``, the first of its
``examples``, the schema's example, or a value generated from the response schema
(:func:`example_value`).

A document with mistakes no request touches (a string ``default`` of a boolean, a dangling ``$ref``
in one operation) is served all the same (:attr:`OpenApiMock.spec_problems` says what
openapi-spec-validator found); a call that reaches an operation the mock cannot check gets a 500
marked with :data:`SPEC_ERROR_HEADER`, which the executor turns into a configuration stop naming the
operation. A file that is not OpenAPI 3.0/3.1 or has no operations cannot be served at all.

What it does not check, on purpose: security requirements (a model never learns the user's
credentials) and header or cookie parameters the import left out of the tool's schema (the model
cannot fill them: the mock treats them as optional). Servers of the document are replaced by the
mock's own address, so paths are served at the root (``GET /pet/{petId}``).
"""

from __future__ import annotations

import copy
import json
import re
from collections import deque
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from fabrika.errors import InputError
from fabrika.generators.fc.tool_sources import METHODS, _registry, load_document, resolve_refs

#: ``(method, path) -> status`` to answer instead of serving (tests inject 5xx with it); ``None`` serves.
Fault = Callable[[str, str], "int | None"]
#: How many received requests :attr:`OpenApiMock.requests` keeps.
KEPT_REQUESTS = 1000
#: Set on the 500 the mock answers when an operation of the spec cannot be checked (a spec problem, exit 2).
SPEC_ERROR_HEADER = "X-Fabrika-Mock"
JSON_TYPES = re.compile(r"^application/(.+\+)?json(;.*)?$")
_FORMATS = {"date-time": "2026-01-15T10:00:00Z", "date": "2026-01-15", "time": "10:00:00Z",
            "email": "user@example.com", "uri": "https://example.com/", "url": "https://example.com/",
            "uuid": "123e4567-e89b-12d3-a456-426614174000", "ipv4": "192.0.2.1", "ipv6": "2001:db8::1",
            "hostname": "example.com", "byte": "aGVsbG8=", "binary": "hello", "password": "secret123"}


def example_value(schema: Any, depth: int = 0) -> Any:
    """A value ``schema`` (JSON Schema / OpenAPI, ``$ref`` s resolved) admits: its example, default or enum
    when it has one, otherwise built from its type and bounds. Used for the mock's answers (and by tests
    to write calls that must pass)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return next((v for v in schema["enum"] if v is not None), schema["enum"][0])
    if "example" in schema:
        return schema["example"]
    if isinstance(schema.get("examples"), list) and schema["examples"]:
        return schema["examples"][0]
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = example_value(part, depth)
            if isinstance(value, dict):
                merged.update(value)
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        own = example_value(rest, depth) if rest.get("properties") else None
        return {**merged, **(own if isinstance(own, dict) else {})}
    for key in ("oneOf", "anyOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            options = [s for s in schema[key] if not (isinstance(s, dict) and s.get("type") == "null")]
            return example_value((options or schema[key])[0], depth)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and isinstance(schema.get("properties"), dict):
        kind = "object"
    if kind == "object":
        props: dict[str, Any] = p if isinstance(p := schema.get("properties"), dict) else {}
        required = set(schema.get("required") or [])
        return {k: example_value(v, depth + 1) for k, v in props.items()
                if k in required or depth < 1}
    if kind == "array":
        item = example_value(schema.get("items"), depth + 1)
        n = max(1, int(schema.get("minItems") or 1))
        if schema.get("uniqueItems") and n > 1 and isinstance(item, (int, float)) and not isinstance(item, bool):
            return [item + i for i in range(n)]
        return [item] * n
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "string" or kind is None:
        text = _FORMATS.get(str(schema.get("format")), "string")
        low = int(schema.get("minLength") or 0)
        if len(text) < low:
            text = text + "x" * (low - len(text))
        high = schema.get("maxLength")
        return text[:high] if isinstance(high, int) and high >= max(low, 1) else text
    return None


def _number(schema: dict[str, Any], integer: bool) -> int | float:
    low = schema.get("minimum")
    xlow = schema.get("exclusiveMinimum")
    high = schema.get("maximum")
    value: float = 1
    if isinstance(low, (int, float)) and not isinstance(low, bool):
        value = low
    elif isinstance(xlow, (int, float)) and not isinstance(xlow, bool):
        value = xlow + 1
    if isinstance(high, (int, float)) and not isinstance(high, bool) and value > high:
        value = high
    step = schema.get("multipleOf")
    if isinstance(step, (int, float)) and step > 0:
        value = step * max(1, round(value / step))
    return int(value) if integer else float(value)


def load_spec(path: Path) -> dict[str, Any]:
    """The OpenAPI 3.0/3.1 document at ``path``; :class:`InputError` naming the file when it is none."""
    doc = load_document(path)
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith(("3.0", "3.1")):
        raise InputError(f"{path}: not an OpenAPI 3.0/3.1 document (no 'openapi: 3.x' key)")
    return doc


def _relax_hidden_parameters(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` whose header and cookie parameters are optional and whose servers are dropped."""
    out = copy.deepcopy(doc)

    def relax(params: Any) -> None:
        for p in params if isinstance(params, list) else params.values() if isinstance(params, dict) else []:
            if isinstance(p, dict) and p.get("in") in ("header", "cookie"):
                p["required"] = False

    relax((out.get("components") or {}).get("parameters"))
    for item in (out.get("paths") or {}).values():
        if not isinstance(item, dict):
            continue
        item.pop("servers", None)
        relax(item.get("parameters"))
        for method in METHODS:
            if isinstance(item.get(method), dict):
                item[method].pop("servers", None)
                relax(item[method].get("parameters"))
    return out


def _route(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}/]+\})", template)
    return re.compile("^" + "".join("[^/]+" if p.startswith("{") and p.endswith("}") else re.escape(p)
                                    for p in parts) + "/?$")


class _Request:
    """The request as openapi-core's ``Request`` protocol reads it (host with the port, unlike its aiohttp adapter)."""

    def __init__(self, request: web.Request, body: bytes | None, host_url: str) -> None:
        from openapi_core.datatypes import RequestParameters

        self.parameters = RequestParameters(query=request.query, header=request.headers, cookie=request.cookies)
        self.host_url = host_url
        self.path = request.path
        self.method = request.method.lower()
        self.body = body
        self.content_type = request.headers.get("Content-Type", "")


def _reason(exc: BaseException) -> str:
    """``Invalid query parameter: status: 'gone' is not one of [...]`` — the error with its schema errors
    (each with where in the value it is, ``5 is not of type 'string' (at name)``)."""
    cause = exc.__cause__
    head = str(exc).split(": Value ")[0]  # the body error repeats the whole value; the details say it better
    details = []
    for err in getattr(cause, "schema_errors", None) or ():
        where = "/".join(map(str, getattr(err, "absolute_path", ()) or ()))
        details.append(str(getattr(err, "message", err)) + (f" (at {where})" if where else ""))
    if not details and cause is not None and str(cause) and str(cause) not in head:
        details = [str(cause)]
    return f"{head}: {'; '.join(details)}" if details else head


class OpenApiMock:
    """A loopback HTTP server for one OpenAPI document (see the module docs); ``async with`` starts and stops it.

    ``requests`` keeps the last requests it received (``method``, ``path``, ``query``, ``body``) for tests
    and reports.
    """

    def __init__(self, spec: Path | dict[str, Any], *, base_uri: str = "", fault: Fault | None = None) -> None:
        if isinstance(spec, Path):
            base_uri = base_uri or spec.resolve().as_uri()
            spec = load_spec(spec)
        self.doc = spec
        self.base_uri = base_uri
        self.fault = fault
        #: the last :data:`KEPT_REQUESTS` requests (bounded: a long run must not grow the mock's memory)
        self.requests: deque[dict[str, Any]] = deque(maxlen=KEPT_REQUESTS)
        #: what openapi-spec-validator found wrong with the document (it is served all the same)
        self.spec_problems: list[str] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        version = str(spec.get("openapi", ""))
        try:
            from openapi_core import OpenAPI
            from openapi_core.validation.request import validators as v
        except ImportError as exc:
            raise InputError("the OpenAPI mock needs openapi-core: pip install 'fabrika[openapi]'") from exc
        pair = ((v.V31RequestParametersValidator, v.V31RequestBodyValidator) if version.startswith("3.1")
                else (v.V30RequestParametersValidator, v.V30RequestBodyValidator))
        self._validator_classes = pair
        self._openapi_cls = OpenAPI
        self._routes = sorted(
            ((path, _route(path), item) for path, item in (spec.get("paths") or {}).items() if isinstance(item, dict)),
            key=lambda r: (r[0].count("{"), -len(r[0])))  # /pet/findByStatus before /pet/{petId}
        self._registry = _registry(spec, base_uri or "urn:fabrika:mock", None)

    async def start(self) -> "OpenApiMock":
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._serve)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        doc = _relax_hidden_parameters(self.doc)
        doc["servers"] = [{"url": self.base_url}]
        try:
            api = self._build(doc)
        except Exception as exc:  # noqa: BLE001 - a spec openapi-core cannot read cannot be served
            await self.close()
            raise InputError(f"the OpenAPI document cannot be served: {type(exc).__name__}: {str(exc)[:200]}") from exc
        self._validators = [cls(api.spec) for cls in self._validator_classes]
        from openapi_core.validation.request.exceptions import MissingRequestBody

        self._no_body = MissingRequestBody  # an optional body left out: not an error (the body validator says it is)
        return self

    def _build(self, doc: dict[str, Any]) -> Any:
        """openapi-core's view of ``doc``. A document that breaks the OpenAPI schema only in places no request
        touches (a string ``default`` of a boolean, a dangling ``$ref`` in one operation) is still served, the
        problem kept in :attr:`spec_problems`: each operation is checked when a call reaches it."""
        paths = doc.get("paths")
        items = list(paths.values()) if isinstance(paths, dict) else []
        if not any(isinstance(item, dict) and any(isinstance(item.get(m), dict) for m in METHODS) for item in items):
            raise InputError("it has no operations under 'paths'")
        from openapi_core import Config

        try:
            return self._openapi_cls.from_dict(doc, base_uri=self.base_uri)
        except Exception as exc:  # noqa: BLE001 - openapi-spec-validator's verdict; served anyway, see above
            self.spec_problems.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        unchecked: dict[str, Any] = {"spec_validator_cls": None}  # openapi-core's "skip the spec check"
        return self._openapi_cls.from_dict(doc, base_uri=self.base_uri, config=Config(**unchecked))

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> "OpenApiMock":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _operation(self, method: str, path: str) -> tuple[str, dict[str, Any]] | int:
        """``(template, operation)`` serving ``method path``, else 404 (no such path) or 405 (not that method)."""
        found = False
        for template, pattern, item in self._routes:
            if pattern.match(path):
                found = True
                op = item.get(method)
                if isinstance(op, dict):
                    return template, op
        return 405 if found else 404

    async def _serve(self, request: web.Request) -> web.Response:
        body = await request.read()
        method = request.method.lower()
        self.requests.append({"method": request.method, "path": request.path,
                              "query": [[k, v] for k, v in request.query.items()], "body": body.decode("utf-8", "replace")})
        if self.fault is not None and (status := self.fault(request.method, request.path)) is not None:
            return web.json_response({"error": f"injected fault {status}"}, status=status)
        found = self._operation(method, request.path)
        if isinstance(found, int):
            what = "no operation at" if found == 404 else "method not allowed for"
            return web.json_response({"error": f"{what} {request.method} {request.path}"}, status=found)
        template, op = found
        req = _Request(request, body or None, self.base_url)
        try:
            errors = [_reason(e) for v in self._validators for e in v.iter_errors(req) if type(e) is not self._no_body]
        except Exception as exc:  # noqa: BLE001 - the operation itself is broken (a dangling $ref): not the call's fault
            return web.json_response({"error": f"the spec's {request.method} {template} cannot be checked: "
                                      f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"},
                                     status=500, headers={SPEC_ERROR_HEADER: "spec-error"})
        if errors:
            return web.json_response({"error": "; ".join(errors), "errors": errors}, status=400)
        return self._answer(op)

    def _answer(self, op: dict[str, Any]) -> web.Response:
        raw = op.get("responses")
        responses: dict[str, Any] = {str(k): v for k, v in raw.items()} if isinstance(raw, dict) else {}
        codes = sorted(responses)
        code = next((c for c in codes if c.startswith("2")), "default" if "default" in responses else None)
        if code is None:
            return web.json_response({}, status=200)
        status = int(code) if code.isdigit() else 200
        try:
            resp = resolve_refs(responses[code], self._registry, self.base_uri or "urn:fabrika:mock", [])
        except ValueError:
            resp = {}
        content = resp.get("content") if isinstance(resp, dict) else None
        if not isinstance(content, dict) or not content or status == 204:
            return web.Response(status=status)
        media, spec = next(((m, s) for m, s in content.items() if JSON_TYPES.match(str(m))),
                           next(iter(content.items())))
        spec = spec if isinstance(spec, dict) else {}
        if "example" in spec:
            value = spec["example"]
        elif isinstance(spec.get("examples"), dict) and spec["examples"]:
            first = next(iter(spec["examples"].values()))
            value = first.get("value") if isinstance(first, dict) else first
        else:
            value = example_value(spec.get("schema"))
        if JSON_TYPES.match(str(media)):
            return web.Response(status=status, text=json.dumps(value, ensure_ascii=False), content_type="application/json")
        return web.Response(status=status, text="" if value is None else str(value), content_type="text/plain")
