"""CLI tests reuse the test stage kinds of tests/pipeline (imported as a ``plugins:`` module)."""

from __future__ import annotations

import sys
from pathlib import Path

PIPELINE_TESTS = Path(__file__).parent.parent / "pipeline"
if str(PIPELINE_TESTS) not in sys.path:
    sys.path.insert(0, str(PIPELINE_TESTS))
