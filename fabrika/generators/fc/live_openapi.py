"""Generated calls to OpenAPI tools executed as the HTTP requests their operations define.

:class:`OpenApiExecutor` turns a call ``(name, arguments)`` into ``METHOD base_url + path``: path
parameters substituted (percent-encoded); query, path and header parameters serialised by their
``style``/``explode`` (the query's default ``form`` + explode repeats the key for arrays;
``deepObject`` gives ``name[key]=v``; ``pipeDelimited``, ``spaceDelimited``, ``label`` and
``matrix`` too; booleans are ``true``/``false``); cookie parameters as cookies; and the rest as the
request body — the arguments that are the body's properties (``merged``) or the ``body`` argument
(``wrapped``), JSON or form-encoded as the operation's media type says. Where each argument goes
comes from the :class:`~fabrika.generators.fc.tool_sources.Operation` that ``fc.tools_import``
records in ``operations.json``; the tool schema models see is not involved.

Verdicts follow the failure taxonomy (see :mod:`fabrika.generators.fc.call_executor`):

* 2xx/3xx: accepted; other 4xx: refused with the server's reason (``400: Invalid query parameter…``);
  a call that cannot be put on the wire (a path parameter missing, an argument the operation has no
  place for, a tool with no operation) is refused without a request, with the reason;
* 5xx, 408, 425, 429, a timeout or a broken connection: :class:`~fabrika.errors.TransientError`
  (the item stays pending, retried next run, never a row);
* 401/403: the server refused the credentials, which says nothing about the call:
  :class:`~fabrika.errors.StageConfigError` (exit 2) naming ``openapi.headers``.

:class:`MockedOpenApi` runs one :class:`~fabrika.generators.fc.openapi_mock.OpenApiMock` per spec
file and routes each call to its spec's mock through an :class:`OpenApiExecutor`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from fabrika.errors import InputError, StageConfigError, TransientError
from fabrika.generators.fc.openapi_mock import SPEC_ERROR_HEADER, Fault, OpenApiMock
from fabrika.generators.fc.tool_sources import CallVerdict, Operation

#: Statuses that are the server's load or mood, not a verdict on the call.
TRANSIENT_STATUSES = frozenset({408, 425, 429})
#: Statuses that refuse the client's credentials (a configuration problem, not the call's).
AUTH_STATUSES = frozenset({401, 403})
DETAIL_CHARS = 300


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _query_pairs(name: str, value: Any, style: str = "form", explode: bool = True) -> list[tuple[str, str]]:
    """A query parameter as ``(key, value)`` pairs, by its ``style``/``explode`` (OpenAPI 3 "Style Values")."""
    if value is None:
        return []
    if isinstance(value, dict):
        items = [(k, v) for k, v in value.items() if v is not None]
        if style == "deepObject":
            return [(f"{name}[{k}]", _text(v)) for k, v in items]
        if explode:  # form + explode: each property is its own pair
            return [(k, _text(v)) for k, v in items]
        return [(name, ",".join(f"{k},{_text(v)}" for k, v in items))]
    if isinstance(value, list):
        values = [_text(v) for v in value if v is not None]
        if explode:
            return [(name, v) for v in values]
        sep = {"spaceDelimited": " ", "pipeDelimited": "|"}.get(style, ",")
        return [(name, sep.join(values))]
    return [(name, _text(value))]


def _simple(value: Any, style: str = "simple", explode: bool = False, name: str = "") -> str:
    """A path or header parameter's text by its style: ``simple`` (``a,b``; ``k,v`` or ``k=v`` exploded),
    ``label`` (``.a.b``), ``matrix`` (``;name=a,b``)."""
    if isinstance(value, dict):
        parts = [f"{k}={_text(v)}" if explode else f"{k},{_text(v)}" for k, v in value.items()]
    elif isinstance(value, list):
        parts = [_text(v) for v in value]
    else:
        parts = [_text(value)]
    if style == "label":
        return "." + ("." if explode else ",").join(parts)
    if style == "matrix":
        if not explode:
            return f";{name}=" + ",".join(parts)
        if isinstance(value, dict):
            return "".join(f";{p}" for p in parts)
        return "".join(f";{name}={p}" for p in parts)
    return ",".join(parts)


class HttpCall:
    """One call as an HTTP request, or the reason it cannot be one (``problem``)."""

    def __init__(self, op: Operation, arguments: dict[str, Any]) -> None:
        self.op = op
        self.method = op.method.upper()
        self.problem: str | None = None
        self.query: list[tuple[str, str]] = []
        self.headers: dict[str, str] = {}
        self.cookies: dict[str, str] = {}
        self.body: Any = None
        path = op.path
        rest = dict(arguments)
        for name, where in op.params.items():
            style, explode = (op.styles.get(name) or [None, None])[:2]
            if where == "path":
                if rest.get(name) is None:
                    self.problem = f"path parameter {name!r} missing ({self.method} {op.path})"
                    return
                text = _simple(rest.pop(name), style or "simple", bool(explode), name)
                path = path.replace("{" + name + "}", quote(text, safe=",;=." if style else ","))
            elif name in rest:
                value = rest.pop(name)
                if where == "query":
                    self.query += _query_pairs(name, value, style or "form", True if explode is None else bool(explode))
                elif value is not None and where == "header":
                    self.headers[name] = _simple(value, "simple", bool(explode))
                elif value is not None:
                    self.cookies[name] = _text(value)
        self.path = path
        if op.body == "wrapped":
            self.body = rest.pop("body", None)
        elif op.body == "merged" and rest:
            self.body, rest = rest, {}
        if rest:
            self.problem = (f"argument(s) {', '.join(map(repr, sorted(rest)))} not a parameter of "
                            f"{self.method} {op.path}")

    def request_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"params": self.query, "headers": dict(self.headers)}
        if self.cookies:
            kw["cookies"] = self.cookies
        if self.body is None:
            return kw
        media = (self.op.media or "application/json").split(";")[0].strip()
        if media in ("application/x-www-form-urlencoded", "multipart/form-data") and isinstance(self.body, dict):
            form = aiohttp.FormData(quote_fields=True)
            for k, v in self.body.items():
                for item in v if isinstance(v, list) else [v]:
                    if item is not None:
                        form.add_field(k, _text(item))
            if media == "multipart/form-data":
                form._is_multipart = True  # aiohttp: send multipart even without files
            kw["data"] = form
        else:
            kw["data"] = json.dumps(self.body, ensure_ascii=False).encode("utf-8")
            kw["headers"]["Content-Type"] = media if "json" in media else "application/json"
        return kw


def _detail(status: int, text: str) -> str:
    """The server's reason from an error body: its ``error``/``detail``/``message``/``title`` field, or the text."""
    reason = text.strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("error", "detail", "message", "title", "errors"):
            if data.get(key):
                reason = _text(data[key])
                break
    return f"{status}: {reason}"[:DETAIL_CHARS] if reason else f"{status}"


class OpenApiExecutor:
    """Executes calls against one base URL (a real server, or a mock's address); a :class:`CallExecutor`."""

    def __init__(self, operations: dict[str, Operation], base_url: str, *, headers: dict[str, str] | None = None,
                 timeout_s: float = 30.0, what: str = "OpenAPI server") -> None:
        self.operations = operations
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.what = what
        self._http: aiohttp.ClientSession | None = None

    @property
    def label(self) -> str:
        return self.base_url

    async def start(self) -> "OpenApiExecutor":
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                                           headers=self.headers)
        try:  # any HTTP answer means it is there; only no answer at all is a stop
            async with self._http.get(self.base_url + "/", allow_redirects=False) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            await self.close()
            raise InputError(f"{self.what} {self.base_url} is not reachable ({type(exc).__name__}: "
                             f"{str(exc)[:120]})") from exc
        return self

    async def call(self, name: str, arguments: dict[str, Any]) -> CallVerdict:
        op = self.operations.get(name)
        if op is None:
            return CallVerdict(name, False, f"unknown tool: the spec has no operation {name!r}")
        http = HttpCall(op, arguments)
        if http.problem:
            return CallVerdict(name, False, f"not sent: {http.problem}")
        if self._http is None:
            raise TransientError(f"{self.what} {self.base_url}: the executor is not started")
        where = f"{http.method} {http.path}"
        try:
            async with self._http.request(http.method, self.base_url + http.path, allow_redirects=False,
                                          **http.request_kwargs()) as resp:
                status = resp.status
                text = await resp.text(errors="replace")
                spec_error = resp.headers.get(SPEC_ERROR_HEADER) == "spec-error"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransientError(f"{self.what} {self.base_url}: {where} failed ({type(exc).__name__}: "
                                 f"{str(exc)[:120]})") from exc
        if spec_error:  # the mock cannot check this operation: the spec's problem, the same on every rerun
            raise StageConfigError(f"{self.what} {self.base_url}: {_detail(status, text)}",
                                   fix="fix that operation in the OpenAPI document, or leave it out of the import")
        if status >= 500 or status in TRANSIENT_STATUSES:
            raise TransientError(f"{self.what} {self.base_url} answered {status} to {where}")
        if status in AUTH_STATUSES:
            raise StageConfigError(f"{self.what} {self.base_url} answered {status} to {where}: it refused the "
                                   "credentials, which says nothing about the call",
                                   fix="set live_calls openapi.headers (e.g. Authorization) for this server")
        if status >= 400:
            return CallVerdict(name, False, _detail(status, text))
        return CallVerdict(name, True, text[:DETAIL_CHARS])

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def __aenter__(self) -> "OpenApiExecutor":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class MockedOpenApi:
    """One :class:`OpenApiMock` per spec file of ``operations``, each call sent to its spec's mock."""

    def __init__(self, operations: dict[str, Operation], *, headers: dict[str, str] | None = None,
                 timeout_s: float = 30.0, fault: Fault | None = None) -> None:
        self.operations = operations
        self.headers = headers
        self.timeout_s = timeout_s
        self.fault = fault
        self.mocks: dict[str, OpenApiMock] = {}
        self._executors: dict[str, OpenApiExecutor] = {}

    @property
    def label(self) -> str:
        return "mock of " + ", ".join(sorted(self.mocks) or sorted({op.spec or "?" for op in self.operations.values()}))

    async def start(self) -> "MockedOpenApi":
        specs = sorted({op.spec for op in self.operations.values() if op.spec})
        if not specs:
            raise InputError("no OpenAPI operation names its spec file, so there is nothing to mock")
        try:
            for spec in specs:
                path = Path(spec)
                if not path.is_file():
                    raise InputError(f"the OpenAPI document {spec} cannot be served: the file is gone")
                try:
                    mock = await OpenApiMock(path, fault=self.fault).start()
                except InputError as exc:
                    raise InputError(f"{spec}: {exc}") from exc
                self.mocks[spec] = mock
                ops = {n: op for n, op in self.operations.items() if op.spec == spec}
                self._executors[spec] = await OpenApiExecutor(ops, mock.base_url, headers=self.headers,
                                                              timeout_s=self.timeout_s, what="OpenAPI mock").start()
        except BaseException:
            await self.close()
            raise
        return self

    async def call(self, name: str, arguments: dict[str, Any]) -> CallVerdict:
        op = self.operations.get(name)
        executor = self._executors.get(op.spec or "") if op is not None else None
        if executor is None:
            return CallVerdict(name, False, f"unknown tool: the spec has no operation {name!r}")
        return await executor.call(name, arguments)

    async def close(self) -> None:
        executors, self._executors = list(self._executors.values()), {}
        mocks = list(self.mocks.values())  # kept after close: their request logs stay readable
        await asyncio.gather(*(e.close() for e in executors), return_exceptions=True)
        await asyncio.gather(*(m.close() for m in mocks), return_exceptions=True)

    async def __aenter__(self) -> "MockedOpenApi":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
