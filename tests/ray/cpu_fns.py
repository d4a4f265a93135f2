"""Per-row functions for ``ctx.map_cpu`` tests: top-level, so worker actors import them by name."""

from __future__ import annotations

import time


def slow_square(x: int, delay: float = 0.0) -> int:
    """``x * x`` after ``delay`` seconds (long enough that a worker can be killed mid-map)."""
    if delay:
        time.sleep(delay)
    return x * x
