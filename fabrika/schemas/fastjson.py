"""JSON for the export's hot loop: orjson when installed, the stdlib otherwise.

Both keep Unicode as is (orjson always writes UTF-8; the stdlib path uses
``ensure_ascii=False``) and keep ``1`` and ``1.0`` apart, so the exported text
is the same JSON either way; orjson makes a 50K-row export ~1.2–1.7x faster
(bench/RESULTS.md). Values orjson refuses (integers beyond 64 bits) fall back to the stdlib.
"""

from __future__ import annotations

import json
from typing import Any

try:  # optional speed-up; not a hard dependency
    import orjson
except ImportError:  # pragma: no cover - exercised where orjson is absent
    orjson = None  # type: ignore[assignment]


def loads(text: str | bytes) -> Any:
    if orjson is not None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # let the stdlib raise its usual error (or accept NaN like the store wrote it)
    return json.loads(text)


def dumps(value: Any) -> str:
    if orjson is not None:
        try:
            return orjson.dumps(value).decode("utf-8")
        except TypeError:
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
