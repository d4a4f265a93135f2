"""Precision and recall of the multi-constraint compatibility decision on hand-labelled Russian pairs.

    PYTHONPATH=$PWD python bench/combine_pairs.py [FILE.jsonl ...]

Default data: tests/constraints/data/pairs_ru.jsonl (sets ``templated`` and ``fresh``) and
tests/constraints/data/pairs_ru_heldout.jsonl (set ``heldout``: 43 pairs in new natural phrasings, written
after the structured decision was built and scored once). "Positive" = accepted as compatible. A pair
labelled ``redundant`` is satisfiable but adds nothing; it is counted as correct when refused as redundant
and is kept out of precision/recall.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from fabrika.constraints.compose import pair_decision

_DIR = Path(__file__).resolve().parent.parent / "tests" / "constraints" / "data"
DATA = (_DIR / "pairs_ru.jsonl", _DIR / "pairs_ru_heldout.jsonl")


def load(*paths: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in (paths or DATA) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def evaluate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    tp = fp = fn = tn = red_ok = red_n = 0
    errors: list[str] = []
    verdicts: Counter[str] = Counter()
    for r in rows:
        d = pair_decision(r["a"], r["b"])
        verdicts[d.verdict] += 1
        if r["label"] == "redundant":
            red_n += 1
            red_ok += d.verdict == "redundant"
            continue
        gold = r["label"] == "compatible"
        if d.accepted and gold:
            tp += 1
        elif d.accepted:
            fp += 1
            errors.append(f"FP {r['reason']}: {d.reason}")
        elif gold:
            fn += 1
            errors.append(f"FN {r['reason']}: {d.verdict}: {d.reason}")
        else:
            tn += 1
    return {"n": len(rows), "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": tp / (tp + fp) if tp + fp else 0.0, "recall": tp / (tp + fn) if tp + fn else 0.0,
            "refusal_precision": tn / (tn + fn) if tn + fn else 0.0,
            "refusal_recall": tn / (tn + fp) if tn + fp else 0.0,
            "redundant_refused": red_ok, "redundant_n": red_n, "verdicts": dict(verdicts), "errors": errors}


def main() -> None:
    rows = load(*(Path(a) for a in sys.argv[1:]))
    print("| set | pairs | accept P | accept R | refuse P | refuse R | TP | FP | FN | TN | redundant refused |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    errors = []
    for name in ("templated", "fresh", "heldout", "all"):
        res = evaluate([r for r in rows if name in ("all", r.get("set", "templated"))])
        print(f"| {name} | {res['n']} | {res['precision']:.3f} | {res['recall']:.3f} | {res['refusal_precision']:.3f} | "
              f"{res['refusal_recall']:.3f} | {res['tp']} | {res['fp']} | {res['fn']} | {res['tn']} | "
              f"{res['redundant_refused']}/{res['redundant_n']} |")
        if name == "all":
            errors = res["errors"]
    print()
    print("verdicts (all):", dict(evaluate(rows)["verdicts"]))
    for e in errors:
        print("  ", e)


if __name__ == "__main__":
    main()
