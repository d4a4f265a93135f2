"""Export → load_from_disk → TRL 1.16 SFT dataset preparation → the loss covers exactly the completion.

The tokenizer is a byte-level BPE trained here on a few hundred sentences and
carries the real Qwen3 chat template (tools and tool calls included); TRL's own
``SFTTrainer._prepare_dataset`` does the tokenisation and folds
``completion_mask`` into ``labels``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest

from fabrika.export.source import open_version
from fabrika.export.writer import ExportConfig, export
from fabrika.schemas.template import load_template

pytest.importorskip("trl")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<tool_response>", "</tool_response>"]


def _corpus() -> list[str]:
    ru = ["Какая погода в Казани", "Уточните город", "Готово, ответ", "Ты — полезный ассистент", "Москва",
          "У меня нет подходящего инструмента", "В Казани −3 °C", "Погода в городе"]
    en = ["Book a ticket from Paris to Berlin", "Book a train ticket", "passengers name", "from_city to_city",
          "You may call one or more functions", '{"type": "function", "function": {"name": "get_weather"}}']
    return [f"{a} {b} {n}." for a, b, n in itertools.product(ru + en, ru + en, range(3))]


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = load_template().source
    return fast


def test_sft_loss_mask_covers_exactly_the_completion(run_dir: Path, tmp_path: Path, tokenizer):
    from trl import SFTConfig, SFTTrainer

    export(open_version(run_dir), ExportConfig(kind="sft", format="hf", out=tmp_path / "sft"))
    ds = datasets.load_from_disk(str(tmp_path / "sft"))
    args = SFTConfig(output_dir=str(tmp_path / "trl"), max_length=None, report_to=[], bf16=False, use_cpu=True)
    fake = SimpleNamespace(_tokenizer=tokenizer, chat_template=None, completion_only_loss=True)
    prepared = SFTTrainer._prepare_dataset(fake, ds, tokenizer, args, packing=False, formatting_func=None,
                                           dataset_name="train")
    assert "labels" in prepared.column_names and len(prepared) == len(ds)
    tpl = load_template()
    for src, out in zip(ds, prepared):
        prompt_text = tpl.render(src["prompt"], src["tools"], add_generation_prompt=True)
        full_text = tpl.render(src["prompt"] + src["completion"], src["tools"])
        assert full_text.startswith(prompt_text)
        n_prompt = len(tokenizer(prompt_text, add_special_tokens=False)["input_ids"])
        ids, labels = out["input_ids"], out["labels"]
        assert ids == tokenizer(full_text, add_special_tokens=False)["input_ids"]
        assert labels[:n_prompt] == [-100] * n_prompt
        assert labels[n_prompt:] == ids[n_prompt:] and len(ids) > n_prompt
        trained = tokenizer.decode([t for t in labels if t != -100])
        assert trained == full_text[len(prompt_text):]
        if src["target_type"] == "tool_call":
            assert "<tool_call>" in trained and '"arguments": {' in trained
