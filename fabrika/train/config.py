"""Reference-recipe presets and YAML → TRL config loading.

New knobs live on subclasses of TRL's own configs (``FabrikaSFTConfig``,
``FabrikaGRPOConfig``); this module only knows how to fill them: the preset of
the reference recipe first, then the user's YAML on top, then CLI overrides.
Unknown keys are a :class:`~fabrika.errors.ConfigError` naming the key and the
closest valid names, before anything heavy is imported or loaded.
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import yaml

from fabrika.errors import ConfigError

Expert = Literal["if", "fc", "general"]
EXPERTS: tuple[str, ...] = ("if", "fc", "general")
if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

# The reference recipe for real hardware (SFT): bf16, 32k context, 2 epochs, AdamW, cosine.
SFT_PRESET: dict[str, Any] = {
    "bf16": True,
    "max_length": 32768,
    "num_train_epochs": 2,
    "optim": "adamw_torch",
    "lr_scheduler_type": "cosine",
    "completion_only_loss": True,
}

# GRPO, shared by the three experts: 8 generations per prompt, lr 1e-6, T=1.0,
# clip ε 0.2 / ε_high 0.28, 512 completions per optimizer step on one process
# (8 per device × 64 accumulation; divide gradient_accumulation_steps by the
# number of GPUs to keep 512 globally).
GRPO_PRESET: dict[str, Any] = {
    "bf16": True,
    "num_generations": 8,
    "learning_rate": 1e-6,
    "temperature": 1.0,
    "epsilon": 0.2,
    "epsilon_high": 0.28,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 64,
    "lr_scheduler_type": "constant",
    "optim": "adamw_torch",
}

# KL β per expert: 0.001 for IF and FC, 0.01 for General.
EXPERT_PRESETS: dict[str, dict[str, Any]] = {
    "if": {"beta": 0.001},
    "fc": {"beta": 0.001},
    "general": {"beta": 0.01},
}


def vllm_available() -> bool:
    """vLLM generation is used by default only where it can run (vllm installed and a CUDA device)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from ``path`` (an empty file is an empty mapping)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config {str(path)!r} does not exist; pass a YAML file (see configs/train/)")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {str(path)!r} must be a YAML mapping of field: value, got {type(data).__name__}")
    return data


def build_dataclass(cls: type[T], values: dict[str, Any], *, where: str = "config") -> T:
    """``cls(**values)`` with unknown keys and bad values reported as :class:`ConfigError`."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - names)
    if unknown:
        hints = {k: difflib.get_close_matches(k, names, n=2) for k in unknown}
        detail = "; ".join(f"{k!r} (did you mean {h}?)" if h else repr(k) for k, h in hints.items())
        raise ConfigError(f"{where}: unknown field(s) {detail}; valid fields are those of {cls.__name__}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{where}: {exc}") from exc


def with_preset(preset: dict[str, Any], user: dict[str, Any], overrides: dict[str, Any] | None = None,
                *, use_preset: bool = True) -> dict[str, Any]:
    """Preset ← user YAML ← overrides (later wins)."""
    out = dict(preset) if use_preset else {}
    out.update(user)
    out.update(overrides or {})
    return out


def required(config: Any, name: str) -> str:
    """``config.<name>`` as a string; the loaders require it, a config built by hand gets the same one-line error."""
    value = getattr(config, name)
    if not value:
        raise ConfigError(f"`{name}` is required; set it in the YAML or pass --set {name}=...")
    return str(value)


def save_trained(trainer: Any, output_dir: str) -> None:
    """Save the model and its tokenizer/processor (TRL keeps it as ``processing_class``) to ``output_dir``."""
    trainer.save_model(output_dir)
    if trainer.processing_class is not None:
        trainer.processing_class.save_pretrained(output_dir)


def resolve_checkpoint(value: str | None, output_dir: str) -> str | None:
    """``resume_from_checkpoint``: a path, or ``auto`` = the last ``checkpoint-N`` in ``output_dir`` (None if none).

    Training runs resume like pipeline stages do: re-running the same command
    with ``--set resume_from_checkpoint=auto`` continues where a crash stopped it.
    """
    if value is None or str(value).lower() in ("", "false", "none"):
        return None
    if str(value).lower() in ("auto", "last", "true"):
        from transformers.trainer_utils import get_last_checkpoint

        return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    if not Path(value).is_dir():
        raise ConfigError(f"resume_from_checkpoint {value!r} is not a checkpoint directory; pass one, or `auto`")
    return str(value)
