"""Fixtures of the pipeline tests: an in-process fake engine and test stage kinds."""

from __future__ import annotations

import pytest

from tests.pipeline import pipeline_stages  # registers test.* stage kinds and the test gate group


@pytest.fixture
def engine() -> pipeline_stages.FakeEngine:
    return pipeline_stages.FakeEngine()
