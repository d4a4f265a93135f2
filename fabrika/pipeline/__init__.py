"""The pipeline document (YAML → pydantic), the stage contract and the runner.

Stage authors need :mod:`fabrika.pipeline.stage` (``Stage``, ``StageConfig``,
``register_stage``, ``ok``, ``rejected``), :mod:`fabrika.pipeline.llm_stage` (``LLMStage``) and :mod:`fabrika.gates`
(``register_gate_group``, ``GatePredicate``); run a pipeline with
``fabrika.pipeline.runner.run_pipeline(load_config(path))``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabrika.pipeline.llm_stage import LLMStage
    from fabrika.pipeline.stage import STAGES, Stage, StageConfig, ok, register_stage, rejected

#: Imported on first use, so a reader of one small module (``fabrika.pipeline.reasons``, the registry)
#: does not pay for the stage machinery and the record schemas.
_WHERE = {"LLMStage": "llm_stage", "STAGES": "stage", "Stage": "stage", "StageConfig": "stage", "ok": "stage",
          "register_stage": "stage", "rejected": "stage"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fabrika.pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fabrika.pipeline.{module}"), name)
    globals()[name] = value
    return value

__all__ = ["STAGES", "LLMStage", "Stage", "StageConfig", "ok", "register_stage", "rejected"]
