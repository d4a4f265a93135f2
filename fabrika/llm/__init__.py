"""fabrika's LLM layer: one async interface, several backends, cache, retries, accounting.

What other packages use::

    from fabrika.llm import ChatRequest, LLMConfig, build_engine, register_sim_responder

    engine = build_engine(LLMConfig(backend="sim"), run_dir)      # the runner does this
    [resp] = await engine.complete([ChatRequest(messages=(...,), tag="fc.planner")])
    engine.accounting.snapshot(); await engine.aclose()

Backends: ``openai`` (:mod:`fabrika.llm.openai_compat`), ``vllm``
(:mod:`fabrika.llm.vllm_local`), ``sim`` (:mod:`fabrika.llm.sim`).
"""

from __future__ import annotations

from fabrika.llm.base import Backend, LLMClient
from fabrika.llm.cache import CACHE_KEY_VERSION, ResponseCache, request_key
from fabrika.llm.config import CacheConfig, EndpointConfig, LLMConfig, SimConfig
from fabrika.llm.engine import LLMEngine
from fabrika.llm.factory import build_engine
from fabrika.llm.sim import SimBackend, register_sim_responder, unregister_sim_responder
from fabrika.llm.types import ChatRequest, ChatResponse, Choice, Usage

__all__ = [
    "Backend",
    "CACHE_KEY_VERSION",
    "CacheConfig",
    "ChatRequest",
    "ChatResponse",
    "Choice",
    "EndpointConfig",
    "LLMClient",
    "LLMConfig",
    "LLMEngine",
    "ResponseCache",
    "SimBackend",
    "SimConfig",
    "Usage",
    "build_engine",
    "register_sim_responder",
    "request_key",
    "unregister_sim_responder",
]
