"""Error mapping at the boundary and the retry policy's waits."""

from __future__ import annotations

import openai
import pytest

from fabrika.errors import LLMError
from fabrika.llm.retry import RetryPolicy, call_with_retries, map_http_error, parse_retry_after


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (429, '{"error": {"message": "slow down"}}', "rate_limit"),
        (500, "oops", "server"),
        (503, None, "server"),
        (400, '{"error": {"message": "bad", "code": null}}', "bad_request"),
        (400, '{"error": {"message": "x", "code": "context_length_exceeded"}}', "context_length"),
        (400, "This model's maximum context length is 4096 tokens", "context_length"),
        (401, None, "auth"),
        (403, None, "auth"),
        (404, None, "not_found"),
        (408, None, "timeout"),
        (422, None, "bad_request"),
    ],
)
def test_map_http_error_kinds(status: int, body: str | None, kind: str) -> None:
    err = map_http_error(status, body)
    assert err.kind == kind
    assert err.status_code == status
    assert err.retryable == (kind in {"rate_limit", "server", "timeout", "connection"})


def test_retry_after_parsing() -> None:
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "garbage"}) is None
    assert parse_retry_after({}) is None
    assert map_http_error(429, None, {"Retry-After": "1.5"}).retry_after == 1.5


def test_map_exception_from_openai_sdk() -> None:
    from fabrika.llm.retry import map_exception

    assert map_exception(openai.APITimeoutError(request=None)).kind == "timeout"  # type: ignore[arg-type]
    assert map_exception(TimeoutError()).kind == "timeout"
    assert map_exception(ConnectionRefusedError()).kind == "connection"


def test_policy_wait_prefers_retry_after_and_grows_exponentially() -> None:
    p = RetryPolicy(max_retries=5, initial_s=0.1, max_s=1.0, jitter_s=0.0, retry_after_max_s=3.0)
    assert [p.wait_for(a, None) for a in (1, 2, 3, 4, 5)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert 2.0 <= p.wait_for(1, LLMError("rate_limit", "x", retry_after=2.0)) <= 2.4
    assert 3.0 <= p.wait_for(1, LLMError("rate_limit", "x", retry_after=60.0)) <= 3.6


def test_retry_after_waits_of_a_herd_are_spread() -> None:
    """256 requests told the same Retry-After must not come back in one burst."""
    p = RetryPolicy(max_retries=5, initial_s=0.1, max_s=1.0, jitter_s=0.5, retry_after_max_s=30.0)
    waits = sorted(p.wait_for(1, LLMError("rate_limit", "x", retry_after=2.0)) for _ in range(256))
    assert waits[0] >= 2.0 and waits[-1] <= 2.0 * 1.2 + 0.5
    assert waits[-1] - waits[0] > 0.5  # spread over at least half a second
    in_any_50ms = max(sum(1 for w in waits if a <= w < a + 0.05) for a in waits)
    assert in_any_50ms < 40  # no burst: well under a sixth of the herd in any 50 ms window


def test_retry_after_as_http_date() -> None:
    import email.utils
    import time as _time

    from fabrika.llm.retry import parse_retry_after

    when = email.utils.formatdate(_time.time() + 5, usegmt=True)
    got = parse_retry_after({"Retry-After": when})
    assert got is not None and 3.5 <= got <= 5.0
    assert parse_retry_after({"Retry-After": "garbage"}) is None


async def test_call_with_retries_counts_attempts_and_stops_on_terminal() -> None:
    p = RetryPolicy(max_retries=3, initial_s=0.0, max_s=0.0, jitter_s=0.0)
    calls: list[int] = []
    retried: list[str] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise LLMError("server", "boom")
        return "ok"

    assert await call_with_retries(flaky, p, lambda e: retried.append(e.kind)) == ("ok", 3)
    assert retried == ["server", "server"]

    async def terminal() -> str:
        raise LLMError("bad_request", "no")

    with pytest.raises(LLMError) as info:
        await call_with_retries(terminal, p)
    assert info.value.attempts == 1  # type: ignore[attr-defined]

    async def always() -> str:
        raise LLMError("timeout", "slow")

    with pytest.raises(LLMError) as info:
        await call_with_retries(always, p)
    assert info.value.attempts == 4  # type: ignore[attr-defined]
