"""Test doubles that ship with fabrika (no real model, no network beyond 127.0.0.1).

* :class:`FakeOpenAIServer` — a real OpenAI-compatible HTTP server on a
  background thread: scripted answers per prompt substring / tag, seeded fault
  injection, request counters (see :mod:`fabrika.testing.fake_server`).
* :func:`break_arguments` — tool-call arguments that violate a schema.
* :data:`FAULT_KINDS` — the faults the server can inject.
* :func:`sim_engine` — an :class:`~fabrika.llm.engine.LLMEngine` on the ``sim``
  backend with the cache off, for pipeline tests.
"""

from __future__ import annotations

from fabrika.testing.fake_server import FAULT_KINDS, FakeOpenAIApp, FakeOpenAIServer, break_arguments

__all__ = ["FAULT_KINDS", "FakeOpenAIApp", "FakeOpenAIServer", "break_arguments"]
