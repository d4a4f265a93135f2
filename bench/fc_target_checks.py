"""Precision and recall of the FC target checks on their labelled examples (tests/fc/data/checks).

    PYTHONPATH=$PWD .venv/bin/python bench/fc_target_checks.py

Prints one row per check, split and language (n, positives, precision, recall) and the
misclassified examples. ``dev`` examples were written alongside the rules (the rules were
fixed on them); ``holdout`` examples were written afterwards and never tuned on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fc.checks_labelled import CHECKS, scores  # noqa: E402


def main() -> None:
    print(f"{'check':22} {'split':7} {'lang':4} {'n':>4} {'pos':>4} {'precision':>9} {'recall':>7}")
    misses = []
    for name in sorted(CHECKS):
        for split in ("dev", "holdout", "holdout2"):
            for lang in ("ru", "en", None):
                s = scores(name, lang, split)
                if not s["n"]:
                    continue
                print(f"{name:22} {split:7} {lang or 'all':4} {s['n']:>4} {s['positives']:>4} "
                      f"{s['precision']:>9.3f} {s['recall']:>7.3f}")
                if lang is None:
                    misses += [(f"{name}/{split}", w) for w in s["wrong"]]
    for name, w in misses:
        print(f"miss {name}: {json.dumps(w, ensure_ascii=False)[:170]}")


if __name__ == "__main__":
    main()
