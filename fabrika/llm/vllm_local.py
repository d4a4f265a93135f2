"""Backend running vLLM in-process (``backend: vllm``), for single-node GPU runs without a server.

``vllm`` is imported lazily, only when this backend is built; without it the
constructor raises :class:`~fabrika.errors.ConfigError` naming the extra to
install (``pip install 'fabrika[vllm]'``) or the alternative (run ``vllm serve``
and use ``backend: openai``).

The chat template (with ``tools``) is applied by the model's tokenizer and
vLLM gets the resulting **token ids** (``{"prompt_token_ids": ...}``): passing
the rendered text would make vLLM tokenize it again and add a second BOS for
templates that write one themselves (Llama, Gemma). Tool calls are parsed from
Hermes/Qwen-style ``<tool_call>{...}</tool_call>`` blocks; ``response_format``
json_schema becomes vLLM's guided JSON decoding. For other tool-call formats,
serve the model with ``vllm serve --tool-call-parser ...`` and use the
``openai`` backend, which is the tested production path.

Errors: a chat-template failure (roles that do not alternate, a template
without tool support) and vLLM's input validation (``ValueError``) are
deterministic — ``bad_request`` (or ``context_length``), never retried; an
``abort`` finish (engine restart, preemption) or an engine error is a
retryable ``server`` error.

Honesty note: this adapter is unit-tested against a stand-in ``vllm`` module
(``tests/llm/test_llm_wire_and_vllm.py``); it has never run on a GPU in this
repository's tests. ``tests/integration/test_vllm_cpu.py`` runs a real vLLM
(CPU build) through the ``openai`` backend, not this one.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Any

from fabrika.errors import ConfigError, LLMError, LLMErrorKind
from fabrika.llm.schema_gen import response_format_schema
from fabrika.llm.types import ChatRequest, ChatResponse, Choice, Usage

if TYPE_CHECKING:
    from fabrika.llm.config import LLMConfig

BACKEND_NAME = "vllm"
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ConfigError(
            "llm.backend is 'vllm' but the vllm package is not installed; install it with "
            "pip install 'fabrika[vllm]', or run `vllm serve MODEL` and set llm.backend: openai "
            "with llm.endpoints: [{base_url: 'http://host:8000/v1'}]"
        ) from exc
    return vllm


def parse_tool_calls(text: str) -> tuple[str | None, tuple[dict[str, Any], ...]]:
    """Split Hermes-style tool-call blocks from ``text`` → (remaining content or None, calls)."""
    calls = []
    for i, m in enumerate(_TOOL_CALL.finditer(text)):
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            obj = {"name": "", "arguments": m.group(1)}  # untrusted: the caller rejects it with a reason
        args = obj.get("arguments", {})
        calls.append({"id": f"call_{i}", "name": str(obj.get("name", "")),
                      "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)})
    if not calls:
        return text, ()
    rest = _TOOL_CALL.sub("", text).strip()
    return (rest or None), tuple(calls)


class VLLMLocalBackend:
    """Implements :class:`fabrika.llm.base.Backend` on ``vllm.AsyncLLMEngine``."""

    name = BACKEND_NAME

    def __init__(self, config: "LLMConfig") -> None:
        self._vllm = _import_vllm()
        self.model = config.model
        vcfg = config.vllm
        args = self._vllm.AsyncEngineArgs(
            model=config.model,
            tensor_parallel_size=vcfg.tensor_parallel_size,
            gpu_memory_utilization=vcfg.gpu_memory_utilization,
            max_model_len=vcfg.max_model_len,
            **vcfg.engine_kwargs,
        )
        self.engine = self._vllm.AsyncLLMEngine.from_engine_args(args)
        self._tokenizer: Any = None

    async def _get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            tok = self.engine.get_tokenizer()
            self._tokenizer = await tok if hasattr(tok, "__await__") else tok
        return self._tokenizer

    def _sampling(self, request: ChatRequest) -> Any:
        kwargs: dict[str, Any] = {"n": request.n}
        for name in ("temperature", "top_p", "max_tokens"):
            value = getattr(request, name)
            if value is not None:
                kwargs[name] = value
        if request.seed is not None:
            kwargs["seed"] = request.seed + request.sample_index  # as in openai_compat.build_body
        if request.stop:
            kwargs["stop"] = list(request.stop)
        extra = dict(request.extra_body or {})
        extra.pop("chat_template_kwargs", None)
        schema = response_format_schema(request.response_format)
        if "guided_json" in extra:  # the vLLM server's extra_body spelling of guided JSON
            guided = extra.pop("guided_json")
            schema = json.loads(guided) if isinstance(guided, str) else guided
        if schema is not None:
            params_mod = self._vllm.sampling_params
            if hasattr(params_mod, "StructuredOutputsParams"):
                kwargs["structured_outputs"] = params_mod.StructuredOutputsParams(json=schema)
            else:
                kwargs["guided_decoding"] = params_mod.GuidedDecodingParams(json=schema)
        kwargs.update(extra)
        try:
            return self._vllm.SamplingParams(**kwargs)
        except (TypeError, ValueError) as exc:
            raise LLMError("bad_request", f"vllm.SamplingParams rejected {sorted(kwargs)}: {exc}; check the "
                                          "request's extra_body / llm.extra_body keys") from exc

    def _prompt(self, tokenizer: Any, request: ChatRequest) -> dict[str, Any]:
        """``{"prompt_token_ids": [...]}`` from the chat template (one BOS: the template's own)."""
        template_kwargs = dict((request.extra_body or {}).get("chat_template_kwargs") or {})
        try:
            ids = tokenizer.apply_chat_template(list(request.messages), tools=list(request.tools or []) or None,
                                                add_generation_prompt=True, tokenize=True, **template_kwargs)
        except Exception as exc:  # jinja2.TemplateError, ValueError: the same request fails the same way again
            raise LLMError("bad_request", f"vllm: the model's chat template rejected the request "
                                          f"({type(exc).__name__}: {exc})") from exc
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers >= 5 may return a BatchEncoding
            ids = ids["input_ids"]
        ids = list(ids)
        if ids and isinstance(ids[0], (list, tuple)):
            ids = list(ids[0])
        return {"prompt_token_ids": [int(t) for t in ids]}

    async def send(self, request: ChatRequest) -> ChatResponse:
        tokenizer = await self._get_tokenizer()
        sampling = self._sampling(request)  # a bad_request here is terminal, not a server error
        prompt = self._prompt(tokenizer, request)
        try:
            final = None
            async for out in self.engine.generate(prompt, sampling, str(uuid.uuid4())):
                final = out
        except Exception as exc:
            low = str(exc).lower()
            kind: LLMErrorKind
            if "max_model_len" in low or "too long" in low or "maximum context" in low:
                kind = "context_length"
            elif isinstance(exc, (ValueError, TypeError)):
                kind = "bad_request"  # vLLM's input validation: deterministic
            else:
                kind = "server"  # engine dead / restarted: retryable
            raise LLMError(kind, f"vllm: {type(exc).__name__}: {exc}") from exc
        if final is None:
            raise LLMError("server", "vllm returned no output")
        choices = []
        completion = 0
        for o in final.outputs:
            if o.finish_reason not in ("stop", "length"):
                raise LLMError("server", f"vllm finished the request with {o.finish_reason!r} (aborted or "
                                         "unfinished); retried")
            content, calls = parse_tool_calls(o.text) if request.tools else (o.text, ())
            finish = "length" if o.finish_reason == "length" else ("tool_calls" if calls else "stop")
            choices.append(Choice(content=content, tool_calls=calls, finish_reason=finish))
            completion += len(o.token_ids)
        return ChatResponse(choices=tuple(choices), usage=Usage(len(final.prompt_token_ids or ()), completion),
                            model=self.model, backend=self.name)

    async def aclose(self) -> None:
        shutdown = getattr(self.engine, "shutdown", None)
        if callable(shutdown):
            shutdown()
