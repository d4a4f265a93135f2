"""Executors other than ``local`` and owners' section checks are loaded by module string."""

from __future__ import annotations

import asyncio
import sys

import pytest

from fabrika.pipeline import executors, registry


def test_executor_is_loaded_by_name_and_an_unknown_one_is_named() -> None:
    cls = executors.executor_class("ray")
    assert cls.__module__ == "fabrika.ray.executor" and cls.name == "ray"
    with pytest.raises(ValueError, match=r"executor 'dask' is not one of local, ray"):
        executors.executor_class("dask")


def test_an_executor_may_build_the_engine_and_none_means_the_usual_one(tmp_path, monkeypatch) -> None:
    """``build_engine_for`` asks the named executor first; its None falls back to ``llm.factory``."""
    import types

    from fabrika.pipeline.config import PipelineConfig
    from fabrika.pipeline.lifecycle import build_engine_for

    calls = []

    class Placed:
        @staticmethod
        def build_engine(config, run_dir):
            calls.append(config.llm.backend)
            return "engine-actor" if config.llm.backend == "vllm" else None

    module = types.ModuleType("fake_executor_mod")
    module.Placed = Placed
    monkeypatch.setitem(sys.modules, "fake_executor_mod", module)
    monkeypatch.setitem(executors.EXECUTORS, "ray", "fake_executor_mod:Placed")
    sim = PipelineConfig.model_validate({"name": "t", "executor": "ray", "llm": {"backend": "sim"}, "stages": []})
    engine = build_engine_for(sim, tmp_path, cache_only=False)
    assert calls == ["sim"] and type(engine).__name__ == "LLMEngine"
    asyncio.run(engine.aclose())
    vllm = PipelineConfig.model_validate({"name": "t", "executor": "ray", "llm": {"backend": "vllm", "model": "m"},
                                          "stages": []})
    assert build_engine_for(vllm, tmp_path, cache_only=False) == "engine-actor"


def test_the_export_section_is_checked_by_its_owner() -> None:
    checks = registry.section_checks()
    assert checks["export"].__module__ == "fabrika.export.settings"
    assert checks["export"]({"kind": "dpo"})[0][0] == "export.kind"
