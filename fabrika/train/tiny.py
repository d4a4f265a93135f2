"""Tiny, locally built models for tests and smoke runs (never downloaded).

Training tests must not touch a hub, so we build everything here: a byte-level
BPE tokenizer trained with ``tokenizers`` on a few hundred Russian and English
sentences, a chat template that renders ``tools`` and ``tool_calls`` and carries
its own ``{% generation %}`` markers (TRL only recognises its bundled templates
by exact match), and a random-weight ``Qwen2`` causal LM (hidden 64, 2 layers,
head_dim 32). The same builders serve the SFT, GRPO, merge and vLLM tests.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch / transformers stay lazy: importing fabrika.train must be cheap.
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Qwen-style template. Differences from qwen3.jinja: no default system prompt,
# ``content`` may be None, arguments may be a JSON string or an object, and the
# assistant turn (including its <|im_end|>) sits inside {% generation %}.
TINY_CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- (messages[0].content or '') + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + (messages[0].content or '') + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- generation %}
{{- message.content or '' }}
{%- if message.tool_calls %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '<tool_call>{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>' }}
{%- endgeneration %}
{{- '\\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>' + (message.content or '') + '</tool_response><|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

_RU_SUBJECTS = ["Пользователь", "Ассистент", "Модель", "Город Москва", "Погода", "Новый заказ", "Мой друг", "Этот отчёт"]
_RU_VERBS = ["просит", "находит", "показывает", "отправляет", "проверяет", "описывает"]
_RU_OBJECTS = ["прогноз погоды на завтра", "список задач", "курс рубля", "билеты в Казань",
               "ответ в формате JSON", "короткое письмо без запятых", "три пункта плана"]
_EN_SUBJECTS = ["The user", "The assistant", "My friend", "This tool", "The weather service", "A new order"]
_EN_VERBS = ["asks for", "returns", "checks", "books", "describes"]
_EN_OBJECTS = ["the weather in Paris", "a flight to Berlin", "the exchange rate", "a short summary",
               "three bullet points", "the function arguments"]
_EXTRA = ['{"name": "get_weather", "arguments": {"city": "Москва"}}', "<tool_call>", "</tool_call>",
          "<tool_response>", "</tool_response>", "# Tools", "<tools>", "</tools>", "system", "user",
          "assistant", "tool", "0123456789", "Ответь кратко.", "Answer briefly."]


def corpus() -> list[str]:
    """A few hundred deterministic Russian and English sentences (the BPE training text)."""
    ru = [f"{s} {v} {o}." for s, v, o in itertools.product(_RU_SUBJECTS, _RU_VERBS, _RU_OBJECTS)]
    en = [f"{s} {v} {o}." for s, v, o in itertools.product(_EN_SUBJECTS, _EN_VERBS, _EN_OBJECTS)]
    return ru + en + _EXTRA


def build_tokenizer(vocab_size: int = 640) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on :func:`corpus` and wrap it as a left-padding fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        padding_side="left",
        model_max_length=2048,
    )
    fast.chat_template = TINY_CHAT_TEMPLATE
    return fast


def build_model(tokenizer: PreTrainedTokenizerFast, *, seed: int = 0, num_labels: int | None = None,
                arch: str = "qwen2", **overrides: Any) -> PreTrainedModel:
    """A random-weight Qwen2 (hidden 64, 2 layers, head_dim 32); ``num_labels`` makes it a scorer (an RM).

    ``arch="qwen3"`` builds the same size as Qwen3 (which adds ``self_attn.q_norm`` / ``k_norm``).
    """
    import torch
    import transformers
    from transformers import GenerationConfig

    if arch not in ("qwen2", "qwen3"):
        raise ValueError(f"arch must be 'qwen2' or 'qwen3', got {arch!r}")
    prefix = "Qwen2" if arch == "qwen2" else "Qwen3"
    Qwen2Config = getattr(transformers, f"{prefix}Config")
    Qwen2ForCausalLM = getattr(transformers, f"{prefix}ForCausalLM")
    Qwen2ForSequenceClassification = getattr(transformers, f"{prefix}ForSequenceClassification")

    config_kwargs: dict[str, Any] = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    config_kwargs.update(overrides)
    config = Qwen2Config(**config_kwargs)
    torch.manual_seed(seed)
    if num_labels is not None:
        config.num_labels = num_labels
        return Qwen2ForSequenceClassification(config)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    return model


def save_tiny(path: str | Path, *, seed: int = 0, num_labels: int | None = None) -> Path:
    """Build and save a tiny model + tokenizer to ``path`` (loadable with ``from_pretrained``)."""
    path = Path(path)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=seed, num_labels=num_labels)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
