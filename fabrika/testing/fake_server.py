"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests and benches.

It speaks ``POST /v1/chat/completions`` (tool calls, ``n``, usage,
``response_format``) and ``GET /v1/models`` over real sockets, so the real
``openai`` client, retries, timeouts and connection pools are exercised.

Usage (sync or async tests alike — the server runs on its own thread and loop)::

    from fabrika.testing import FakeOpenAIServer

    with FakeOpenAIServer(latency_ms=0) as srv:
        srv.script(match="Ты — планировщик", responses=['{"steps": []}'], name="planner")
        srv.script(tag="fc.user", responder=lambda req: "Привет!")
        srv.faults(rate=0.3, kinds=["rate_limit", "server"], seed=1)   # seeded, per request+attempt
        srv.faults(match="сломай меня", kind="bad_args", times=1)       # one specific request
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x")
        ...
        assert srv.served == 10 and srv.counts["faults"]["rate_limit"] == 2

Scripts are tried in registration order; ``match`` is a substring of any
message content (or a callable on the request JSON), ``tag`` a prefix of the
``x-fabrika-tag`` header that fabrika's engine sends. A script answers from its
``responses`` list in order (``cycle=True`` repeats it; otherwise an exhausted
script stops matching) or from ``responder(request_json)`` every time.

A response spec is a ``str`` (text), or a dict with any of ``content``,
``tool_calls`` (``[{"name", "arguments": dict | str}]``), ``finish_reason``,
``choices`` (a list of specs, for ``n > 1``), ``usage``, ``latency_ms``,
``fault`` (one of :data:`FAULT_KINDS`) and ``retry_after``. Without a matching
script the default answer follows the ``sim`` fallback with ``"[fake]"`` marks
(schema-valid JSON for ``response_format``, a schema-valid tool call when tools
are given, else short text).

Faults (:data:`FAULT_KINDS`): ``rate_limit`` (429 + ``Retry-After``),
``server`` (500), ``hang`` (no answer; the client must time out),
``bad_request`` (400), ``auth`` (401), ``not_found`` (404), ``context_length``
(400, ``context_length_exceeded``), and 200-answers with bad content:
``truncated_json``, ``length`` (``finish_reason="length"``), ``unknown_tool``,
``bad_args`` (arguments breaking the schema), ``wrong_language`` (English text).
Rate faults are decided by a hash of (seed, request body, attempt number), so
they are reproducible however requests interleave.

For benches run it as a process: ``python -m fabrika.testing.fake_server
--port 0 --latency-ms 200`` prints ``READY <port>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from fabrika.llm.schema_gen import generate_instance, response_format_schema, tool_name, tool_parameters
from fabrika.llm.sim import generic_choice
from fabrika.llm.types import ChatRequest
from fabrika.testing.http import HttpProtocol, HttpReply, HttpRequest

FAULT_KINDS: tuple[str, ...] = (
    "rate_limit", "server", "hang", "bad_request", "auth", "not_found", "context_length",
    "truncated_json", "length", "unknown_tool", "bad_args", "wrong_language",
)
RETRYABLE_FAULTS: tuple[str, ...] = ("rate_limit", "server")

Spec = Any  # str | dict | Callable[[dict], str | dict]
Matcher = str | Callable[[dict[str, Any]], bool] | None


@dataclass
class _Script:
    name: str
    match: Matcher
    tag: str | None
    responses: list[Spec] | None
    responder: Callable[[dict[str, Any]], Spec] | None
    cycle: bool
    latency_ms: float | None
    used: int = 0

    def exhausted(self) -> bool:
        return self.responses is not None and not self.cycle and self.used >= len(self.responses)

    def next_spec(self, req: dict[str, Any]) -> Spec:
        if self.responder is not None:
            self.used += 1
            return self.responder(req)
        assert self.responses is not None
        spec = self.responses[self.used % len(self.responses)]
        self.used += 1
        return spec


@dataclass
class _FaultRule:
    kind: str
    match: Matcher
    tag: str | None
    times: int | None
    retry_after: float | None
    hits: int = 0


@dataclass
class _RateFaults:
    rate: float
    kinds: tuple[str, ...]
    seed: int
    retry_after: float | None
    attempts: dict[str, int] = field(default_factory=dict)


def _contents(req: dict[str, Any]) -> Iterable[str]:
    for m in req.get("messages") or ():
        c = m.get("content")
        if isinstance(c, str):
            yield c
        elif isinstance(c, list):
            for part in c:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]


def _matches(match: Matcher, tag_prefix: str | None, req: dict[str, Any], tag: str) -> bool:
    if tag_prefix is not None and not tag.startswith(tag_prefix):
        return False
    if match is None:
        return True
    if callable(match):
        return bool(match(req))
    return any(match in c for c in _contents(req))


def _error_body(kind: str, message: str, code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": code, "param": None}}).encode()


class FakeOpenAIApp:
    """Routing, scripts, faults and counters; transport-free so it is easy to reason about."""

    def __init__(self, *, latency_ms: float = 0.0, model: str = "fake-model", seed: int = 0,
                 hang_s: float = 30.0, retry_after: float = 0.05, record: int = 10_000) -> None:
        self.latency_ms = latency_ms
        self.model = model
        self.seed = seed
        self.hang_s = hang_s
        self.retry_after = retry_after
        self.record_limit = record
        self._scripts: list[_Script] = []
        self._rules: list[_FaultRule] = []
        self._rate: _RateFaults | None = None
        self.requests: list[dict[str, Any]] = []
        self.reset_counts()

    # -- counters ---------------------------------------------------------
    def reset_counts(self) -> None:
        self.served = 0
        self.routes: Counter[str] = Counter()
        self.fault_counts: Counter[str] = Counter()
        self.status_counts: Counter[int] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = []

    def on_start(self) -> None:
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight

    def on_done(self) -> None:
        self.in_flight -= 1

    # -- configuration ----------------------------------------------------
    def script(self, *, match: Matcher = None, tag: str | None = None, responses: list[Spec] | None = None,
               responder: Callable[[dict[str, Any]], Spec] | None = None, name: str | None = None,
               cycle: bool = False, latency_ms: float | None = None) -> None:
        if (responses is None) == (responder is None):
            raise ValueError("script(): give exactly one of responses=[...] or responder=callable")
        if responses is not None and not responses:
            raise ValueError("script(responses=[]) is empty; give at least one response spec")
        listed = list(responses) if responses is not None else None
        self._scripts.append(_Script(name or f"script{len(self._scripts)}", match, tag, listed, responder,
                                     cycle, latency_ms))

    def faults(self, *, rate: float | None = None, kinds: Iterable[str] | None = None, seed: int = 0,
               match: Matcher = None, tag: str | None = None, kind: str | None = None,
               times: int | None = None, retry_after: float | None = None) -> None:
        if rate is not None:
            chosen = tuple(kinds or RETRYABLE_FAULTS)
            for k in chosen:
                _check_kind(k)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"faults(rate=...) must be in [0, 1], got {rate}")
            self._rate = _RateFaults(rate, chosen, seed, retry_after) if rate > 0 else None
        if kind is not None:
            _check_kind(kind)
            self._rules.append(_FaultRule(kind, match, tag, times, retry_after))
        elif rate is None:
            raise ValueError("faults(): give rate=... (with kinds=[...]) or kind=... (with match/tag/times)")

    def clear(self) -> None:
        """Drop all scripts and faults (counters stay; see :meth:`reset_counts`)."""
        self._scripts.clear()
        self._rules.clear()
        self._rate = None

    # -- handling ---------------------------------------------------------
    def handle(self, http: HttpRequest) -> HttpReply:
        path = http.path.split("?", 1)[0].rstrip("/")
        if http.method == "GET" and path.endswith("/models"):
            self._count("models", 200)
            body = {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "fabrika-fake"}]}
            return HttpReply(200, json.dumps(body).encode())
        if http.method != "POST" or not path.endswith("/chat/completions"):
            self._count("unknown_route", 404)
            return HttpReply(404, _error_body("not_found", f"no route {http.method} {http.path}"))
        try:
            req = json.loads(http.body)
        except ValueError:
            self._count("bad_json", 400)
            return HttpReply(400, _error_body("invalid_request_error", "request body is not JSON"))
        if len(self.requests) < self.record_limit:
            self.requests.append(req)
        tag = http.headers.get("x-fabrika-tag", "")
        delay = self.latency_ms
        fault, retry_after = self._fault_for(req, http.body, tag)
        route, spec = "default", None
        if fault is None:
            for s in self._scripts:
                if not s.exhausted() and _matches(s.match, s.tag, req, tag):
                    route, spec = s.name, s.next_spec(req)
                    if s.latency_ms is not None:
                        delay = s.latency_ms
                    break
            if isinstance(spec, dict) and spec.get("fault"):
                fault, retry_after = spec["fault"], spec.get("retry_after")
                _check_kind(fault)
            if isinstance(spec, dict) and spec.get("latency_ms") is not None:
                delay = float(spec["latency_ms"])
        if fault is not None:
            reply = self._fault_reply(fault, req, retry_after)
            self.fault_counts[fault] += 1
            route = f"fault:{fault}" if route == "default" else route
        else:
            reply = HttpReply(200, json.dumps(self._completion(req, spec), ensure_ascii=False).encode())
        self._count(route, reply.status)
        if reply.hang_s <= 0:
            reply.delay_s = delay / 1000.0
        return reply

    def _count(self, route: str, status: int) -> None:
        self.served += 1
        self.routes[route] += 1
        self.status_counts[status] += 1

    def _fault_for(self, req: dict[str, Any], body: bytes, tag: str) -> tuple[str | None, float | None]:
        for rule in self._rules:
            if (rule.times is None or rule.hits < rule.times) and _matches(rule.match, rule.tag, req, tag):
                rule.hits += 1
                return rule.kind, rule.retry_after
        rate = self._rate
        if rate is not None:
            digest = hashlib.sha1(body).hexdigest()
            attempt = rate.attempts.get(digest, 0)
            rate.attempts[digest] = attempt + 1
            h = hashlib.sha256(f"{rate.seed}:{digest}:{attempt}".encode()).digest()
            if int.from_bytes(h[:8], "big") / 2**64 < rate.rate:
                return rate.kinds[h[8] % len(rate.kinds)], rate.retry_after
        return None, None

    def _fault_reply(self, kind: str, req: dict[str, Any], retry_after: float | None) -> HttpReply:
        if kind == "rate_limit":
            ra = self.retry_after if retry_after is None else retry_after
            return HttpReply(429, _error_body("rate_limit_error", "fake: rate limited", "rate_limit_exceeded"),
                             {"Retry-After": f"{ra:g}"})
        if kind == "server":
            return HttpReply(500, _error_body("server_error", "fake: internal error"))
        if kind == "hang":
            return HttpReply(200, hang_s=self.hang_s)
        if kind == "bad_request":
            return HttpReply(400, _error_body("invalid_request_error", "fake: bad request"))
        if kind == "auth":
            return HttpReply(401, _error_body("invalid_request_error", "fake: invalid api key", "invalid_api_key"))
        if kind == "not_found":
            return HttpReply(404, _error_body("invalid_request_error", "fake: model not found", "model_not_found"))
        if kind == "context_length":
            return HttpReply(400, _error_body("invalid_request_error",
                                              "This model's maximum context length is 8192 tokens.",
                                              "context_length_exceeded"))
        rng = self._rng(req, kind)
        if kind == "truncated_json":
            schema = response_format_schema(req.get("response_format")) or {"type": "object", "properties": {
                "answer": {"type": "string"}}, "required": ["answer"]}
            text = json.dumps(generate_instance(schema, rng, marker="[fake]", all_optional=True), ensure_ascii=False)
            spec: dict[str, Any] = {"content": text[: max(1, len(text) // 2)]}
        elif kind == "length":
            spec = {"content": "[fake] Ответ обрывается на середине", "finish_reason": "length"}
        elif kind == "unknown_tool":
            spec = {"tool_calls": [{"name": "no_such_tool", "arguments": {"q": "[fake]"}}]}
        elif kind == "bad_args":
            tools = req.get("tools") or [{"type": "function", "function": {"name": "some_tool", "parameters": {}}}]
            tool = rng.choice(tools)
            spec = {"tool_calls": [{"name": tool_name(tool), "arguments": break_arguments(tool_parameters(tool), rng)}]}
        elif kind == "wrong_language":
            spec = {"content": "[fake] This answer is written in English on purpose, not in Russian."}
        else:  # pragma: no cover - _check_kind guards
            raise ValueError(kind)
        return HttpReply(200, json.dumps(self._completion(req, spec), ensure_ascii=False).encode())

    def _rng(self, req: dict[str, Any], salt: str) -> random.Random:
        blob = json.dumps(req, sort_keys=True, ensure_ascii=False)
        return random.Random(f"{self.seed}:{salt}:{hashlib.sha1(blob.encode()).hexdigest()}")

    def _choice(self, req: dict[str, Any], spec: Spec, index: int) -> dict[str, Any]:
        if callable(spec):
            spec = spec(req)
        if spec is None:
            tools = req.get("tools")
            creq = ChatRequest(messages=tuple(req.get("messages") or ()), tools=tuple(tools) if tools else None,
                               tool_choice=req.get("tool_choice"), response_format=req.get("response_format"))
            c = generic_choice(creq, self._rng(req, f"default:{index}"), marker="[fake]")
            spec = {"content": c.content, "finish_reason": c.finish_reason,
                    "tool_calls": [{"id": t["id"], "name": t["name"], "arguments": t["arguments"]} for t in c.tool_calls]}
        if isinstance(spec, str):
            spec = {"content": spec}
        calls = []
        for i, call in enumerate(spec.get("tool_calls") or ()):
            args = call.get("arguments", {})
            calls.append({"id": call.get("id") or f"call_{index}_{i}", "type": "function",
                          "function": {"name": call["name"],
                                       "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}})
        message: dict[str, Any] = {"role": "assistant", "content": spec.get("content")}
        if calls:
            message["tool_calls"] = calls
        finish = spec.get("finish_reason") or ("tool_calls" if calls else "stop")
        return {"index": index, "message": message, "finish_reason": finish, "logprobs": None}

    def _completion(self, req: dict[str, Any], spec: Spec) -> dict[str, Any]:
        n = int(req.get("n") or 1)
        if isinstance(spec, dict) and spec.get("choices"):
            specs = list(spec["choices"])
        else:
            specs = [spec] * n
        choices = [self._choice(req, s, i) for i, s in enumerate(specs)]
        usage = spec.get("usage") if isinstance(spec, dict) else None
        if usage is None:
            prompt = sum(len(c) for c in _contents(req)) // 4 + 1
            completion = sum(len(c["message"].get("content") or "") + len(json.dumps(c["message"].get("tool_calls") or ""))
                             for c in choices) // 4
            usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        return {"id": f"chatcmpl-fake{self.served}", "object": "chat.completion", "created": 0,
                "model": req.get("model") or self.model, "choices": choices, "usage": usage}


def break_arguments(schema: dict[str, Any], rng: random.Random) -> dict[str, Any] | list[int]:
    """Arguments that violate ``schema``: a required property gets a value of the wrong type."""
    args = generate_instance(schema, rng, marker="[fake]", all_optional=True)
    props = schema.get("properties") or {}
    required = list(schema.get("required") or props)
    if not isinstance(args, dict) or not required:
        return [1, 2, 3]  # not even an object
    key = required[0]
    kind = (props.get(key) or {}).get("type", "string")
    wrong: dict[str, Any] = {"string": 12345, "integer": "не число", "number": "не число", "boolean": "да",
                             "object": "not-an-object", "array": "not-an-array"}
    args[key] = wrong.get(kind if isinstance(kind, str) else "string", None)
    return args


def _check_kind(kind: str) -> None:
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; choose one of {', '.join(FAULT_KINDS)}")


class FakeOpenAIServer:
    """The fake server on a background thread (see module docstring). Context manager, sync or async."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, latency_ms: float = 0.0,
                 model: str = "fake-model", seed: int = 0, hang_s: float = 30.0, retry_after: float = 0.05) -> None:
        self.app = FakeOpenAIApp(latency_ms=latency_ms, model=model, seed=seed, hang_s=hang_s, retry_after=retry_after)
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._conns: weakref.WeakSet[HttpProtocol] = weakref.WeakSet()

    # configuration delegates (thread-safe enough: list appends are atomic, requests read them in order)
    def script(self, **kwargs: Any) -> "FakeOpenAIServer":
        self.app.script(**kwargs)
        return self

    def faults(self, **kwargs: Any) -> "FakeOpenAIServer":
        self.app.faults(**kwargs)
        return self

    def clear(self) -> None:
        self.app.clear()

    def reset_counts(self) -> None:
        self.app.reset_counts()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def served(self) -> int:
        return self.app.served

    @property
    def max_in_flight(self) -> int:
        return self.app.max_in_flight

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Request bodies received (JSON), in arrival order (first 10,000)."""
        return self.app.requests

    @property
    def counts(self) -> dict[str, Any]:
        return {"total": self.app.served, "routes": dict(self.app.routes), "faults": dict(self.app.fault_counts),
                "status": dict(self.app.status_counts), "max_in_flight": self.app.max_in_flight}

    def start(self) -> "FakeOpenAIServer":
        self._thread = threading.Thread(target=self._run, name="fake-openai-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake OpenAI server did not start within 10 s")
        if self._error is not None:
            raise RuntimeError(f"fake OpenAI server failed to start on {self.host}:{self.port}") from self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = self.app
        conns = self._conns

        def factory() -> HttpProtocol:
            proto = HttpProtocol(app.handle, app.on_start, app.on_done)
            conns.add(proto)
            return proto

        try:
            self._server = loop.run_until_complete(loop.create_server(factory, self.host, self.port, backlog=4096))
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            loop = self._loop

            def _shutdown() -> None:
                assert self._server is not None
                self._server.close()
                for proto in list(self._conns):
                    if proto.transport is not None:
                        proto.transport.close()
                loop.stop()

            loop.call_soon_threadsafe(_shutdown)
            self._thread.join(10)
        self._thread = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> "FakeOpenAIServer":
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()


async def _serve_forever(args: argparse.Namespace) -> None:
    app = FakeOpenAIApp(latency_ms=args.latency_ms, model=args.model, seed=args.seed)
    if args.fault_rate > 0:
        app.faults(rate=args.fault_rate, kinds=args.fault_kinds.split(","), seed=args.seed)
    app.record_limit = 0
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpProtocol(app.handle, app.on_start, app.on_done),
                                      args.host, args.port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"READY {port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """``python -m fabrika.testing.fake_server``: run the fake server in the foreground."""
    p = argparse.ArgumentParser(description="fabrika's fake OpenAI-compatible server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as 'READY <port>')")
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--model", default="fake-model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fault-rate", type=float, default=0.0)
    p.add_argument("--fault-kinds", default="rate_limit,server")
    args = p.parse_args(argv)
    try:
        asyncio.run(_serve_forever(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
