"""Test doubles that ship with fabrika (no real model, no network beyond 127.0.0.1).

* :class:`ScriptedLLM` — a backend answered by a ``handler(request)``, under the real
  engine (cache, retries, ``n > 1``, truncation, error kinds), recording the requests it saw;
  :func:`by_tag`, :func:`sequence`, :func:`llm_error` build handlers and errors.
* :func:`stage_context` / :func:`run_stage` — a real-enough stage context over in-memory
  upstream rows, and one stage run the way the runner runs it (pending items, ``internal_error``)
  (see :mod:`fabrika.testing.harness`).
* :class:`FakeOpenAIServer` — a real OpenAI-compatible HTTP server on a
  background thread: scripted answers per prompt substring / tag, seeded fault
  injection, request counters (see :mod:`fabrika.testing.fake_server`).
* :class:`SimVLLMConfig` — the fake server's vLLM mode: slots, prefix cache,
  simulated time, ``/stats`` (see :mod:`fabrika.testing.sim_vllm`).
* :func:`fabrika.testing.llm_use.declaration_problem` — whether a stage class's ``calls_llm``
  agrees with its code (what ``executor: ray`` sends to worker actors depends on it).
* :class:`FcModelDouble` — an OpenAI-compatible double of a real model for every FC role
  (think blocks, prose around JSON, Hermes tags) with tagged, logged faults, installed on a
  :class:`FakeOpenAIServer` (see :mod:`fabrika.testing.fc_double`).
* :func:`break_arguments` — tool-call arguments that violate a schema.
* :data:`FAULT_KINDS` — the faults the server can inject.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabrika.testing.fake_server import (
        FAULT_KINDS,
        FakeOpenAIApp,
        FakeOpenAIServer,
        SimVLLMConfig,
        break_arguments,
    )
    from fabrika.testing.fc_double import FcModelDouble
    from fabrika.testing.harness import (
        HarnessContext,
        ScriptedLLM,
        StageInternalError,
        StageRun,
        UnscriptedRequest,
        by_tag,
        llm_error,
        run_stage,
        sequence,
        stage_context,
    )

__all__ = [
    "FAULT_KINDS",
    "FakeOpenAIApp",
    "FakeOpenAIServer",
    "FcModelDouble",
    "HarnessContext",
    "ScriptedLLM",
    "SimVLLMConfig",
    "StageInternalError",
    "StageRun",
    "UnscriptedRequest",
    "break_arguments",
    "by_tag",
    "llm_error",
    "run_stage",
    "sequence",
    "stage_context",
]
_SERVER = frozenset({"FAULT_KINDS", "FakeOpenAIApp", "FakeOpenAIServer", "SimVLLMConfig", "break_arguments"})


def __getattr__(name: str) -> Any:
    # Lazy, so `python -m fabrika.testing.fake_server` does not import the module twice.
    if name == "FcModelDouble":
        from fabrika.testing import fc_double

        return fc_double.FcModelDouble
    if name in _SERVER:
        from fabrika.testing import fake_server

        return getattr(fake_server, name)
    if name in __all__:
        from fabrika.testing import harness

        return getattr(harness, name)
    raise AttributeError(f"module 'fabrika.testing' has no attribute {name!r}")
