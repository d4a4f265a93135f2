"""fabrika's exception tree.

    FabrikaError
    ├── ConfigError          bad pipeline YAML / CLI values (CLI exit code 2)
    ├── InputError           a missing or malformed input file (seeds, pools)
    ├── LLMError             one failed LLM request; ``kind`` says why
    │   └── CacheMissError   ``--cache-only`` and the answer is not cached
    ├── StoreError           a run directory that cannot be read or written
    └── SandboxError         the sandbox itself failed (not a verifier's verdict)
        └── SandboxInfrastructureError  no verdict for reasons of the host (worker death,
                                        framing, wall ceiling): transient, the item stays pending

Rejections of untrusted LLM output are *data* (rows with ``status="rejected"``
and a ``reason``), never exceptions.
"""

from __future__ import annotations

from typing import Literal

LLMErrorKind = Literal[
    "rate_limit",
    "timeout",
    "connection",
    "server",
    "bad_request",
    "auth",
    "not_found",
    "context_length",
    "truncated",
    "cache_miss",
    "unavailable",
]

RETRYABLE_KINDS: frozenset[str] = frozenset({"rate_limit", "timeout", "connection", "server"})


class FabrikaError(Exception):
    """Base class of every error fabrika raises on purpose."""


class ConfigError(FabrikaError, ValueError):
    """A configuration value is wrong; the message names the field, the value and the fix."""


class InputError(FabrikaError):
    """An input file is missing or malformed."""


class StoreError(FabrikaError):
    """A run directory cannot be read or written."""


class SandboxError(FabrikaError):
    """The sandbox machinery failed (distinct from a verifier's error verdict)."""


class SandboxInfrastructureError(SandboxError):
    """The sandbox could not reach a verdict for reasons of the host, not of the verifier: a worker
    died or sent a garbled stream, or the host starved a verifier past the wall ceiling — on a fresh
    worker as well. Transient: the item must stay pending (retried), never become a verdict."""


class LLMError(FabrikaError):
    """One LLM request failed. ``kind`` is one of :data:`LLMErrorKind`.

    ``retry_after`` carries the server's Retry-After (seconds) when it sent one;
    ``attempts`` is how many tries the retry loop made before giving up.
    """

    def __init__(self, kind: LLMErrorKind, message: str, *, retry_after: float | None = None,
                 status_code: int | None = None) -> None:
        super().__init__(f"[{kind}] {message}")
        self.kind: LLMErrorKind = kind
        self.message = message
        self.retry_after = retry_after
        self.status_code = status_code
        self.attempts = 1

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS


class CacheMissError(LLMError):
    """``--cache-only`` was set and a request is not in the cache."""

    def __init__(self, message: str) -> None:
        super().__init__("cache_miss", message)
