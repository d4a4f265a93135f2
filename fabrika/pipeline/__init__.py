"""The pipeline document (YAML → pydantic), the stage contract and the runner.

Stage authors need :mod:`fabrika.pipeline.stage` (``Stage``, ``StageConfig``,
``register_stage``, ``ok``, ``rejected``) and :mod:`fabrika.gates`
(``register_gate_group``, ``GatePredicate``); run a pipeline with
``fabrika.pipeline.runner.run_pipeline(load_config(path))``.
"""

from fabrika.pipeline.stage import STAGES, Stage, StageConfig, ok, register_stage, rejected

__all__ = ["STAGES", "Stage", "StageConfig", "ok", "register_stage", "rejected"]
