"""Stable, content-derived ids (DESIGN contract 1).

An id is the hash of a canonical JSON rendering of the inputs that define an
item, so the same inputs give the same id on every machine and every rerun.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

ID_LENGTH = 20  # hex chars = 80 bits; collisions are negligible below 10^9 items


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no whitespace and real Unicode (Cyrillic stays Cyrillic)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def stable_id(*parts: Any, prefix: str = "") -> str:
    """Hash ``parts`` into a short hex id; ``prefix`` names the kind (``"tool-"``)."""
    digest = hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()
    return f"{prefix}{digest[:ID_LENGTH]}"


def derive_seed(*parts: Any) -> int:
    """A 63-bit integer seed derived from ``parts`` (for per-item RNGs)."""
    digest = hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") >> 1
