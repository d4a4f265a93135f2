"""Retry policy (tenacity) and the one place provider errors become :class:`LLMError`.

Mapping happens once, at the backend boundary: an HTTP status, an ``aiohttp``
or ``openai`` exception is turned into ``LLMError(kind)`` raised ``from`` the
original, and nothing above the backend looks at provider types again.

Retried kinds: ``rate_limit``, ``server``, ``timeout``, ``connection`` (see
:data:`fabrika.errors.RETRYABLE_KINDS`) with exponential backoff plus jitter;
a server's ``Retry-After`` (seconds or an HTTP date) replaces the computed wait
(capped), spread by up to 20 % plus ``jitter_s`` so hundreds of requests told
the same Retry-After do not return in one burst. Terminal kinds
(``bad_request``, ``auth``, ``not_found``, ``context_length``) fail at once.
A ``finish_reason == "length"`` answer is not an error at all: the engine keeps
it, marks it truncated and never re-asks with the same limit.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_base

from fabrika.errors import LLMError

T = TypeVar("T")

_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens",
                    "prompt is too long")


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date)."""
    if not headers:
        return None
    get = headers.get
    ms = get("retry-after-ms") or get("Retry-After-Ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = get("retry-after") or get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


_TITLE = re.compile(r"<title>(.*?)</title>|<h1>(.*?)</h1>", re.I | re.S)
_TAGS = re.compile(r"<[^>]+>")


def _html_text(text: str) -> str:
    """The gist of an HTML error page (nginx' ``<title>502 Bad Gateway</title>``), not its markup."""
    m = _TITLE.search(text)
    gist = (m.group(1) or m.group(2)) if m else _TAGS.sub(" ", text)
    return "HTML error page: " + " ".join(gist.split())[:200]


def _error_text(body: Any) -> tuple[str, str]:
    """(message, code) from an OpenAI-style error body (dict, JSON text or anything)."""
    if isinstance(body, (bytes, str)):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            body = json.loads(text)
        except ValueError:
            if "<html" in text[:512].lower() or "<!doctype" in text[:512].lower():
                return _html_text(text), ""
            return text[:500], ""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message", ""))[:500], str(err.get("code") or err.get("type") or "")
        return str(err)[:500], ""
    return str(body)[:500], ""


def map_http_error(status: int, body: Any = None, headers: Mapping[str, str] | None = None) -> LLMError:
    """An ``LLMError`` for a non-2xx answer; the kind decides whether it is retried."""
    message, code = _error_text(body)
    detail = f"HTTP {status}" + (f" ({code})" if code else "") + (f": {message}" if message else "")
    if status == 429:
        return LLMError("rate_limit", detail, retry_after=parse_retry_after(headers), status_code=status)
    if status in (400, 413, 422):
        low = f"{code} {message}".lower()
        if any(m in low for m in _CONTEXT_MARKERS):
            return LLMError("context_length", detail + "; shorten the prompt or lower max_tokens", status_code=status)
        return LLMError("bad_request", detail, status_code=status)
    if status in (401, 403):
        return LLMError("auth", detail + "; check llm.endpoints[].api_key / api_key_env", status_code=status)
    if status == 404:
        return LLMError("not_found", detail + "; check llm.model and the endpoint's base_url", status_code=status)
    if status == 408:
        return LLMError("timeout", detail, status_code=status)
    if status == 409 or status >= 500:
        return LLMError("server", detail, retry_after=parse_retry_after(headers), status_code=status)
    return LLMError("bad_request", detail, status_code=status)


def map_exception(exc: BaseException) -> LLMError:
    """An ``LLMError`` for a transport or SDK exception (raise it ``from exc``)."""
    if isinstance(exc, LLMError):
        return exc
    import openai  # imported here: only an SDK exception needs it

    if isinstance(exc, openai.APITimeoutError):
        if _refused(exc):  # the SDK's aiohttp transport reports a refused connect as a timeout
            return LLMError("connection", f"cannot connect: {exc.__cause__}")
        return LLMError("timeout", f"request timed out: {exc}")
    if isinstance(exc, openai.APIConnectionError):
        return LLMError("connection", f"cannot connect: {exc}")
    if isinstance(exc, openai.APIStatusError):
        return map_http_error(exc.status_code, exc.body if exc.body is not None else exc.message,
                              exc.response.headers if exc.response is not None else None)
    import aiohttp

    if isinstance(exc, aiohttp.ConnectionTimeoutError):  # the connect phase: the server is unreachable
        return LLMError("connection", f"connect timed out: {exc}")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return LLMError("timeout", f"request timed out ({type(exc).__name__})")

    if isinstance(exc, (aiohttp.ServerTimeoutError, aiohttp.SocketTimeoutError)):
        return LLMError("timeout", f"request timed out: {exc}")
    if isinstance(exc, (aiohttp.ClientConnectionError, ConnectionError, OSError)):
        return LLMError("connection", f"connection failed: {type(exc).__name__}: {exc}")
    if isinstance(exc, (aiohttp.ContentTypeError, ValueError)):
        return LLMError("server", f"unreadable response: {type(exc).__name__}: {exc}")
    if isinstance(exc, aiohttp.ClientError):
        return LLMError("connection", f"{type(exc).__name__}: {exc}")
    return LLMError("server", f"unexpected {type(exc).__name__}: {exc}")


def _refused(exc: BaseException) -> bool:
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 6:
        if isinstance(cur, ConnectionRefusedError):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
        for arg in getattr(cur, "args", ()):
            if isinstance(arg, ConnectionRefusedError):
                return True
    return False


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long and how often to retry (fields mirror :class:`fabrika.llm.config.LLMConfig`)."""

    max_retries: int = 6
    initial_s: float = 0.5
    max_s: float = 30.0
    jitter_s: float = 0.5
    retry_after_max_s: float = 120.0

    def wait_for(self, attempt: int, error: BaseException | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:  # spread the herd: +0..20 % and up to jitter_s on top of the server's wait
            base = min(float(retry_after), self.retry_after_max_s)
            return base * random.uniform(1.0, 1.2) + random.uniform(0, self.jitter_s)
        return min(self.max_s, self.initial_s * (2 ** (attempt - 1))) + random.uniform(0, self.jitter_s)


class _PolicyWait(wait_base):
    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        return self.policy.wait_for(retry_state.attempt_number, exc)


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, LLMError) and exc.retryable


async def call_with_retries(fn: Callable[[], Awaitable[T]], policy: RetryPolicy,
                            on_retry: Callable[[LLMError], None] | None = None) -> tuple[T, int]:
    """Run ``fn`` until it succeeds, fails terminally or runs out of retries.

    Returns ``(result, attempts)``. The last ``LLMError`` is re-raised with
    ``attempts`` set as an attribute. The first attempt runs outside tenacity
    (the common case costs one ``await``); only failures enter the retry loop.
    """
    try:
        return await fn(), 1
    except LLMError as exc:
        if not exc.retryable or policy.max_retries == 0:
            exc.attempts = 1
            raise
        first = exc
    if on_retry is not None:
        on_retry(first)
    await asyncio.sleep(policy.wait_for(1, first))
    attempts = 1

    def _before_sleep(state: RetryCallState) -> None:
        if on_retry is not None and state.outcome is not None:
            err = state.outcome.exception()
            if isinstance(err, LLMError):
                on_retry(err)

    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.max_retries),
        wait=_PolicyWait(RetryPolicy(policy.max_retries, policy.initial_s * 2, policy.max_s, policy.jitter_s,
                                     policy.retry_after_max_s)),
        retry=retry_if_exception(_is_retryable),
        before_sleep=_before_sleep,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                attempts += 1
                result = await fn()
        return result, attempts
    except LLMError as exc:
        exc.attempts = attempts
        raise
