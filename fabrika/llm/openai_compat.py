"""Backend for OpenAI-compatible servers (OpenAI, vLLM ``serve``, SGLang, llama.cpp …).

One model may be served by several base URLs; each request goes to the
endpoint with the fewest requests in flight, under that endpoint's
``max_concurrency`` semaphore. Tool calling, ``n > 1``, ``seed``,
``response_format`` (json_schema) and ``extra_body`` (merged into the JSON body,
e.g. vLLM's ``guided_json`` / ``chat_template_kwargs``) pass through.

Two transports send the same JSON and share one error mapping
(:func:`fabrika.llm.retry.map_http_error`):

* ``aiohttp`` (default): a lean ``aiohttp`` client — one ``POST``, one
  ``json.loads``; the fast path that keeps the engine near raw-socket throughput.
* ``openai_sdk``: the official ``openai.AsyncOpenAI`` over its aiohttp transport
  (``DefaultAioHttpClient``), SDK retries off (``max_retries=0``: tenacity in the
  engine owns retries), reading the raw JSON to skip pydantic parsing.

Each attempt raises ``LLMError(kind)`` from the original error; retries belong
to the engine. The request's ``tag`` is sent as the ``x-fabrika-tag`` header
(useful in server logs and for the fake server's routing).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabrika.errors import LLMError
from fabrika.llm.retry import map_exception, map_http_error
from fabrika.llm.types import ChatRequest, ChatResponse, Choice, Usage

if TYPE_CHECKING:
    from fabrika.llm.config import LLMConfig

BACKEND_NAME = "openai"


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


def parse_completion(data: Any, backend: str) -> ChatResponse:
    """A :class:`ChatResponse` from a chat-completion JSON object.

    The server's answer is untrusted: anything that is not the expected shape
    becomes ``LLMError("server")`` (retryable), never an ``AttributeError``.
    """
    try:
        return _parse_completion(data, backend)
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


def _parse_completion(data: Any, backend: str) -> ChatResponse:
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
        choices.append(Choice(content=_text(msg.get("content")), tool_calls=calls,
                              finish_reason=ch.get("finish_reason"),
                              reasoning=_text(msg.get("reasoning_content") or msg.get("reasoning"))))
    usage = data.get("usage") or {}
    return ChatResponse(
        choices=tuple(choices),
        usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
        model=str(data.get("model") or ""),
        backend=backend,
    )


@dataclass(slots=True)
class _Endpoint:
    url: str
    headers: dict[str, str]
    api_key: str
    semaphore: asyncio.Semaphore
    in_flight: int = 0
    sdk: Any = None
    down_until: float = 0.0
    cooldown_s: float = 0.0


class OpenAICompatBackend:
    """Implements :class:`fabrika.llm.base.Backend` for OpenAI-compatible HTTP servers."""

    name = BACKEND_NAME

    def __init__(self, config: "LLMConfig") -> None:
        if not config.endpoints:
            raise LLMError("bad_request", "llm.endpoints is empty; add at least one base_url")
        self.model = config.model
        self.timeout_s = config.timeout_s
        self.transport = config.transport
        self.endpoints = [
            _Endpoint(url=ep.base_url.rstrip("/") + "/chat/completions",
                      headers={"Authorization": f"Bearer {ep.resolve_api_key()}", "Content-Type": "application/json"},
                      api_key=ep.resolve_api_key(), semaphore=asyncio.Semaphore(ep.max_concurrency))
            for ep in config.endpoints
        ]
        self._base_urls = [ep.base_url.rstrip("/") for ep in config.endpoints]
        self._limit = sum(ep.max_concurrency for ep in config.endpoints)
        #: requests this backend can have in flight; the engine sizes its worker pool by it
        self.capacity = self._limit
        self._session: Any = None
        self._rr = 0

    def _pick(self) -> _Endpoint:
        """Least requests in flight among healthy endpoints (round-robin on ties).

        An endpoint that refused a connection or answered 502/503/504 cools down
        (1 s, doubling to 30 s, reset by a success): a dead server fails fast, and
        least-in-flight alone would send it ever more traffic.
        """
        eps = self.endpoints
        if len(eps) == 1:
            return eps[0]
        self._rr = (self._rr + 1) % len(eps)
        now = time.monotonic()
        best: _Endpoint | None = None
        for k in range(len(eps)):
            ep = eps[(self._rr + k) % len(eps)]
            if ep.down_until > now:
                continue
            if best is None or ep.in_flight < best.in_flight:
                best = ep
        if best is None:  # all cooling down: the one that recovers first
            best = min(eps, key=lambda e: e.down_until)
        return best

    @staticmethod
    def _observe(ep: _Endpoint, error: LLMError | None) -> None:
        if error is None:
            if ep.cooldown_s:
                ep.cooldown_s = 0.0
                ep.down_until = 0.0
            return
        if error.kind == "connection" or error.status_code in (502, 503, 504):
            ep.cooldown_s = min(30.0, ep.cooldown_s * 2 or 1.0)
            ep.down_until = time.monotonic() + ep.cooldown_s

    def endpoint_load(self) -> list[int]:
        """Requests in flight per endpoint (for progress displays and tests)."""
        return [ep.in_flight for ep in self.endpoints]

    async def send(self, request: ChatRequest) -> ChatResponse:
        ep = self._pick()
        ep.in_flight += 1
        try:
            async with ep.semaphore:
                if self.transport == "openai_sdk":
                    resp = await self._send_sdk(ep, request)
                else:
                    resp = await self._send_aiohttp(ep, request)
        except LLMError as exc:
            self._observe(ep, exc)
            raise
        finally:
            ep.in_flight -= 1
        self._observe(ep, None)
        return resp

    # -- aiohttp -----------------------------------------------------------
    def _get_session(self) -> Any:
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, limit_per_host=0, ttl_dns_cache=300),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                json_serialize=json.dumps,
            )
        return self._session

    async def _send_aiohttp(self, ep: _Endpoint, request: ChatRequest) -> ChatResponse:
        session = self._get_session()
        payload = json.dumps(build_body(request, self.model), ensure_ascii=False).encode("utf-8")
        headers = ep.headers if request.tag == "default" else {**ep.headers, "x-fabrika-tag": _ascii(request.tag)}
        try:
            async with session.post(ep.url, data=payload, headers=headers) as resp:
                raw = await resp.read()
                status = resp.status
                if status != 200:
                    raise map_http_error(status, raw.decode("utf-8", "replace"), resp.headers)
        except LLMError:
            raise
        except Exception as exc:
            raise map_exception(exc) from exc
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise LLMError("server", f"response is not JSON: {raw[:200]!r}") from exc
        return parse_completion(data, self.name)

    # -- openai SDK ----------------------------------------------------------
    def _sdk_client(self, ep: _Endpoint) -> Any:
        if ep.sdk is None:
            import openai

            base = self._base_urls[self.endpoints.index(ep)]
            ep.sdk = openai.AsyncOpenAI(base_url=base, api_key=ep.api_key, max_retries=0, timeout=self.timeout_s,
                                        http_client=openai.DefaultAioHttpClient(timeout=self.timeout_s))
        return ep.sdk

    async def _send_sdk(self, ep: _Endpoint, request: ChatRequest) -> ChatResponse:
        client = self._sdk_client(ep)
        body = build_body(request, self.model)
        model = body.pop("model")
        messages = body.pop("messages")
        known = {k: body.pop(k) for k in ("tools", "tool_choice", "temperature", "top_p", "max_tokens", "n", "seed",
                                          "response_format", "stop") if k in body}
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=model, messages=messages, extra_body=body or None,
                extra_headers={"x-fabrika-tag": _ascii(request.tag)}, **known)
            data = raw.http_response.json()
        except LLMError:
            raise
        except Exception as exc:
            raise map_exception(exc) from exc
        return parse_completion(data, self.name)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        for ep in self.endpoints:
            if ep.sdk is not None:
                await ep.sdk.close()
                ep.sdk = None


def _ascii(text: str) -> str:
    return text.encode("ascii", "replace").decode("ascii")
