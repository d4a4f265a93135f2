"""Token, cost and outcome counters per (stage, tag, model).

Every request the engine finishes lands in exactly one outcome: ``successes``
(first attempt), ``success_after_retry``, or a failure counted under its
``kind`` in ``failures``. Cache hits are successes served without a call.
``truncated`` counts answers with ``finish_reason == "length"`` (they are also
successes: the response is kept and marked). The snapshot is plain JSON and
goes into the run manifest.

The stage comes from ``request.meta["stage"]`` (the runner sets it), else the tag.
Updates are plain integer additions on the event loop's thread, guarded by a
lock so worker threads may also record; one update costs about a microsecond.
"""

from __future__ import annotations

import threading
from typing import Any

from fabrika.llm.types import ChatRequest, ChatResponse

_FIELDS = ("requests", "cache_hits", "retries", "successes", "success_after_retry", "failed", "truncated",
           "prompt_tokens", "completion_tokens")
_REQ, _HIT, _RETRY, _OK, _OK_RETRY, _FAIL, _TRUNC, _PT, _CT = range(len(_FIELDS))


class Accounting:
    """Thread-safe counters; ``prices`` maps model → (prompt, completion) price per 1M tokens."""

    def __init__(self, prices: dict[str, tuple[float, float]] | None = None) -> None:
        self.prices = dict(prices or {})
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, str, str], list[int]] = {}
        self._failures: dict[tuple[str, str, str], dict[str, int]] = {}

    @staticmethod
    def key(request: ChatRequest, model: str) -> tuple[str, str, str]:
        meta = request.meta
        stage = meta.get("stage") if meta else None
        return (str(stage) if stage else request.tag, request.tag, model)

    def _row(self, key: tuple[str, str, str]) -> list[int]:
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = [0] * len(_FIELDS)
        return row

    def record_retry(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            self._row(key)[_RETRY] += 1

    def record(self, key: tuple[str, str, str], response: ChatResponse) -> None:
        """Count one finished request (success, cache hit or failure)."""
        with self._lock:
            row = self._row(key)
            row[_REQ] += 1
            err = response.error
            if err is not None:
                row[_FAIL] += 1
                fails = self._failures.setdefault(key, {})
                fails[err.kind] = fails.get(err.kind, 0) + 1
                return
            if response.cached:
                row[_HIT] += 1
            elif response.attempts > 1:
                row[_OK_RETRY] += 1
            else:
                row[_OK] += 1
            for c in response.choices:
                if c.finish_reason == "length":
                    row[_TRUNC] += 1
            if not response.cached:
                row[_PT] += response.usage.prompt_tokens
                row[_CT] += response.usage.completion_tokens

    def _cost(self, model: str, pt: int, ct: int) -> float | None:
        price = self.prices.get(model)
        if price is None:
            return None
        return round((pt * price[0] + ct * price[1]) / 1_000_000, 6)

    def snapshot(self) -> dict[str, Any]:
        """``{"rows": [...per (stage, tag, model)...], "totals": {...}}``, JSON-able.

        Tokens and cost count only real calls (cache hits cost nothing).
        ``cost`` is ``None`` where the model has no price configured.
        """
        with self._lock:
            rows = []
            totals = dict.fromkeys(_FIELDS, 0)
            total_fail: dict[str, int] = {}
            total_cost: float | None = None
            for (stage, tag, model), vals in sorted(self._rows.items()):
                entry: dict[str, Any] = {"stage": stage, "tag": tag, "model": model}
                entry.update(zip(_FIELDS, vals))
                fails = dict(sorted(self._failures.get((stage, tag, model), {}).items()))
                entry["failures"] = fails
                cost = self._cost(model, vals[_PT], vals[_CT])
                entry["cost"] = cost
                rows.append(entry)
                for f, v in zip(_FIELDS, vals):
                    totals[f] += v
                for k, v in fails.items():
                    total_fail[k] = total_fail.get(k, 0) + v
                if cost is not None:
                    total_cost = (total_cost or 0.0) + cost
            totals_out: dict[str, Any] = dict(totals)
            totals_out["failures"] = dict(sorted(total_fail.items()))
            totals_out["cost"] = None if total_cost is None else round(total_cost, 6)
            return {"rows": rows, "totals": totals_out}

    def totals(self) -> dict[str, Any]:
        return self.snapshot()["totals"]
