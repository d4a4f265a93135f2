"""Fixtures of the pipeline tests: an in-process fake engine and test stage kinds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import pipeline_stages  # noqa: E402  (registers test.* stage kinds and the test gate group)


@pytest.fixture
def engine() -> pipeline_stages.FakeEngine:
    return pipeline_stages.FakeEngine()
