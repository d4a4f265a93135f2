"""The labelled examples of the FC target checks (tests/fc/data/checks/*.jsonl) and their precision/recall.

``dev`` examples (>= 56 per check) were written with the rules and the rules were fixed on
them; ``holdout`` examples (20 per check, in ``holdout/``) were written afterwards and are
only measured — their figures are the honest ones. The contradiction rule was widened after
its holdout measurement, so it has a second, fresh one (``holdout2/``).

One JSONL file per check; each line has the check's inputs and a label (``True``: the
check should fire). Used by tests/fc/test_target_checks.py (floors) and
bench/fc_target_checks.py (the table in bench/RESULTS.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from fabrika.filters.fc_facts import contradiction, unsupported_facts
from fabrika.filters.fc_given import value_given
from fabrika.filters.fc_hygiene import user_turn_issues

DATA = Path(__file__).parent / "data" / "checks"

#: check name → (file, predicate over one example, label of one example)
CHECKS: dict[str, tuple[str, Callable[[dict[str, Any]], bool], Callable[[dict[str, Any]], bool]]] = {
    "unsupported_facts": ("unsupported_facts.jsonl",
                          lambda r: bool(unsupported_facts(r["answer"], r["context"])), lambda r: r["unsupported"]),
    "contradiction_rule": ("contradiction.jsonl",
                           lambda r: contradiction(r["answer"], r["last_result"]) is not None,
                           lambda r: r["contradicts"]),
    "already_given": ("already_given.jsonl", lambda r: value_given(r["value"], r["text"]), lambda r: r["given"]),
    "user_turn_hygiene": ("user_turn_hygiene.jsonl",
                          lambda r: r["issue"] in user_turn_issues(r["text"], r["lang"]) if r["issue"]
                          else bool(user_turn_issues(r["text"], r["lang"])),
                          lambda r: r["issue"] is not None),
}


def examples(name: str, split: str = "dev") -> list[dict[str, Any]]:
    """``dev``: the examples the rules were fixed on; ``holdout``/``holdout2``: written after, measured once."""
    path = (DATA if split == "dev" else DATA / split) / CHECKS[name][0]
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def scores(name: str, lang: str | None = None, split: str = "dev") -> dict[str, Any]:
    """n, positives, precision, recall and the misclassified examples of one check (optionally one language)."""
    _, predict, label = CHECKS[name]
    rows = [r for r in examples(name, split) if lang is None or r["lang"] == lang]
    tp = fp = fn = 0
    wrong: list[dict[str, Any]] = []
    for r in rows:
        got, want = predict(r), bool(label(r))
        tp += got and want
        fp += got and not want
        fn += want and not got
        if got != want:
            wrong.append(r)
    return {"n": len(rows), "positives": sum(bool(label(r)) for r in rows),
            "precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / (tp + fn) if tp + fn else 1.0,
            "wrong": wrong}
