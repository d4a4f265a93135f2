"""The flat public API is pinned (httpx's test_exported_members habit)."""

from __future__ import annotations

import subprocess
import sys

import fabrika


def test_exported_members():
    assert fabrika.__all__ == [
        "ChatRequest", "ChatResponse", "ExportConfig", "LLMConfig", "LLMStage", "Message", "PipelineConfig", "Sample",
        "SandboxConfig", "SandboxPool", "Stage", "StageConfig", "Tool", "ToolCall", "__version__", "build_engine",
        "export", "load_config", "materialise", "open_version", "refilter", "register_stage", "run_pipeline",
    ]
    assert fabrika.__all__ == sorted(fabrika.__all__)
    for name in fabrika.__all__:
        assert getattr(fabrika, name) is not None, name


def test_import_is_light_and_core_needs_no_torch():
    code = "import sys, fabrika, fabrika.pipeline.runner, fabrika.export; print('torch' in sys.modules, 'trl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"], "the core factory must not import torch or TRL"
