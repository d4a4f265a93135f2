"""Test doubles that ship with fabrika (no real model, no network beyond 127.0.0.1).

* :class:`FakeOpenAIServer` — a real OpenAI-compatible HTTP server on a
  background thread: scripted answers per prompt substring / tag, seeded fault
  injection, request counters (see :mod:`fabrika.testing.fake_server`).
* :class:`SimVLLMConfig` — the fake server's vLLM mode: slots, prefix cache,
  simulated time, ``/stats`` (see :mod:`fabrika.testing.sim_vllm`).
* :func:`break_arguments` — tool-call arguments that violate a schema.
* :data:`FAULT_KINDS` — the faults the server can inject.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FAULT_KINDS", "FakeOpenAIApp", "FakeOpenAIServer", "SimVLLMConfig", "break_arguments"]


def __getattr__(name: str) -> Any:
    # Lazy, so `python -m fabrika.testing.fake_server` does not import the module twice.
    if name in __all__:
        from fabrika.testing import fake_server

        return getattr(fake_server, name)
    raise AttributeError(f"module 'fabrika.testing' has no attribute {name!r}")
