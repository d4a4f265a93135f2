"""What a failed request means for its item, and what to tell the user.

A request that still fails after its retries is one of two things:

* **the item's fault** (``bad_request``, ``context_length``): the item becomes a
  recorded rejection — asking again would fail again;
* **the fleet's fault** (rate limit, timeout, connection, 5xx, an open breaker,
  ``auth``, ``not_found``, a ``--cache-only`` miss): the item stays *pending* —
  nothing is written, and the next run asks again. ``auth`` and ``not_found``
  are here on purpose: a wrong key or model name is fixed in the config, and
  items rejected under it would otherwise never be retried.

:class:`FailureTally` keeps the most common failures (kind + HTTP status, one
example message each, bounded) for the one-line summary a run ends with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabrika.errors import RETRYABLE_KINDS, LLMError

PENDING_KINDS: frozenset[str] = RETRYABLE_KINDS | {"cache_miss", "unavailable", "auth", "not_found"}

_FIXES = {
    "connection": "is the server up? check llm.endpoints[].base_url (`fabrika validate --probe CONFIG`)",
    "timeout": "the server is slow or stuck; raise llm.timeout_s or lower llm.endpoints[].max_concurrency",
    "rate_limit": "the server is rate limiting; lower llm.endpoints[].max_concurrency",
    "server": "the server answered 5xx or an unusable answer; see its log",
    "auth": "check llm.endpoints[].api_key / api_key_env",
    "not_found": "check llm.model (and that base_url ends with /v1)",
    "cache_miss": "rerun without --cache-only to ask the model",
    "unavailable": "the backend is down or hung (no answer within llm.timeout_s); check the server, then rerun",
}


def leaves_item_pending(error: LLMError) -> bool:
    """True when the item must stay unwritten (retried by the next run) rather than rejected."""
    return error.kind in PENDING_KINDS


def fix_for(error: LLMError) -> str:
    """A short fix for ``error`` (the kind's default; model_not_found named explicitly)."""
    text = error.message.lower()
    if error.kind == "not_found" and "model" in text:
        return "check llm.model"
    return _FIXES.get(error.kind, "see the error message")


def summarise(error: LLMError) -> str:
    """``HTTP 404 model_not_found: check llm.model``-style text: what failed, then the fix."""
    head = error.message.split(";")[0].strip()
    if len(head) > 160:
        head = head[:157] + "..."
    return f"{head}: {fix_for(error)}"


@dataclass
class FailureTally:
    """Counts of failures by (kind, HTTP status), with the first message of each (at most ``limit`` groups)."""

    limit: int = 32
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, error: LLMError) -> None:
        key = f"{error.kind}:{error.status_code or ''}"
        if key not in self.counts and len(self.counts) >= self.limit:
            key = "other:"
        self.counts[key] = self.counts.get(key, 0) + 1
        self.examples.setdefault(key, summarise(error))

    def most_common(self) -> tuple[str, int] | None:
        """``(summary with fix, count)`` of the most frequent failure, or None."""
        if not self.counts:
            return None
        key = max(self.counts, key=lambda k: self.counts[k])
        return self.examples[key], self.counts[key]

    def as_dict(self) -> dict[str, dict[str, object]]:
        return {k: {"count": n, "example": self.examples[k]} for k, n in sorted(self.counts.items())}
