"""The fake OpenAI server's logic: routes, scripts, faults and counters (no sockets).

Kept apart from the transport (:mod:`fabrika.testing.http`) and the thread/CLI
wrapper (:mod:`fabrika.testing.fake_server`, whose docstring documents the
response specs and fault kinds) so each piece stays small and testable.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import random
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from fabrika.llm.schema_gen import generate_instance, response_format_schema, tool_name, tool_parameters
from fabrika.llm.sim import generic_choice
from fabrika.llm.types import ChatRequest
from fabrika.testing.http import HttpReply, HttpRequest
from fabrika.testing.replay import ReplayBook
from fabrika.testing.sim_vllm import SimVLLM, SimVLLMConfig

_log = logging.getLogger(__name__)

FAULT_KINDS: tuple[str, ...] = (
    "rate_limit", "rate_limit_date", "server", "bad_gateway_html", "overloaded", "hang", "abort",
    "bad_request", "auth", "not_found", "context_length",
    "truncated_json", "length", "unknown_tool", "bad_args", "wrong_language",
)
RETRYABLE_FAULTS: tuple[str, ...] = ("rate_limit", "server")

_NGINX_502 = (b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
              b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n"
              b"</body>\r\n</html>\r\n")

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

    def __init__(self, *, latency_ms: float = 0.0, model: str = "fake", seed: int = 0,
                 hang_s: float = 30.0, retry_after: float = 0.05, record: int = 10_000,
                 models: Iterable[str] | None = None, vllm: SimVLLMConfig | None = None,
                 clock: Callable[[], float] | None = None, replay: bool = False) -> None:
        self.latency_ms = latency_ms
        #: recorded answers served again as bytes (:mod:`fabrika.testing.replay`); None: off
        self.replay: ReplayBook | None = ReplayBook() if replay else None
        #: the vLLM-like cost model (slots, prefix cache, simulated time); None: fixed latency_ms
        self.sim: SimVLLM | None = None
        if vllm is not None:
            self.sim = SimVLLM(vllm, clock) if clock is not None else SimVLLM(vllm)
        self.model = model
        #: what GET /models lists; a chat request naming another model gets 404 model_not_found (like vLLM)
        self.models: list[str] = list(models) if models is not None else [model]
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
        self.in_flight = getattr(self, "in_flight", 0)  # requests still open keep counting down
        self.max_in_flight = self.in_flight
        self.requests = []
        self.request_tags: list[str] = []
        #: tracebacks of exceptions raised by scripted responders
        self.errors: list[str] = []

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
        """Answer one HTTP request. A bug in a test's responder answers 500 *and* is kept in
        :attr:`errors` (and logged), so the test can show it instead of a puzzling retry story."""
        try:
            return self._handle(http)
        except Exception as exc:  # noqa: BLE001 - a responder bug is shown by the test, not a retry story
            _log.exception("fake OpenAI server: responder/script raised %s", type(exc).__name__)
            self.errors.append("".join(traceback.format_exception(exc)))
            self._count("handler_error", 500)
            return HttpReply(500, _error_body("server_error", f"fake server: responder raised {type(exc).__name__}: {exc}"))

    def _handle(self, http: HttpRequest) -> HttpReply:
        path = http.path.split("?", 1)[0].rstrip("/")
        if http.method == "GET" and path.endswith("/models"):  # not in `served`: that counts chat requests
            self.routes["models"] += 1
            self.status_counts[200] += 1
            body = {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "fabrika-fake"}
                                               for m in self.models]}
            return HttpReply(200, json.dumps(body).encode())
        if path.endswith("/stats") and self.sim is not None:  # the simulated server's counters
            if http.method == "POST":
                self.sim.reset()
            return HttpReply(200, json.dumps(self.sim.snapshot()).encode())
        book = self.replay
        if book is not None and path.endswith("/replay"):  # GET: counters; POST: record → serve
            if http.method == "POST":
                book.serving = True
            return HttpReply(200, json.dumps(book.snapshot()).encode())
        if http.method != "POST" or not path.endswith("/chat/completions"):
            self._count("unknown_route", 404)
            return HttpReply(404, _error_body("not_found", f"no route {http.method} {http.path}"))
        tag = http.headers.get("x-fabrika-tag", "")
        if book is not None and book.serving:
            answer = book.lookup(tag, http.body)
            if answer is not None:  # a recorded sim answer: no parse, no responder, no serialisation
                self._count("replay", 200)
                return HttpReply(200, answer, delay_s=self.latency_ms / 1000.0)
        try:
            req = json.loads(http.body)
        except ValueError:
            self._count("bad_json", 400)
            return HttpReply(400, _error_body("invalid_request_error", "request body is not JSON"))
        if len(self.requests) < self.record_limit:
            self.requests.append(req)
            self.request_tags.append(tag)
        delay = self.latency_ms
        asked = req.get("model")
        if asked is not None and asked not in self.models:
            self._count("fault:model_not_found", 404)
            self.fault_counts["model_not_found"] += 1
            return HttpReply(404, _error_body("NotFoundError", f"The model `{asked}` does not exist.",
                                              "model_not_found"), delay_s=delay / 1000.0)
        fault, retry_after = self._fault_for(req, http.body, tag)
        route, spec, script = "default", None, None
        if fault is None:
            for s in self._scripts:
                if not s.exhausted() and _matches(s.match, s.tag, req, tag):
                    route, spec, script = s.name, s.next_spec(req), s
                    if s.latency_ms is not None:
                        delay = s.latency_ms
                    break
            if isinstance(spec, dict) and spec.get("http_status"):  # a raw answer: any status, any body
                body = spec.get("body", "")
                reply = HttpReply(int(spec["http_status"]), body.encode() if isinstance(body, str) else body,
                                  dict(spec.get("headers") or {}))
                self._count(route, reply.status)
                reply.delay_s = delay / 1000.0
                return reply
            if isinstance(spec, dict) and spec.get("fault"):
                fault, retry_after = spec["fault"], spec.get("retry_after")
                _check_kind(fault)
            if isinstance(spec, dict) and spec.get("latency_ms") is not None:
                delay = float(spec["latency_ms"])
        if fault is not None:
            reply = self._fault_reply(fault, req, retry_after)
            self.fault_counts[fault] += 1
            route = f"fault:{fault}" if route == "default" else route
        elif self.sim is not None:
            completion = self._sim_completion(req, spec, script)
            delay = 1000.0 * self.sim.schedule(req, [c["message"] for c in completion["choices"]], tag,
                                               http.headers.get("x-fabrika-routing-key", ""))
            reply = HttpReply(200, json.dumps(completion, ensure_ascii=False).encode())
        else:  # n > 1: each sample drawn as a lone request would get it (scripts advance per sample), as vLLM does
            reply = HttpReply(200, json.dumps(self._sim_completion(req, spec, script), ensure_ascii=False).encode())
        self._count(route, reply.status)
        if book is not None and fault is None and reply.status == 200 and reply.hang_s <= 0:
            book.record(tag, http.body, reply.body)
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
        if kind == "rate_limit_date":  # Retry-After as an HTTP date (RFC 9110), as some gateways send it
            ra = self.retry_after if retry_after is None else retry_after
            when = email.utils.formatdate(time.time() + max(1.0, ra), usegmt=True)
            return HttpReply(429, _error_body("rate_limit_error", "fake: rate limited", "rate_limit_exceeded"),
                             {"Retry-After": when})
        if kind == "server":
            return HttpReply(500, _error_body("server_error", "fake: internal error"))
        if kind == "bad_gateway_html":  # a proxy in front of a restarting server: HTML, not JSON
            return HttpReply(502, _NGINX_502, {"Content-Type": "text/html"})
        if kind == "overloaded":
            return HttpReply(503, _error_body("server_error", "fake: server overloaded, try again later"),
                             {"Retry-After": "1"})
        if kind == "abort":  # vLLM aborted the request (engine restart, preemption): 200 with no real answer
            spec_abort: dict[str, Any] = {"content": "", "finish_reason": "abort"}
            return HttpReply(200, json.dumps(self._completion(req, spec_abort), ensure_ascii=False).encode())
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

    def _sim_completion(self, req: dict[str, Any], spec: Spec, script: _Script | None) -> dict[str, Any]:
        """Choice ``j`` of an ``n``-sample request is what a lone request with ``seed + j`` (no ``n``)
        would get, so n=K and K requests give the same samples (vLLM seeds its samples this way)."""
        n = int(req.get("n") or 1)
        if n == 1 or (isinstance(spec, dict) and spec.get("choices")):
            return self._completion(req, spec)
        choices = []
        for j in range(n):
            sub = {k: v for k, v in req.items() if k != "n"}
            if req.get("seed") is not None:
                sub["seed"] = int(req["seed"]) + j
            if script is None:
                spec_j = None
            elif j == 0 and script.responder is None:
                spec_j = spec  # a listed answer, already taken for this request
            else:
                spec_j = script.next_spec(sub)
            one = self._completion(sub, spec_j)["choices"][0]
            one["index"] = j
            choices.append(one)
        return self._completion(req, {"choices": [{"content": c["message"].get("content"),
                                                    "tool_calls": [{"id": t["id"], "name": t["function"]["name"],
                                                                    "arguments": t["function"]["arguments"]}
                                                                   for t in c["message"].get("tool_calls") or ()],
                                                    "finish_reason": c["finish_reason"]} for c in choices]})

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
