"""Fixtures of the pipeline tests: the echoing scripted model and the test stage kinds."""

from __future__ import annotations

import pytest

from fabrika.testing import ScriptedLLM

from tests.pipeline import pipeline_stages  # registers test.* stage kinds and the test gate group


@pytest.fixture
def engine() -> ScriptedLLM:
    return pipeline_stages.echo_llm()
