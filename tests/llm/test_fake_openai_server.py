"""The fake server through the real ``openai`` client: routes, scripts, faults, counters."""

from __future__ import annotations

import asyncio
import json
import weakref

import jsonschema
import openai
import pytest

from fabrika.testing import FAULT_KINDS, FakeOpenAIServer

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"]}}}


_CLIENTS: weakref.WeakKeyDictionary[FakeOpenAIServer, openai.OpenAI] = weakref.WeakKeyDictionary()


def client(srv: FakeOpenAIServer) -> openai.OpenAI:
    """One client per server (building a client costs more than a request)."""
    if srv not in _CLIENTS:
        _CLIENTS[srv] = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=5)
    return _CLIENTS[srv]


def ask(srv: FakeOpenAIServer, text: str = "привет", **kw: object) -> object:
    return client(srv).chat.completions.create(model="fake", messages=[{"role": "user", "content": text}], **kw)


def test_models_and_default_text(server: FakeOpenAIServer) -> None:
    assert [m.id for m in client(server).models.list().data] == ["fake"]
    r = ask(server, "как дела?")
    assert r.choices[0].message.content.startswith("[fake]")
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert server.counts["routes"] == {"models": 1, "default": 1}
    assert server.requests[-1]["messages"][0]["content"] == "как дела?"


def test_scripts_match_on_content_in_order_and_exhaust(server: FakeOpenAIServer) -> None:
    server.script(match="Ты — планировщик", responses=["план 1", "план 2"], name="planner")
    server.script(match=lambda r: r.get("temperature") == 0.5, responder=lambda r: {"content": "по температуре"})
    assert ask(server, "Ты — планировщик. Составь").choices[0].message.content == "план 1"
    assert ask(server, "Ты — планировщик. Ещё").choices[0].message.content == "план 2"
    # exhausted: falls through to the default answer
    assert ask(server, "Ты — планировщик.").choices[0].message.content.startswith("[fake]")
    assert ask(server, "x", temperature=0.5).choices[0].message.content == "по температуре"
    assert server.counts["routes"] == {"planner": 2, "default": 1, "script1": 1}


def test_script_cycle_tool_calls_and_n(server: FakeOpenAIServer) -> None:
    server.script(responses=[{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Казань", "days": 2}}]}],
                  cycle=True)
    for _ in range(2):
        r = ask(server, tools=[WEATHER], n=3)
        assert len(r.choices) == 3
        call = r.choices[0].message.tool_calls[0]
        assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Казань"
        assert r.choices[0].finish_reason == "tool_calls"


def test_default_tool_call_and_json_schema_are_valid(server: FakeOpenAIServer) -> None:
    for i in range(5):
        r = ask(server, f"погода {i}", tools=[WEATHER])
        call = r.choices[0].message.tool_calls[0]
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "items": {"type": "array", "items": {
        "type": "string"}, "minItems": 1}}, "required": ["ok", "items"]}
    r = ask(server, "json", response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = ask(server, "без инструментов", tools=[WEATHER], tool_choice="none")
    assert r.choices[0].message.tool_calls is None


@pytest.mark.parametrize(("kind", "exc"), [("rate_limit", openai.RateLimitError), ("server", openai.InternalServerError),
                                           ("bad_request", openai.BadRequestError),
                                           ("auth", openai.AuthenticationError), ("not_found", openai.NotFoundError),
                                           ("context_length", openai.BadRequestError)])
def test_http_faults(server: FakeOpenAIServer, kind: str, exc: type[Exception]) -> None:
    server.faults(kind=kind, match="сломай", times=1, retry_after=2)
    with pytest.raises(exc) as info:
        ask(server, "сломай меня")
    if kind == "rate_limit":
        assert info.value.response.headers["retry-after"] == "2"
    if kind == "context_length":
        assert info.value.code == "context_length_exceeded"
    assert ask(server, "сломай меня").choices[0].message.content  # times=1: the second passes
    assert server.counts["faults"] == {kind: 1}


def test_content_faults(server: FakeOpenAIServer) -> None:
    for kind in ("truncated_json", "length", "unknown_tool", "bad_args", "wrong_language"):
        server.faults(kind=kind, match=kind, times=1)
    r = ask(server, "truncated_json")
    with pytest.raises(ValueError):
        json.loads(r.choices[0].message.content)
    assert ask(server, "length").choices[0].finish_reason == "length"
    assert ask(server, "unknown_tool", tools=[WEATHER]).choices[0].message.tool_calls[0].function.name == "no_such_tool"
    args = json.loads(ask(server, "bad_args", tools=[WEATHER]).choices[0].message.tool_calls[0].function.arguments)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(args, WEATHER["function"]["parameters"])
    assert "English" in ask(server, "wrong_language").choices[0].message.content
    assert sorted(server.counts["faults"]) == sorted(["truncated_json", "length", "unknown_tool", "bad_args",
                                                     "wrong_language"])


def test_hang_times_out_client() -> None:
    with FakeOpenAIServer(hang_s=5) as srv:
        srv.faults(kind="hang", times=1)
        c = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=0.3)
        with pytest.raises(openai.APITimeoutError):
            c.chat.completions.create(model="fake", messages=[{"role": "user", "content": "x"}])
        assert srv.counts["faults"] == {"hang": 1}


def test_rate_faults_are_seeded_per_request_and_attempt() -> None:
    outcomes = []
    for _ in range(2):
        with FakeOpenAIServer() as srv:
            srv.faults(rate=0.5, kinds=["server"], seed=7)
            row = []
            for i in range(20):
                try:
                    ask(srv, f"q{i}")
                    row.append("ok")
                except openai.InternalServerError:
                    row.append("500")
            outcomes.append(row)
    assert outcomes[0] == outcomes[1]
    assert 3 <= outcomes[0].count("500") <= 17


def test_latency_concurrency_and_reset(server: FakeOpenAIServer) -> None:
    server.app.latency_ms = 100

    async def main() -> None:
        c = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        await asyncio.gather(*[c.chat.completions.create(model="fake", messages=[{"role": "user", "content": str(i)}])
                               for i in range(20)])
        await c.close()

    asyncio.run(main())
    assert server.served == 20 and server.max_in_flight == 20
    server.reset_counts()
    assert server.served == 0 and server.counts["routes"] == {}


def test_bad_inputs_rejected_with_clear_errors(server: FakeOpenAIServer) -> None:
    with pytest.raises(ValueError, match="unknown fault kind 'nope'"):
        server.faults(kind="nope")
    with pytest.raises(ValueError, match="exactly one"):
        server.script(match="x")
    assert set(FAULT_KINDS) >= {"rate_limit", "hang", "bad_args"}


def test_runs_as_a_subprocess_for_benches() -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "fabrika.testing.fake_server", "--port", "0", "--fault-rate", "1",
                             "--fault-kinds", "server"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[0] == "READY"
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{line[1]}/v1", api_key="x", max_retries=0, timeout=5)
        assert [m.id for m in c.models.list().data] == ["fake"]
        with pytest.raises(openai.InternalServerError):
            c.chat.completions.create(model="fake", messages=[{"role": "user", "content": "x"}])
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=5)
    assert "RuntimeWarning" not in err


def test_public_exports() -> None:
    import fabrika.testing

    assert sorted(fabrika.testing.__all__) == [
        "FAULT_KINDS", "FakeOpenAIApp", "FakeOpenAIServer", "FcModelDouble", "HarnessContext", "ScriptedLLM", "SimVLLMConfig",
        "StageInternalError", "StageRun", "UnscriptedRequest", "break_arguments", "by_tag", "llm_error", "run_stage",
        "sequence", "stage_context"]
    assert all(getattr(fabrika.testing, name) is not None for name in fabrika.testing.__all__)


def test_responder_bug_answers_500_and_is_kept(server: FakeOpenAIServer) -> None:
    server.script(responder=lambda r: r["no_such_key"])
    with pytest.raises(openai.InternalServerError, match="KeyError"):
        ask(server, "x")
    assert len(server.errors) == 1 and "no_such_key" in server.errors[0]
    assert server.counts["routes"] == {"handler_error": 1}


def test_large_bodies_arrive_whole(server: FakeOpenAIServer) -> None:
    big = "длинный текст " * 50_000  # ~1.4 MB of UTF-8, many TCP segments
    server.script(responder=lambda r: {"content": str(len(r["messages"][0]["content"]))})
    assert ask(server, big).choices[0].message.content == str(len(big))


def test_replay_serves_recorded_bytes_without_the_responder() -> None:
    import urllib.request

    calls: list[str] = []

    def responder(req: dict) -> str:
        text = req["messages"][0]["content"]
        calls.append(text)
        return f"ответ на {text}"

    def post(srv: FakeOpenAIServer, text: str, tag: str = "fc.user", path: str = "chat/completions") -> bytes:
        body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": text}]}).encode()
        req = urllib.request.Request(f"{srv.base_url}/{path}", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "x-fabrika-tag": tag})
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - loopback
            return resp.read()

    with FakeOpenAIServer(replay=True) as srv:
        srv.script(tag="fc.", responder=responder)
        first = {t: post(srv, t) for t in ("а", "б")}
        assert post(srv, "а", tag="fc.tool") != b""  # another tag is another request
        assert calls == ["а", "б", "а"]
        state = json.loads(post(srv, "", path="replay"))  # POST: recording → serving
        assert state == {"serving": True, "recorded": 3, "hits": 0, "misses": 0}
        assert post(srv, "а") == first["а"] and post(srv, "б") == first["б"]  # the recorded bytes, verbatim
        assert calls == ["а", "б", "а"]  # the responder did not run for them
        assert json.loads(post(srv, "в"))["choices"][0]["message"]["content"] == "ответ на в"  # a miss: answered anew
        assert calls[-1] == "в"
        assert srv.app.replay is not None and srv.app.replay.snapshot() == {
            "serving": True, "recorded": 3, "hits": 2, "misses": 1}
        assert srv.counts["routes"]["replay"] == 2
    with FakeOpenAIServer() as plain, pytest.raises(RuntimeError, match="replay=True"):
        plain.replay_serve()
