"""fabrika: a synthetic-data factory for LLM post-training, Russian first.

The few names most users need, imported lazily so that ``import fabrika`` stays
cheap (the pipeline pulls in polars, the export pulls in ``datasets``)::

    import fabrika
    config = fabrika.load_config("configs/demo.yaml")
    result = fabrika.run_pipeline(config)
    fabrika.refilter(result.run_dir, ["filters.backtranslation.min_similarity=0.7"])
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "ChatRequest": "fabrika.llm.types",
    "ChatResponse": "fabrika.llm.types",
    "ExportConfig": "fabrika.export",
    "LLMConfig": "fabrika.llm.config",
    "LLMStage": "fabrika.pipeline.llm_stage",
    "Message": "fabrika.schemas",
    "PipelineConfig": "fabrika.pipeline.config",
    "Sample": "fabrika.schemas",
    "SandboxConfig": "fabrika.sandbox",
    "SandboxPool": "fabrika.sandbox",
    "Stage": "fabrika.pipeline.stage",
    "StageConfig": "fabrika.pipeline.stage",
    "Tool": "fabrika.schemas",
    "ToolCall": "fabrika.schemas",
    "build_engine": "fabrika.llm.factory",
    "export": "fabrika.export",
    "load_config": "fabrika.pipeline.config",
    "materialise": "fabrika.pipeline.versions",
    "open_version": "fabrika.export",
    "refilter": "fabrika.pipeline.versions",
    "register_stage": "fabrika.pipeline.stage",
    "run_pipeline": "fabrika.pipeline.runner",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fabrika' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
