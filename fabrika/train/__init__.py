"""Thin training over TRL: SFT, three GRPO experts, and the two-stage SLERP merge.

Each method is a short script over the library made for it — TRL's
``SFTTrainer`` / ``GRPOTrainer`` configured by subclasses of TRL's own configs
(:class:`~fabrika.train.sft.FabrikaSFTConfig`, :class:`~fabrika.train.grpo.FabrikaGRPOConfig`)
and mergekit's SLERP (:mod:`fabrika.train.merge`). Rewards live in
:mod:`fabrika.rewards`. Names are imported lazily: torch/TRL load only when used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FabrikaSFTConfig": "fabrika.train.sft",
    "build_sft_trainer": "fabrika.train.sft",
    "load_sft_config": "fabrika.train.sft",
    "run_sft": "fabrika.train.sft",
    "FabrikaGRPOConfig": "fabrika.train.grpo",
    "build_grpo_trainer": "fabrika.train.grpo",
    "load_grpo_config": "fabrika.train.grpo",
    "run_grpo": "fabrika.train.grpo",
    "MergeConfig": "fabrika.train.merge",
    "grid_search": "fabrika.train.merge",
    "load_merge_config": "fabrika.train.merge",
    "run_merge_config": "fabrika.train.merge",
    "two_stage_merge": "fabrika.train.merge",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fabrika.train' has no attribute {name!r}")
