"""JSON for the export's hot loop: orjson, with the stdlib for what orjson refuses.

Both keep Unicode as is (orjson always writes UTF-8; the stdlib path uses
``ensure_ascii=False``) and keep ``1`` and ``1.0`` apart, so the exported text
is the same JSON either way; orjson makes a 50K-row export ~1.2–1.7x faster
(bench/RESULTS.md). Values orjson refuses (integers beyond 64 bits, NaN as the
store wrote it) fall back to the stdlib.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(text: str | bytes | bytearray) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)  # the stdlib raises its usual error, or accepts NaN like the store wrote it


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode("utf-8")
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
