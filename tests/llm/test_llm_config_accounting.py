"""Config validation, build_engine wiring, the vLLM import guard and the accounting snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from fabrika.errors import ConfigError, LLMError
from fabrika.llm import LLMConfig, LLMEngine, build_engine
from fabrika.llm.accounting import Accounting
from fabrika.llm.types import ChatResponse, Choice, Usage
from tests.llm.llm_helpers import req


def test_defaults_are_sim_with_cache_in_run_dir(tmp_path: Path) -> None:
    eng = build_engine(LLMConfig(), tmp_path)
    assert isinstance(eng, LLMEngine) and eng.backend_name == "sim"
    assert eng.cache is not None and eng.cache.path == tmp_path / "cache.sqlite"
    assert build_engine(LLMConfig(), None).cache is None


def test_config_errors_name_field_and_fix() -> None:
    with pytest.raises(ValidationError, match="llm.endpoints is empty"):
        LLMConfig(backend="openai")
    with pytest.raises(ValidationError, match=r"llm.endpoints\[0\].base_url"):
        LLMConfig(backend="openai", endpoints=[{"base_url": "localhost:8000"}])
    with pytest.raises(ValidationError, match="extra"):
        LLMConfig(temprature=0.5)
    with pytest.raises(ValidationError):
        LLMConfig(sim={"error_rate": 1.5})


def test_api_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = LLMConfig(backend="openai", endpoints=[{"base_url": "http://h/v1", "api_key_env": "FABRIKA_TEST_KEY"}])
    monkeypatch.delenv("FABRIKA_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="FABRIKA_TEST_KEY"):
        cfg.endpoints[0].resolve_api_key()
    monkeypatch.setenv("FABRIKA_TEST_KEY", "sk-1")
    assert cfg.endpoints[0].resolve_api_key() == "sk-1"
    assert LLMConfig(backend="openai", endpoints=[{"base_url": "http://h/v1"}]).endpoints[0].resolve_api_key() == "EMPTY"


def test_vllm_backend_without_vllm_is_a_clear_error() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:  # pragma: no cover
        pytest.skip("vllm is installed here")
    with pytest.raises(ConfigError, match=r"pip install 'fabrika\[vllm\]'"):
        build_engine(LLMConfig(backend="vllm", model="Qwen/Qwen3-0.6B"), None)


def test_vllm_tool_call_parser() -> None:
    from fabrika.llm.vllm_local import parse_tool_calls

    content, calls = parse_tool_calls('Сейчас.<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>')
    assert content == "Сейчас." and calls == ({"id": "call_0", "name": "f", "arguments": '{"a": 1}'},)
    assert parse_tool_calls("просто текст") == ("просто текст", ())


def test_accounting_outcomes_tokens_cost_and_stage_attribution() -> None:
    acct = Accounting({"m": (1.0, 2.0)})
    ok = ChatResponse(choices=(Choice("a"),), usage=Usage(1000, 500), model="m")
    retried = ChatResponse(choices=(Choice("b", finish_reason="length"),), usage=Usage(10, 5), attempts=3)
    hit = ChatResponse(choices=(Choice("c"),), usage=Usage(99, 99), cached=True)
    k1 = acct.key(req("x", tag="fc.user", meta={"stage": "fc.dialogues"}), "m")
    k2 = acct.key(req("x", tag="if.gen"), "m")
    assert k1 == ("fc.dialogues", "fc.user", "m") and k2 == ("if.gen", "if.gen", "m")
    acct.record(k1, ok)
    acct.record_retry(k1)
    acct.record_retry(k1)
    acct.record(k1, retried)
    acct.record(k1, hit)
    acct.record(k2, ChatResponse(error=LLMError("auth", "no")))
    snap = acct.snapshot()
    json.dumps(snap)
    row = next(r for r in snap["rows"] if r["stage"] == "fc.dialogues")
    assert {k: row[k] for k in ("requests", "cache_hits", "retries", "successes", "success_after_retry", "failed",
                                "truncated", "prompt_tokens", "completion_tokens")} == {
        "requests": 3, "cache_hits": 1, "retries": 2, "successes": 1, "success_after_retry": 1, "failed": 0,
        "truncated": 1, "prompt_tokens": 1010, "completion_tokens": 505}
    assert row["cost"] == pytest.approx((1010 * 1.0 + 505 * 2.0) / 1e6)
    assert snap["totals"]["failures"] == {"auth": 1} and snap["totals"]["requests"] == 4


async def test_engine_prices_and_stats(tmp_path: Path) -> None:
    cfg = LLMConfig(model="sim-m", price_per_1m={"sim-m": {"prompt": 1.0, "completion": 1.0}})
    async with build_engine(cfg, None) as eng:
        await eng.complete([req("Привет", meta={"stage": "s1"})])
        stats = eng.stats()
    assert stats["backend"] == "sim" and stats["cache_misses"] == 0
    assert stats["totals"]["cost"] > 0 and stats["rows"][0]["stage"] == "s1"
    with pytest.raises(RuntimeError, match="aclose"):
        await eng.complete([req("x")])


def test_engine_and_backends_satisfy_the_protocols() -> None:
    from fabrika.llm import Backend, LLMClient
    from fabrika.llm.openai_compat import OpenAICompatBackend
    from fabrika.llm.sim import SimBackend

    assert isinstance(build_engine(LLMConfig(), None), LLMClient)
    assert isinstance(SimBackend(), Backend)
    cfg = LLMConfig(backend="openai", endpoints=[{"base_url": "http://127.0.0.1:1/v1"}])
    assert isinstance(OpenAICompatBackend(cfg), Backend)
