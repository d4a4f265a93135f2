"""Puts tests/fc on sys.path so tests import the shared helpers as ``fc_helpers``."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
