"""Backend for OpenAI-compatible servers (OpenAI, vLLM ``serve``, SGLang, llama.cpp …).

One model may be served by several base URLs; each request takes a slot on the
endpoint with the lowest in-flight ÷ ``max_concurrency`` (so mixed nodes are
each filled to their limit), skipping endpoints whose circuit breaker is open
(:mod:`fabrika.llm.routing`). Tool calling, ``n > 1``, ``seed``,
``response_format`` (json_schema) and ``extra_body`` (merged into the JSON body,
e.g. vLLM's ``guided_json`` / ``chat_template_kwargs``) pass through.

Two transports send the same JSON and share one error mapping
(:func:`fabrika.llm.retry.map_http_error`):

* ``aiohttp`` (default): a lean ``aiohttp`` client — one ``POST`` of an orjson body
  to a URL parsed once, one orjson parse of the answer (the stdlib for what orjson
  refuses); the fast path that keeps the engine near raw-socket throughput.
* ``openai_sdk``: the official ``openai.AsyncOpenAI`` over its aiohttp transport
  (``DefaultAioHttpClient``), SDK retries off (``max_retries=0``: tenacity in the
  engine owns retries), reading the raw JSON to skip pydantic parsing.

Each attempt raises ``LLMError(kind)`` from the original error; retries belong
to the engine. Timeouts: ``connect_timeout_s`` (a connect that does not finish
is a ``connection`` error and counts toward the breaker), ``read_timeout_s``
between bytes of the answer, ``timeout_s`` for the whole attempt. Both
transports honour the proxy environment (``HTTPS_PROXY``, ``NO_PROXY``…).
:func:`probe_endpoints` asks each endpoint's ``GET /models`` before a run. The request's ``tag`` is sent as the ``x-fabrika-tag`` header
(useful in server logs and for the fake server's routing), its ``routing_key`` (when set) as
``x-fabrika-routing-key``: a cache-aware router in front of the servers can key sessions on it, and
the simulated fleet groups an episode's requests by it (its critical path, ``bench/fleet.py``).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import orjson

from fabrika.errors import LLMError
from fabrika.llm.rawhttp import RawHttpClient, Target, head_parts
from fabrika.llm.redact import public_url
from fabrika.llm.retry import map_exception, map_http_error
from fabrika.llm.routing import CapacityPolicy, CircuitBreaker, Endpoint, EndpointPool, RoutingPolicy, sequences_of
from fabrika.llm.types import ChatRequest, ChatResponse, Choice, Usage

if TYPE_CHECKING:
    from fabrika.llm.config import LLMConfig

BACKEND_NAME = "openai"


def _body_bytes(body: dict[str, Any]) -> bytes:
    """The request body as UTF-8 JSON: orjson (~10x the stdlib), the stdlib where orjson refuses
    (integers beyond 64 bits, non-string keys). The server parses the same values either way."""
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _loads(raw: bytes) -> Any:
    """The answer's JSON: orjson, else the stdlib (which also takes NaN, big integers, lone surrogates)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def build_body(request: ChatRequest, model: str) -> dict[str, Any]:
    """The chat-completions JSON body for ``request``.

    ``tag`` and ``meta`` stay local; ``sample_index`` is sent only as an offset to
    ``seed`` (when a seed is set), so repeated samples of one prompt differ.
    """
    r = request
    body: dict[str, Any] = {"model": r.model or model, "messages": list(r.messages)}
    if r.tools:
        body["tools"] = list(r.tools)
    if r.tool_choice is not None:
        body["tool_choice"] = r.tool_choice
    if r.temperature is not None:
        body["temperature"] = r.temperature
    if r.top_p is not None:
        body["top_p"] = r.top_p
    if r.max_tokens is not None:
        body["max_tokens"] = r.max_tokens
    if r.n != 1:
        body["n"] = r.n
    if r.seed is not None:
        # K samples of one prompt with one seed would be K copies: offset by sample_index
        body["seed"] = r.seed + r.sample_index
    if r.response_format is not None:
        body["response_format"] = r.response_format
    if r.stop:
        body["stop"] = list(r.stop)
    if r.extra_body:
        body.update(r.extra_body)
    return body


#: Other servers' spellings of the standard finish reasons (TGI, older SGLang/llama.cpp, the legacy
#: function-calling API); anything else stays as sent and the engine treats it as unfinished.
FINISH_SYNONYMS = {"eos_token": "stop", "eos": "stop", "stop_sequence": "stop", "end_turn": "stop",
                   "max_tokens": "length", "model_length": "length", "function_call": "tool_calls",
                   "tool_use": "tool_calls"}


def parse_completion(data: Any, backend: str, endpoint: str | None = None) -> ChatResponse:
    """A :class:`ChatResponse` from a chat-completion JSON object.

    The server's answer is untrusted: anything that is not the expected shape
    becomes ``LLMError("server")`` (retryable), never an ``AttributeError``. So does a
    choice that says it finished (``finish_reason: stop``) with no text, no tool call and
    no reasoning (``content: null`` or ``""``): that is a server that lost the answer, not
    the model's verdict on the item — it is retried, then the item stays pending, and it
    is never cached (:func:`is_lost_answer`).
    """
    try:
        return _parse_completion(data, backend, endpoint)
    except LLMError:
        raise
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        raise LLMError("server", f"malformed completion ({type(exc).__name__}: {exc}): {str(data)[:200]}") from exc


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "".join(p.get("text", "") for p in value if isinstance(p, dict))
    return json.dumps(value, ensure_ascii=False)


def is_lost_answer(choice: Choice) -> bool:
    """A 200 choice that finished normally with nothing in it (no text, tool call or reasoning)."""
    return (choice.finish_reason == "stop" and not (choice.content or "").strip() and not choice.tool_calls
            and not (choice.reasoning or "").strip())


def _parse_completion(data: Any, backend: str, endpoint: str | None = None) -> ChatResponse:
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        raise LLMError("server", f"malformed completion (no choices): {str(data)[:200]}")
    choices = []
    for ch in data["choices"]:
        msg = ch.get("message") or {}
        calls: tuple[dict[str, Any], ...] = ()
        raw_calls = msg.get("tool_calls")
        if raw_calls:
            calls = tuple(
                {"id": str(tc.get("id") or ""), "name": str((tc.get("function") or {}).get("name") or ""),
                 "arguments": _text((tc.get("function") or {}).get("arguments")) or ""}
                for tc in raw_calls if isinstance(tc, dict)
            )
        finish = ch.get("finish_reason")
        choices.append(Choice(content=_text(msg.get("content")), tool_calls=calls,
                              finish_reason=FINISH_SYNONYMS.get(finish, finish) if isinstance(finish, str) else finish,
                              reasoning=_text(msg.get("reasoning_content") or msg.get("reasoning"))))
    lost = sum(is_lost_answer(c) for c in choices)
    if lost:
        raise LLMError("server", f"empty answer: {lost} of {len(choices)} choice(s) finished (finish_reason stop) "
                       "with content null or empty and no tool calls; retried, never cached", status_code=200)
    usage = data.get("usage") or {}
    return ChatResponse(
        choices=tuple(choices),
        usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
        model=str(data.get("model") or ""),
        backend=backend,
        endpoint=endpoint,
    )


def env_proxy(url: str) -> str | None:
    """The proxy the environment (``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``, ``NO_PROXY``) gives ``url``,
    as the SDK's httpx transport would pick it; ``None`` for a direct connection."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    bypass = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009 - missing from typeshed
    if not proxies or bypass(parts.hostname or "", proxies):
        return None
    return proxies.get(parts.scheme) or proxies.get("all")


class OpenAICompatBackend:
    """Implements :class:`fabrika.llm.base.Backend` for OpenAI-compatible HTTP servers."""

    name = BACKEND_NAME
    #: one request with ``n`` > 1 returns ``n`` choices (the engine groups repeated samples)
    supports_n = True

    def __init__(self, config: "LLMConfig", policy: RoutingPolicy | None = None) -> None:
        if not config.endpoints:
            raise LLMError("bad_request", "llm.endpoints is empty; add at least one base_url")
        self.model = config.model
        self.timeout_s = config.timeout_s
        self.connect_timeout_s = config.connect_timeout_s
        self.read_timeout_s = config.read_timeout_s
        self.transport = config.transport
        b = config.breaker
        endpoints = []
        for ep in config.endpoints:
            key = ep.resolve_api_key()
            base = ep.base_url.rstrip("/")
            endpoints.append(Endpoint(
                base_url=base, url=base + "/chat/completions",
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, api_key=key,
                max_concurrency=ep.max_concurrency, proxy=env_proxy(base),
                breaker=CircuitBreaker(b.failure_threshold, b.cooldown_s, b.max_cooldown_s)))
        self.pool = EndpointPool(endpoints, policy or CapacityPolicy())
        self.endpoints = endpoints
        #: requests this backend can have in flight; the engine sizes its worker pool by it
        self.capacity = self.pool.capacity
        self._session: Any = None
        self._raw: RawHttpClient | None = None
        self._targets: dict[str, Target] = {}  # endpoint URL → parsed once (raw transport)
        #: (endpoint URL, tag) → the raw transport's request head around its length (rawhttp.head_parts)
        self._heads: dict[tuple[str, str], tuple[bytes, bytes]] = {}
        self._urls: dict[str, Any] = {}  # endpoint URL → its yarl.URL, parsed once instead of per request
        #: endpoint URL → what the request log records of it (no credentials, no query)
        self._public: dict[str, str] = {ep.base_url: public_url(ep.base_url) for ep in endpoints}

    def endpoint_load(self) -> list[int]:
        """Sequences in flight per endpoint (an n=K request counts K; for progress displays and tests)."""
        return [ep.in_flight for ep in self.endpoints]

    def health(self) -> list[dict[str, Any]]:
        return self.pool.health()

    def fleet_down(self) -> bool:
        """True while every endpoint's circuit is open (down or hung): the runner stops feeding items."""
        return self.pool.down()

    async def send(self, request: ChatRequest) -> ChatResponse:
        pool = self.pool
        ep, probe = await pool.acquire(request)
        served = ep.served  # unchanged when this request fails: the endpoint answered nothing meanwhile
        try:
            if self.transport == "raw" and ep.proxy is None:
                resp = await self._send_raw(ep, request)
            elif self.transport == "openai_sdk":
                resp = await self._send_sdk(ep, request)
            else:
                resp = await self._send_aiohttp(ep, request)
        except LLMError as exc:
            pool.release(ep, exc, probe, sequences_of(request), stalled=ep.served == served)
            exc.endpoint = self._public[ep.base_url]
            key = ep.api_key
            if len(key) >= 8 and key in exc.message:  # a server that echoes the key back: never keep it
                exc.message = exc.message.replace(key, "***")
                exc.args = (f"[{exc.kind}] {exc.message}",)
            raise
        except BaseException:  # cancelled (a deadline, a stopped stage): no outcome for the breaker
            pool.release(ep, None, probe, sequences_of(request), neutral=True)
            raise
        pool.release(ep, None, probe, sequences_of(request))
        return resp

    # -- aiohttp -----------------------------------------------------------
    def _get_session(self) -> Any:
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.capacity, limit_per_host=0, ttl_dns_cache=300),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=self.connect_timeout_s,
                                              sock_read=self.read_timeout_s),
                json_serialize=json.dumps,
                # the proxy environment is read once per endpoint (env_proxy), not per request as
                # trust_env=True does (that costs ~0.4 ms of CPU per request, measured in bench/llm_throughput.py)
                trust_env=False,
            )
        return self._session

    async def _send_aiohttp(self, ep: Endpoint, request: ChatRequest) -> ChatResponse:
        session = self._get_session()
        url = self._urls.get(ep.url)
        if url is None:
            from yarl import URL

            url = self._urls[ep.url] = URL(ep.url)
        payload = _body_bytes(build_body(request, self.model))
        headers = ep.headers if request.tag == "default" else {**ep.headers, "x-fabrika-tag": _ascii(request.tag)}
        if request.routing_key is not None:
            headers = {**headers, "x-fabrika-routing-key": _ascii(request.routing_key)}
        try:
            async with session.post(url, data=payload, headers=headers, proxy=ep.proxy) as resp:
                raw = await resp.read()
                status = resp.status
                if status != 200:
                    raise map_http_error(status, raw.decode("utf-8", "replace"), resp.headers)
        except LLMError:
            raise
        except Exception as exc:
            raise map_exception(exc) from exc
        try:
            data = _loads(raw)
        except ValueError as exc:
            raise LLMError("server", f"response is not JSON: {raw[:200]!r}") from exc
        return parse_completion(data, self.name, self._public[ep.base_url])

    # -- raw (fabrika.llm.rawhttp) ------------------------------------------
    async def _send_raw(self, ep: Endpoint, request: ChatRequest) -> ChatResponse:
        client = self._raw
        if client is None:
            client = self._raw = RawHttpClient(timeout_s=self.timeout_s, connect_timeout_s=self.connect_timeout_s,
                                               read_timeout_s=self.read_timeout_s)
        target = self._targets.get(ep.url)
        if target is None:
            target = self._targets[ep.url] = Target.parse(ep.url)
        payload = _body_bytes(build_body(request, self.model))
        # the head as request_head writes it, its fixed parts built once per endpoint and tag
        parts = self._heads.get((ep.url, request.tag))
        if parts is None:
            if len(self._heads) > 4096:
                self._heads.clear()
            headers = ep.headers if request.tag == "default" else {**ep.headers, "x-fabrika-tag": _ascii(request.tag)}
            parts = self._heads[(ep.url, request.tag)] = head_parts(target, headers)
        before, lines = parts
        if request.routing_key is not None:
            lines += b"x-fabrika-routing-key: " + _ascii(request.routing_key).encode("ascii") + b"\r\n"
        head = b"%b%d\r\n%b\r\n" % (before, len(payload), lines)
        try:
            status, resp_headers, raw = await client.post(target, head, payload)
        except LLMError:
            raise
        except Exception as exc:
            raise map_exception(exc) from exc
        if status != 200:
            raise map_http_error(status, raw.decode("utf-8", "replace"), resp_headers)
        try:
            data = _loads(raw)
        except ValueError as exc:
            raise LLMError("server", f"response is not JSON: {raw[:200]!r}") from exc
        return parse_completion(data, self.name, self._public[ep.base_url])

    # -- openai SDK ----------------------------------------------------------
    def _sdk_client(self, ep: Endpoint) -> Any:
        if ep.sdk is None:
            import openai

            timeout = openai.Timeout(self.timeout_s, connect=self.connect_timeout_s, read=self.read_timeout_s or self.timeout_s)
            ep.sdk = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=0, timeout=timeout,
                                        http_client=openai.DefaultAioHttpClient(timeout=timeout))
        return ep.sdk

    async def _send_sdk(self, ep: Endpoint, request: ChatRequest) -> ChatResponse:
        client = self._sdk_client(ep)
        body = build_body(request, self.model)
        model = body.pop("model")
        messages = body.pop("messages")
        known = {k: body.pop(k) for k in ("tools", "tool_choice", "temperature", "top_p", "max_tokens", "n", "seed",
                                          "response_format", "stop") if k in body}
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=model, messages=messages, extra_body=body or None,
                extra_headers=_extra_headers(request), **known)
            data = raw.http_response.json()
        except LLMError:
            raise
        except Exception as exc:
            raise map_exception(exc) from exc
        return parse_completion(data, self.name, self._public[ep.base_url])

    async def aclose(self) -> None:
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        for ep in self.endpoints:
            if ep.sdk is not None:
                await ep.sdk.close()
                ep.sdk = None


def _ascii(text: str) -> str:
    return text.encode("ascii", "replace").decode("ascii")


def _extra_headers(request: ChatRequest) -> dict[str, str]:
    headers = {"x-fabrika-tag": _ascii(request.tag)}
    if request.routing_key is not None:
        headers["x-fabrika-routing-key"] = _ascii(request.routing_key)
    return headers


async def probe_endpoints(config: "LLMConfig", timeout_s: float = 10.0) -> list[str]:
    """Ask every endpoint's ``GET /models``: one problem line per endpoint that is unreachable,
    refuses the key, or does not list ``config.model`` (empty list: all good)."""
    import aiohttp

    from fabrika.llm.redact import redact

    problems: list[str] = []
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, config.connect_timeout_s))
    async with aiohttp.ClientSession(timeout=timeout, trust_env=True) as session:
        async def one(i: int, ep: Any) -> str | None:
            base = ep.base_url.rstrip("/")
            where = f"llm.endpoints[{i}] {redact(base)}"
            try:
                headers = {"Authorization": f"Bearer {ep.resolve_api_key()}"}
                async with session.get(base + "/models", headers=headers) as resp:
                    raw = await resp.read()
                    status = resp.status
                    resp_headers = resp.headers
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
                err = map_exception(exc)
                return f"{where}: unreachable ({err.message}); is the server up and base_url right?"
            if status != 200:
                err = map_http_error(status, raw.decode("utf-8", "replace"), resp_headers)
                return f"{where}: GET /models answered {err.message}"
            try:
                data = json.loads(raw)
            except ValueError:
                return f"{where}: GET /models did not answer JSON; is base_url an OpenAI-compatible API (ending in /v1)?"
            served = [str(m.get("id")) for m in (data.get("data") or []) if isinstance(m, dict)] \
                if isinstance(data, dict) else []
            if config.model not in served:
                listed = ", ".join(served[:5]) + (" …" if len(served) > 5 else "") or "(none)"
                return f"{where}: model {config.model!r} is not served there (it lists {listed}); check llm.model"
            return None

        results = await asyncio.gather(*[one(i, ep) for i, ep in enumerate(config.endpoints)])
    problems.extend(r for r in results if r)
    return problems
