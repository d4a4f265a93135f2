"""SFT on a fabrika-shaped export: completion-only labels, every parameter moves, bad data fails fast."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datasets import Dataset

from fabrika.errors import ConfigError, InputError
from fabrika.train.sft import build_sft_trainer, load_sft_config, run_sft

pytestmark = [pytest.mark.slow, pytest.mark.train]

CPU = {"bf16": False, "max_length": 512, "per_device_train_batch_size": 2, "report_to": "none",
       "save_strategy": "no", "logging_steps": 1, "learning_rate": 1e-2, "dataset_num_proc": None,
       "use_cpu": True, "seed": 0}


def _config(tmp_path: Path, tiny_model: Path, dataset: Path, **extra) -> object:
    return load_sft_config(overrides={"model_name_or_path": str(tiny_model), "dataset_path": str(dataset),
                                      "output_dir": str(tmp_path / "out"), **CPU, **extra})


def test_preset_is_the_reference_recipe_and_overridable(tmp_path: Path, tiny_model: Path, sft_export: Path) -> None:
    cfg = load_sft_config(overrides={"model_name_or_path": str(tiny_model), "dataset_path": str(sft_export),
                                     "output_dir": str(tmp_path), "use_cpu": True, "bf16": False})
    assert cfg.max_length == 32768 and cfg.num_train_epochs == 2
    assert cfg.lr_scheduler_type == "cosine" and cfg.optim == "adamw_torch"
    assert cfg.completion_only_loss is True and cfg.bf16 is False


def test_unknown_field_is_named(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: x\ndataset_path: y\nlearning_rat: 0.1\n")
    with pytest.raises(ConfigError, match="learning_rat.*learning_rate"):
        load_sft_config(cfg)


def test_labels_are_exactly_the_completion_tokens(tmp_path: Path, tiny_model: Path, sft_export: Path) -> None:
    trainer = build_sft_trainer(_config(tmp_path, tiny_model, sft_export))
    tok = trainer.processing_class
    source = Dataset.load_from_disk(str(sft_export))
    for i, row in enumerate(trainer.train_dataset):
        src = source[i]
        tools = src["tools"] or None
        prompt_text = tok.apply_chat_template(src["prompt"], tools=tools, tokenize=False, add_generation_prompt=True)
        full_text = tok.apply_chat_template(src["prompt"] + src["completion"], tools=tools, tokenize=False)
        assert full_text.startswith(prompt_text)
        completion_text = full_text[len(prompt_text):]
        trained = [t for t, lab in zip(row["input_ids"], row["labels"]) if lab != -100]
        assert [lab for lab in row["labels"] if lab != -100] == trained  # labels are the ids themselves
        assert tok.decode(trained) == completion_text
        assert trained == tok(completion_text, add_special_tokens=False)["input_ids"]
        assert trained[-2] == tok.convert_tokens_to_ids("<|im_end|>")  # the model learns to stop


def test_sft_trains_every_parameter_and_saves(tmp_path: Path, tiny_model: Path, sft_export: Path) -> None:
    cfg = _config(tmp_path, tiny_model, sft_export, max_steps=3)
    trainer = build_sft_trainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    unchanged = [n for n, p in trainer.model.named_parameters() if torch.equal(before[n], p.detach())]
    assert unchanged == []
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))


def test_run_sft_writes_a_loadable_model(tmp_path: Path, tiny_model: Path, sft_export: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = _config(tmp_path, tiny_model, sft_export, max_steps=1)
    run_sft(cfg)
    model = AutoModelForCausalLM.from_pretrained(cfg.output_dir, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(cfg.output_dir, local_files_only=True)
    assert tok.chat_template and model.config.hidden_size == 64


def test_wrong_format_fails_before_training(tmp_path: Path, tiny_model: Path) -> None:
    bad = tmp_path / "bad"
    Dataset.from_list([{"messages": [{"role": "user", "content": "hi"}]}]).save_to_disk(str(bad))
    with pytest.raises(InputError, match=r"lacks column\(s\) \['prompt', 'completion'\]"):
        build_sft_trainer(_config(tmp_path, tiny_model, bad))
    no_assistant = tmp_path / "noasst"
    Dataset.from_list([{"prompt": '[{"role": "user", "content": "hi"}]',
                        "completion": '[{"role": "user", "content": "hi"}]'}]).save_to_disk(str(no_assistant))
    with pytest.raises(InputError, match="no assistant message"):
        build_sft_trainer(_config(tmp_path, tiny_model, no_assistant))
    with pytest.raises(InputError, match="does not exist"):
        build_sft_trainer(_config(tmp_path, tiny_model, tmp_path / "missing"))


# packaged copy of shared/chat_templates/qwen3.jinja
QWEN3 = Path(__file__).resolve().parents[2] / "fabrika" / "schemas" / "templates" / "qwen3.jinja"


@pytest.mark.skipif(not QWEN3.is_file(), reason="reference Qwen3 template not present")
def test_chat_template_from_file_qwen3(tmp_path: Path, tiny_model: Path, sft_export: Path) -> None:
    """The real Qwen3 template (no generation markers) given as a file: labels still cover the completion only."""
    trainer = build_sft_trainer(_config(tmp_path, tiny_model, sft_export, chat_template_path=str(QWEN3)))
    tok = trainer.processing_class
    assert tok.chat_template == QWEN3.read_text()
    row = trainer.train_dataset[0]  # the tool-call row
    trained = tok.decode([t for t, lab in zip(row["input_ids"], row["labels"]) if lab != -100])
    assert trained == ('<think>\n\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Москва"}}'
                       "\n</tool_call><|im_end|>\n")
    prompt_part = tok.decode([t for t, lab in zip(row["input_ids"], row["labels"]) if lab == -100])
    assert prompt_part.endswith("<|im_start|>assistant\n") and "Какая погода в Москве?" in prompt_part


def test_resume_from_last_checkpoint(tmp_path: Path, tiny_model: Path, sft_export: Path) -> None:
    first = _config(tmp_path, tiny_model, sft_export, max_steps=2, save_strategy="steps", save_steps=2)
    run_sft(first)
    assert (tmp_path / "out" / "checkpoint-2").is_dir()
    second = _config(tmp_path, tiny_model, sft_export, max_steps=3, save_strategy="no",
                     resume_from_checkpoint="auto")
    trainer = run_sft(second)
    assert trainer.state.global_step == 3
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [1, 2, 3]  # 1–2 restored, 3 new
    with pytest.raises(ConfigError, match="not a checkpoint directory"):
        run_sft(_config(tmp_path, tiny_model, sft_export, resume_from_checkpoint=str(tmp_path / "nope")))


def test_rows_longer_than_max_length_are_counted_before_training(tmp_path: Path, tiny_model: Path,
                                                                 sft_export: Path, capsys) -> None:
    build_sft_trainer(_config(tmp_path, tiny_model, sft_export, max_length=24))
    err = capsys.readouterr().err
    assert "rows are longer than max_length=24 tokens" in err
    build_sft_trainer(_config(tmp_path, tiny_model, sft_export, max_length=4096))
    assert "longer than max_length" not in capsys.readouterr().err
