"""What goes over the wire (both transports) and the vLLM adapter against a stand-in ``vllm`` module."""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

import pytest

from fabrika.llm import ChatRequest, LLMConfig, LLMEngine, build_engine
from fabrika.testing import FakeOpenAIServer
from tests.llm.llm_helpers import req

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
FMT = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}


@pytest.mark.parametrize("transport", ["raw", "aiohttp", "openai_sdk"])
async def test_request_fields_reach_the_server(server: FakeOpenAIServer, make_engine: Callable[..., LLMEngine],
                                               transport: str) -> None:
    full = req("Привет", tools=(TOOL,), tool_choice="auto", temperature=0.3, top_p=0.9, max_tokens=64, n=2, seed=10,
               sample_index=2, response_format=FMT, stop=("###",), extra_body={"guided_json": {"type": "object"}},
               tag="fc.user", meta={"stage": "s"})
    async with make_engine(server, transport=transport) as eng:
        resp, bare = await eng.complete([full, req("коротко")])
    assert resp.ok and len(resp.choices) == 2 and bare.ok
    sent = {r["messages"][0]["content"]: r for r in server.requests}
    body = sent["Привет"]
    assert body["model"] == "fake" and body["tools"] == [TOOL] and body["tool_choice"] == "auto"
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["n"]) == (0.3, 0.9, 64, 2)
    assert body["seed"] == 12  # seed + sample_index: K samples of one prompt must differ
    assert body["response_format"] == FMT and body["stop"] == ["###"] and body["guided_json"] == {"type": "object"}
    assert not {"tag", "meta", "sample_index"} & set(body)
    assert set(sent["коротко"]) == {"model", "messages"}


class _Obj:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def fake_vllm(outputs: list[tuple[str, str]], fail: Exception | None = None) -> tuple[types.ModuleType, dict]:
    seen: dict[str, Any] = {}

    class Tokenizer:
        """A Llama-style tokenizer: the template writes BOS itself; encoding text adds another unless told not to."""

        bos = 1

        def apply_chat_template(self, messages: list, tools: Any = None, tokenize: bool = True, **kw: Any) -> Any:
            seen["template"] = {"messages": messages, "tools": tools, **kw}
            if any(m.get("role") == "assistant" for m in messages[:1]):
                raise ValueError("Conversation roles must alternate user/assistant/user/assistant/...")
            text = "<s>" + "".join(f"[{m['role']}]{m.get('content')}" for m in messages) + "[assistant]"
            return self.encode(text, add_special_tokens=False) if tokenize else text

        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            ids = [self.bos] if add_special_tokens else []
            for k, part in enumerate(text.split("<s>")):
                if k:
                    ids.append(self.bos)
                ids.extend(100 + ord(ch) % 50 for ch in part)
            return ids

    class Engine:
        def get_tokenizer(self) -> Tokenizer:
            return Tokenizer()

        async def generate(self, prompt: Any, params: Any, request_id: str) -> Any:
            seen["params"] = params.kw
            seen["prompt"] = prompt
            seen["calls"] = seen.get("calls", 0) + 1
            if fail is not None:
                raise fail
            yield _Obj(outputs=[_Obj(text=t, finish_reason=f, token_ids=[1, 2, 3]) for t, f in outputs],
                       prompt_token_ids=[1] * 7)

    mod = types.ModuleType("vllm")
    mod.AsyncEngineArgs = lambda **kw: seen.setdefault("args", kw)  # type: ignore[attr-defined]
    mod.AsyncLLMEngine = _Obj(from_engine_args=lambda args: Engine())  # type: ignore[attr-defined]
    def sampling_params(**kw: Any) -> _Obj:
        if "bogus" in kw:
            raise TypeError("unexpected keyword argument 'bogus'")
        return _Obj(kw=kw)

    mod.SamplingParams = sampling_params  # type: ignore[attr-defined]
    mod.sampling_params = _Obj(StructuredOutputsParams=lambda json: ("structured", json))  # type: ignore[attr-defined]
    return mod, seen


async def test_vllm_adapter_maps_requests_and_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, seen = fake_vllm([('Ищу.<tool_call>{"name": "f", "arguments": {"q": "x"}}</tool_call>', "stop"),
                           ("обрыв", "length")])
    monkeypatch.setitem(sys.modules, "vllm", mod)
    cfg = LLMConfig(backend="vllm", model="tiny", cache={"enabled": False}, vllm={"max_model_len": 4096})
    async with build_engine(cfg, None) as eng:
        resp = await eng.complete_one(req("Найди", tools=(TOOL,), n=2, seed=1, sample_index=1, response_format=FMT,
                                          extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
    assert seen["args"]["model"] == "tiny" and seen["args"]["max_model_len"] == 4096
    assert seen["template"]["tools"] == [TOOL] and seen["template"]["enable_thinking"] is False
    assert seen["params"]["seed"] == 2 and seen["params"]["n"] == 2
    assert seen["params"]["structured_outputs"] == ("structured", {"type": "object"})
    first, second = resp.choices
    assert first.content == "Ищу." and first.tool_calls[0]["name"] == "f" and first.finish_reason == "tool_calls"
    assert second.truncated and resp.backend == "vllm" and resp.usage.prompt_tokens == 7
    assert eng.accounting.totals()["truncated"] == 1


async def test_vllm_adapter_maps_context_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, _ = fake_vllm([], fail=ValueError("prompt is longer than max_model_len"))
    monkeypatch.setitem(sys.modules, "vllm", mod)
    async with build_engine(LLMConfig(backend="vllm", model="tiny", cache={"enabled": False}), None) as eng:
        resp = await eng.complete_one(req("x"))
    assert resp.error.kind == "context_length" and resp.attempts == 1


async def test_vllm_gets_token_ids_with_one_bos(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, seen = fake_vllm([("Ответ.", "stop")])
    monkeypatch.setitem(sys.modules, "vllm", mod)
    async with build_engine(LLMConfig(backend="vllm", model="tiny", cache={"enabled": False}), None) as eng:
        resp = await eng.complete_one(req("Привет"))
    assert resp.ok
    ids = seen["prompt"]["prompt_token_ids"]
    assert ids[0] == 1 and ids.count(1) == 1  # the template's BOS, and no second one from re-tokenising text
    assert "prompt" not in seen["prompt"]  # no text for vLLM to tokenise again


async def test_vllm_abort_is_retried_and_template_errors_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, seen = fake_vllm([("", "abort")])
    monkeypatch.setitem(sys.modules, "vllm", mod)
    cfg = LLMConfig(backend="vllm", model="tiny", cache={"enabled": False}, max_retries=2, backoff_initial_s=0.001,
                    backoff_max_s=0.001, backoff_jitter_s=0)
    async with build_engine(cfg, None) as eng:
        aborted = await eng.complete_one(req("x"))
        assert aborted.error.kind == "server" and aborted.attempts == 3 and "abort" in aborted.error.message
        calls = seen["calls"]
        bad = await eng.complete_one(ChatRequest(messages=({"role": "assistant", "content": "сначала я"},)))
    assert bad.error.kind == "bad_request" and bad.attempts == 1 and "chat template" in bad.error.message
    assert seen["calls"] == calls  # the template failed before vLLM was asked


@pytest.mark.parametrize("data", [None, [], {"choices": []}, {"choices": ["x"]}, {"choices": [{"message": "hi"}]},
                                  {"choices": [{"message": {}}], "usage": {"prompt_tokens": "many"}}])
def test_malformed_completions_are_retryable_server_errors(data: Any) -> None:
    from fabrika.errors import LLMError
    from fabrika.llm.openai_compat import parse_completion

    with pytest.raises(LLMError) as info:
        parse_completion(data, "openai")
    assert info.value.kind == "server" and info.value.retryable


def test_odd_but_usable_completions_are_normalised() -> None:
    from fabrika.llm.openai_compat import parse_completion

    resp = parse_completion({"choices": [{"message": {"content": [{"type": "text", "text": "при"}, {"text": "вет"}],
                                                      "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}},
                                                                     "junk"], "reasoning_content": "думаю"},
                                          "finish_reason": "stop"}]}, "openai")
    [c] = resp.choices
    assert c.content == "привет" and c.reasoning == "думаю"
    assert c.tool_calls == ({"id": "", "name": "f", "arguments": '{"a": 1}'},)


async def test_default_extra_body_merges_under_the_request_and_in_flight_counts(
        server: FakeOpenAIServer, make_engine: Callable[..., LLMEngine]) -> None:
    server.app.latency_ms = 50
    eng = make_engine(server, extra_body={"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20})
    async with eng:
        import asyncio

        task = asyncio.ensure_future(eng.complete([req("a"), req("b", extra_body={"top_k": 5})]))
        await asyncio.sleep(0.02)
        assert eng.in_flight == 2
        await task
        assert eng.in_flight == 0
        assert eng.key(req("a")) != make_engine(server).key(req("a"))  # the default is part of the key
    sent = {r["messages"][0]["content"]: r for r in server.requests}
    assert sent["a"]["chat_template_kwargs"] == {"enable_thinking": False} and sent["a"]["top_k"] == 20
    assert sent["b"]["top_k"] == 5 and sent["b"]["chat_template_kwargs"] == {"enable_thinking": False}


async def test_vllm_adapter_guided_json_and_bad_extra_body(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, seen = fake_vllm([("{}", "stop")])
    monkeypatch.setitem(sys.modules, "vllm", mod)
    async with build_engine(LLMConfig(backend="vllm", model="tiny", cache={"enabled": False}), None) as eng:
        ok = await eng.complete_one(req("x", extra_body={"guided_json": '{"type": "array"}', "top_k": 5}))
        bad = await eng.complete_one(req("y", extra_body={"bogus": 1}))
    assert ok.ok and seen["params"]["structured_outputs"] == ("structured", {"type": "array"})
    assert seen["params"]["top_k"] == 5 and "guided_json" not in seen["params"]
    assert bad.error.kind == "bad_request" and "bogus" in bad.error.message and bad.attempts == 1


async def test_what_orjson_refuses_goes_over_the_wire_with_the_stdlib(
        server: FakeOpenAIServer, make_engine: Callable[..., LLMEngine]) -> None:
    # the body is written with orjson, but an integer beyond 64 bits (which orjson refuses) still
    # reaches the server as the same value; an answer orjson cannot read (NaN) is read by the stdlib
    from fabrika.llm.openai_compat import _body_bytes, _loads

    big = {"guided_json": {"type": "integer", "maximum": 10 ** 30}}
    async with make_engine(server) as eng:
        (resp,) = await eng.complete([req("большое", extra_body=big)])
    assert resp.ok and server.requests[-1]["guided_json"] == big["guided_json"]
    assert _loads(b'{"x": NaN, "y": [1, 2.5, "\\u0416"]}')["y"] == [1, 2.5, "Ж"]
    assert _body_bytes({"a": "Ж", "b": 1.0}) == '{"a":"Ж","b":1.0}'.encode()
