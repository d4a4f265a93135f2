"""Judge calibration: how well an LLM judge agrees with human side-by-side labels.

Input rows (JSONL): ``id``, ``task_type``, ``prompt``, ``response_a``,
``response_b``, ``label`` (the human verdict: ``A`` / ``B`` / ``tie``), and
optionally ``reference`` (gold answer, for the ``reference`` scheme) and
``criteria_labels`` (``{criterion: A|B|tie}``, for ``per_criterion``).

Each row is judged twice, with the answers in the logged and in the swapped
order. The judge's verdict is the order-consistent one; when the two orders
disagree the verdict is ``tie`` (the judge could not tell them apart beyond its
position bias). The report gives κ per task type with a bootstrap interval,
the sample-weighted κ, confusion matrices, the order-swap disagreement rate,
κ of the first order alone, and per-criterion κ where people labelled criteria.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fabrika.errors import InputError
from fabrika.eval.agreement import agreement_report, kappa
from fabrika.eval.judge import VERDICTS, JudgeConfig, judge_requests, normalize_verdict, parse_verdict, swap
from fabrika.eval.logs import read_jsonl
from fabrika.llm import ChatResponse

REQUIRED = ("prompt", "response_a", "response_b", "label")


def read_labels(path: Path, cfg: JudgeConfig) -> list[dict[str, Any]]:
    """Rows of a human-label file, validated (a bad row is an :class:`InputError` naming it)."""
    rows = []
    seen: set[str] = set()
    for n, row in read_jsonl(path):
        where = f"{path}:{n}"
        missing = [k for k in REQUIRED if not isinstance(row.get(k), str)]
        if missing:
            raise InputError(f"{where}: missing string field(s) {', '.join(missing)}; each row needs "
                             f"{', '.join(REQUIRED)} (and optionally task_type, reference, criteria_labels)")
        label = normalize_verdict(row["label"])
        if label is None:
            raise InputError(f"{where}: label must be A, B or tie, got {row['label']!r}")
        task = str(row.get("task_type") or "default")
        scheme = cfg.for_task(task)
        if scheme.scheme == "reference" and not isinstance(row.get("reference"), str):
            raise InputError(f"{where}: task type {task!r} is judged with the 'reference' scheme but the row has "
                             f"no 'reference' (gold answer); add it or choose another scheme for {task!r}")
        crit = row.get("criteria_labels") or {}
        if not isinstance(crit, dict):
            raise InputError(f"{where}: criteria_labels must be an object {{criterion: A|B|tie}}")
        bad = [k for k, v in crit.items() if normalize_verdict(v) is None]
        if bad:
            raise InputError(f"{where}: criteria_labels[{bad[0]!r}] must be A, B or tie, got {crit[bad[0]]!r} "
                             f"(per-criterion labels are preferences between the two answers)")
        rid = str(row.get("id", f"L{n}"))
        if rid in seen:
            raise InputError(f"{where}: duplicate id {rid!r}")
        seen.add(rid)
        rows.append({**row, "id": rid, "task_type": task, "label": label,
                     "criteria_labels": {str(k): normalize_verdict(v) for k, v in crit.items()}})
    if not rows:
        raise InputError(f"{path}: no labelled rows")
    return rows


def make_requests(cfg: JudgeConfig):
    def build(row: dict[str, Any]):
        return judge_requests(cfg.for_task(row["task_type"]), cfg, row)
    return build


def make_finish(cfg: JudgeConfig):
    def finish(row: dict[str, Any], resps: list[ChatResponse]) -> dict[str, Any]:
        scheme = cfg.for_task(row["task_type"])
        v1, c1, r1 = parse_verdict(resps[0].text, scheme)
        v2, c2, r2 = parse_verdict(resps[1].text, scheme)
        v2, c2 = swap(v2), {k: swap(v) for k, v in c2.items()}
        both = v1 is not None and v2 is not None
        verdict = (v1 if v1 == v2 else "tie") if both else None
        criteria = {c: (c1.get(c) if c1.get(c) == c2.get(c) else "tie") for c in c1 if c1.get(c) and c2.get(c)}
        return {"task_type": row["task_type"], "scheme": scheme.scheme, "human": row["label"],
                "first": v1, "swapped": v2, "verdict": verdict, "criteria": criteria,
                "criteria_labels": row.get("criteria_labels") or {},
                "rejected": r1 or r2, "truncated": any(r.choices and r.choices[0].truncated for r in resps)}
    return finish


def calibration_report(records: list[dict[str, Any]], *, iterations: int = 1000, seed: int = 0) -> dict[str, Any]:
    """κ and friends from the finished records (rows the judge answered unreadably are counted, not scored)."""
    scored = [r for r in records if r["verdict"] is not None]
    rejected = [r for r in records if r["verdict"] is None]
    labels = list(VERDICTS)
    rep = agreement_report([r["human"] for r in scored], [r["verdict"] for r in scored],
                           [r["task_type"] for r in scored], labels, iterations=iterations, seed=seed)
    swaps: dict[str, list[bool]] = {}
    for r in scored:
        swaps.setdefault(r["task_type"], []).append(r["first"] != r["swapped"])
    for task, per in rep["per_group"].items():
        flags = swaps.get(task, [])
        per["order_swap_disagreement"] = sum(flags) / len(flags) if flags else None
        first = [r for r in scored if r["task_type"] == task]
        per["kappa_first_order"] = kappa([r["human"] for r in first], [r["first"] for r in first], labels)
        per["scheme"] = first[0]["scheme"] if first else None
    # which position an order-inconsistent judge favoured: raw verdicts A then A = the first-shown answer
    rep["inconsistent_prefers_first"] = sum(r["first"] == "A" and r["swapped"] == "B" for r in scored)
    rep["inconsistent_prefers_second"] = sum(r["first"] == "B" and r["swapped"] == "A" for r in scored)
    all_flags = [f for v in swaps.values() for f in v]
    rep["order_swap_disagreement"] = sum(all_flags) / len(all_flags) if all_flags else None
    rep["kappa_first_order"] = kappa([r["human"] for r in scored], [r["first"] for r in scored], labels)
    rep["rejected"] = len(rejected)
    rep["rejected_reasons"] = sorted({str(r["rejected"]) for r in rejected})[:10]
    crit: dict[str, tuple[list[str], list[str]]] = {}
    for r in scored:
        for c, human in (r.get("criteria_labels") or {}).items():
            judge = (r.get("criteria") or {}).get(c)
            if human and judge:
                crit.setdefault(c, ([], []))
                crit[c][0].append(human)
                crit[c][1].append(judge)
    rep["per_criterion"] = {c: {"n": len(h), "kappa": kappa(h, j, labels)} for c, (h, j) in sorted(crit.items())}
    return rep
