"""The pipeline document (YAML → pydantic), the stage contract and the runner.

Stage authors need :mod:`fabrika.pipeline.stage` (``Stage``, ``StageConfig``,
``register_stage``, ``ok``, ``rejected``), :mod:`fabrika.pipeline.llm_stage` (``LLMStage``) and :mod:`fabrika.gates`
(``register_gate_group``, ``GatePredicate``); run a pipeline with
``fabrika.pipeline.runner.run_pipeline(load_config(path))``.
"""

from fabrika.pipeline.llm_stage import LLMStage
from fabrika.pipeline.stage import STAGES, Stage, StageConfig, ok, register_stage, rejected

__all__ = ["STAGES", "LLMStage", "Stage", "StageConfig", "ok", "register_stage", "rejected"]
