"""The pipeline document (YAML → pydantic), the stage contract, gates and the runner.

Stage authors need :mod:`fabrika.pipeline.stage` (``Stage``, ``StageConfig``,
``register_stage``, ``ok``, ``rejected``), :mod:`fabrika.pipeline.llm_stage` (``LLMStage``) and :mod:`fabrika.pipeline.gates`
(``register_gate_group``, ``GatePredicate``); run a pipeline with
``fabrika.pipeline.runner.run_pipeline(load_config(path))``.
"""

from fabrika.pipeline.gates import GatePredicate, register_gate_group
from fabrika.pipeline.llm_stage import LLMStage
from fabrika.pipeline.stage import STAGES, Stage, StageConfig, ok, register_stage, rejected

__all__ = ["STAGES", "GatePredicate", "LLMStage", "Stage", "StageConfig", "ok", "register_gate_group",
           "register_stage", "rejected"]
