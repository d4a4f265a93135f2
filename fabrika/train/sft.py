"""`fabrika train sft`: a thin script over TRL's ``SFTTrainer``.

Read a config, check the exported dataset, build the trainer, train, save —
like TRL's own ``scripts/sft.py``. The dataset is conversational
prompt–completion (``prompt``, ``completion``, optional ``tools``), so the loss
covers the completion only (``completion_only_loss``; TRL folds the mask into
``labels``). The chat template comes from the model's tokenizer or from
``chat_template_path`` (a ``.jinja`` file).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trl import SFTConfig

from fabrika.errors import ConfigError
from fabrika.train.config import (
    SFT_PRESET,
    build_dataclass,
    read_yaml,
    required,
    resolve_checkpoint,
    save_trained,
    with_preset,
)
from fabrika.train.data import load_split, prepare_sft_dataset, rows_over_length

if TYPE_CHECKING:
    from trl import SFTTrainer


@dataclass
class FabrikaSFTConfig(SFTConfig):
    """TRL's ``SFTConfig`` plus where the model and the exported dataset live.

    Parameters:
        model_name_or_path (`str`): local directory of the base model and tokenizer
            (loaded with ``local_files_only=True``; fabrika never downloads weights).
        dataset_path (`str`): directory written by ``Dataset.save_to_disk`` (the SFT export).
        dataset_split (`str`, defaults to ``"train"``): split to use when the export is a ``DatasetDict``.
        torch_dtype (`str`, defaults to ``"auto"``): dtype the model is loaded in (``auto``, ``float32``, ``bfloat16``).
    """

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Local directory of the base model and tokenizer (never downloaded)."})
    dataset_path: str | None = field(
        default=None, metadata={"help": "Directory of the exported SFT dataset (`Dataset.save_to_disk`)."})
    dataset_split: str = field(default="train", metadata={"help": "Split to use if the export is a DatasetDict."})
    torch_dtype: str = field(default="auto", metadata={"help": "dtype the model is loaded in: auto, float32, bfloat16."})


def load_sft_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None, *,
                    use_preset: bool = True) -> FabrikaSFTConfig:
    """The reference preset, then the YAML at ``path``, then ``overrides``."""
    user = read_yaml(path) if path is not None else {}
    values = with_preset(SFT_PRESET, user, overrides, use_preset=use_preset)
    config = build_dataclass(FabrikaSFTConfig, values, where=f"sft config {path or '<dict>'}")
    for name in ("model_name_or_path", "dataset_path"):
        if not getattr(config, name):
            raise ConfigError(f"sft config: `{name}` is required; set it in the YAML or pass --set {name}=...")
    if config.chat_template_path:
        config.chat_template_path = str(template_file(config.chat_template_path))
    return config


def template_file(value: str | Path) -> Path:
    """``chat_template_path`` as an existing file: as given, else relative to the fabrika checkout/install
    (``fabrika/schemas/templates/qwen3.jinja`` works from any directory); a missing one is a one-line error."""
    path = Path(value)
    if path.is_file():
        return path
    packaged = Path(__file__).resolve().parents[2] / path
    if not path.is_absolute() and packaged.is_file():
        return packaged
    raise ConfigError(f"sft config: chat_template_path {str(value)!r} is not a file; point it at a .jinja chat "
                      "template (the packaged Qwen3 one is fabrika/schemas/templates/qwen3.jinja) or remove it to "
                      "use the tokenizer's own")


def load_model_and_tokenizer(path: str, torch_dtype: str = "auto", *, causal: bool = True) -> tuple[Any, Any]:
    """Load a local model and tokenizer; a missing directory is a clear ConfigError."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    if not Path(path).is_dir():
        raise ConfigError(f"model_name_or_path {path!r} is not a local directory; fabrika loads weights only "
                          "from disk (local_files_only=True) — download or build the model first")
    dtype = torch_dtype if torch_dtype == "auto" else getattr(torch, torch_dtype)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    cls = AutoModelForCausalLM if causal else AutoModelForSequenceClassification
    model = cls.from_pretrained(path, local_files_only=True, dtype=dtype)
    return model, tokenizer


def build_sft_trainer(config: FabrikaSFTConfig, callbacks: list[Any] | None = None) -> SFTTrainer:
    """Check the data first (fails fast), then load the model and build ``SFTTrainer``."""
    from trl import SFTTrainer

    dataset = prepare_sft_dataset(load_split(required(config, "dataset_path"), config.dataset_split))
    model, tokenizer = load_model_and_tokenizer(required(config, "model_name_or_path"), config.torch_dtype)
    if config.chat_template_path is None and not tokenizer.chat_template:
        raise ConfigError(f"the tokenizer at {config.model_name_or_path!r} has no chat template; "
                          "set chat_template_path to a .jinja file")
    template = template_file(config.chat_template_path).read_text("utf-8") if config.chat_template_path else None
    over, longest = rows_over_length(dataset, tokenizer, config.max_length, template)
    if over:
        print(f"warning: {over} of {len(dataset)} rows are longer than max_length={config.max_length} tokens "
              f"(longest {longest}); TRL truncates them and drops fully masked ones — raise max_length or "
              "refilter with --set filters.length.max_tokens=N", file=sys.stderr)
    return SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                      callbacks=callbacks)


def run_sft(config: FabrikaSFTConfig) -> SFTTrainer:
    """Train (resuming when ``resume_from_checkpoint`` is a path or ``auto``) and save to ``output_dir``."""
    output_dir = required(config, "output_dir")
    checkpoint = resolve_checkpoint(config.resume_from_checkpoint, output_dir)
    trainer = build_sft_trainer(config)
    trainer.train(resume_from_checkpoint=checkpoint)
    save_trained(trainer, output_dir)
    return trainer
