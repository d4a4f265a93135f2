"""Assistant turns with tool calls, each written as its format's own documentation or chat template prints it
(shared by the reader's tests and the FC reward's; no fabrika import, so they also run against old code)."""

from __future__ import annotations

import json
from pathlib import Path

WEATHER = [{"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}]
TWO = [*WEATHER, {"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}]
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in ("get_weather", "get_time")]
ARGS = '{"location": "Paris, France", "unit": "celsius"}'
TEMPLATES = Path("/work/shared/chat_templates")

# Each example as the format's own documentation / chat template writes the assistant turn.
EXAMPLES = {
    # OpenAI Chat Completions: arguments are a JSON string
    "openai": ({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_12345xyz", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]}, WEATHER),
    # Qwen2.5 / Qwen3 chat template (see qwen3.jinja): one block per call, newline-separated
    "qwen": (f'<tool_call>\n{{"name": "get_weather", "arguments": {ARGS}}}\n</tool_call>', WEATHER),
    # Hermes 2 Pro model card: arguments first
    "hermes": (f'<tool_call>\n{{"arguments": {ARGS}, "name": "get_weather"}}\n</tool_call>', WEATHER),
    # Hermes-style with "parameters" (common in fine-tunes and Llama-format exports)
    "hermes_parameters": (f'<tool_call>\n{{"name": "get_weather", "parameters": {ARGS}}}\n</tool_call>', WEATHER),
    # Llama 3.1 JSON tool calling (model card: custom tools answer with a bare JSON object)
    "llama_json": (f'{{"name": "get_weather", "parameters": {ARGS}}}', WEATHER),
    # Llama 3.1/3.3 with the python tag, as vLLM's llama3_json parser reads it; ';' separates calls
    "llama_python_tag": (f'<|python_tag|>{{"name": "get_weather", "parameters": {ARGS}}}; '
                         '{"name": "get_time", "parameters": {"timezone": "Europe/Paris"}}<|eom_id|>', TWO),
    # Llama 3.2 pythonic (model card: [func_name1(params_name1=params_value1, ...), ...])
    "llama_pythonic": ('[get_weather(location="Paris, France", unit="celsius"), get_time(timezone="Europe/Paris")]',
                       TWO),
    # Mistral v3 tokenizer: [TOOL_CALLS] then a JSON list (ids are 9 alphanumerics)
    "mistral_v3": (f'[TOOL_CALLS] [{{"name": "get_weather", "arguments": {ARGS}, "id": "a1B2c3D4e"}}]</s>', WEATHER),
    # Mistral v11+ tokenizer: [TOOL_CALLS]name[ARGS]{...}, repeated per call
    "mistral_v11": (f'[TOOL_CALLS]get_weather[ARGS]{ARGS}[TOOL_CALLS]get_time[ARGS]{{"timezone": "Europe/Paris"}}</s>',
                    TWO),
    # v11+ decoded by a server that drops the [ARGS] special token (vLLM-MLX and others accept it)
    "mistral_v11_no_args_token": (f'[TOOL_CALLS]get_weather{ARGS}', WEATHER),
    # Mistral v13 (Magistral / Devstral): a call id between the name and the arguments
    "mistral_v13": (f'[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{ARGS}', WEATHER),
    # gpt-oss harmony, as the harmony guide prints a model's call (analysis first, then the call)
    "harmony": ('<|start|>assistant<|channel|>analysis<|message|>Need to use function get_weather.<|end|>'
                f'<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{ARGS}'
                '<|call|>', WEATHER),
    # gpt-oss chat template rendering of a past call: the recipient in the role part
    "harmony_role_recipient": (f'<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>'
                               f'{ARGS}<|call|>', WEATHER),
    # bare JSON list of calls (prompting mode, no tool parser)
    "bare_json_list": (json.dumps(TWO, ensure_ascii=False), TWO),
    "bare_json_fenced": (f'```json\n{{"name": "get_weather", "arguments": {ARGS}}}\n```', WEATHER),
}
