"""Agreement between a judge (or labeller) and people: Cohen's κ, bootstrap intervals, confusion matrices.

κ comes from scikit-learn's ``cohen_kappa_score``; when both raters use a
single category κ is undefined (0/0) and reported as ``None``. Intervals are
percentile bootstraps over items (seeded), the sample-weighted κ is
``Σ n_t κ_t / Σ n_t`` over task types, bootstrapped within each task type.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Sequence

import numpy as np


def kappa(human: Sequence[str], judge: Sequence[str], labels: Sequence[str] | None = None) -> float | None:
    """Cohen's κ, or ``None`` when it is undefined (a single category, or no items)."""
    from sklearn.metrics import cohen_kappa_score

    if len(human) != len(judge):
        raise ValueError(f"need as many judge labels as human labels, got {len(judge)} and {len(human)}")
    if not human:
        return None
    cats = list(labels) if labels is not None else sorted(set(human) | set(judge))
    if len(set(human) | set(judge)) < 2:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(cohen_kappa_score(list(human), list(judge), labels=cats))
    return None if math.isnan(value) else value


def _codes(values: Sequence[str], labels: Sequence[str]) -> np.ndarray:
    pos = {c: i for i, c in enumerate(labels)}
    return np.fromiter((pos[v] for v in values), dtype=np.int64, count=len(values))


def kappa_from_codes(h: np.ndarray, j: np.ndarray, k: int) -> float | None:
    """κ from integer-coded labels (the bootstrap's fast path; equal to scikit-learn's, see tests)."""
    n = len(h)
    if n == 0:
        return None
    m = np.bincount(h * k + j, minlength=k * k).reshape(k, k).astype(float)
    po = np.trace(m) / n
    pe = float(m.sum(axis=1) @ m.sum(axis=0)) / (n * n)
    if pe >= 1.0:
        return None
    return float((po - pe) / (1.0 - pe))


def confusion(human: Sequence[str], judge: Sequence[str], labels: Sequence[str]) -> list[list[int]]:
    """Rows: human label; columns: judge label (in ``labels`` order)."""
    pos = {c: i for i, c in enumerate(labels)}
    m = [[0] * len(labels) for _ in labels]
    for h, j in zip(human, judge):
        m[pos[h]][pos[j]] += 1
    return m


def bootstrap_ci(human: Sequence[str], judge: Sequence[str], labels: Sequence[str], *, iterations: int = 1000,
                 seed: int = 0, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile interval of κ over item resamples; ``None`` when too few resamples define κ."""
    rng = np.random.default_rng(seed)
    n = len(human)
    if n < 2:
        return None
    h, j, k = _codes(human, labels), _codes(judge, labels), len(labels)
    values = []
    for _ in range(iterations):
        idx = rng.integers(0, n, n)
        v = kappa_from_codes(h[idx], j[idx], k)
        if v is not None:
            values.append(v)
    if len(values) < iterations // 2:
        return None
    lo, hi = np.quantile(values, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def weighted_kappa(groups: dict[str, tuple[Sequence[str], Sequence[str]]], labels: Sequence[str]) -> float | None:
    """Sample-weighted mean of per-group κ (groups where κ is undefined are left out)."""
    num = den = 0.0
    for human, judge in groups.values():
        k = kappa(human, judge, labels)
        if k is not None:
            num += k * len(human)
            den += len(human)
    return num / den if den else None


def weighted_ci(groups: dict[str, tuple[Sequence[str], Sequence[str]]], labels: Sequence[str], *,
                iterations: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float] | None:
    rng = np.random.default_rng(seed)
    k = len(labels)
    coded = [(_codes(h, labels), _codes(j, labels)) for h, j in groups.values()]
    values = []
    for _ in range(iterations):
        num = den = 0.0
        for h, j in coded:
            idx = rng.integers(0, len(h), len(h))
            v = kappa_from_codes(h[idx], j[idx], k)
            if v is not None:
                num += v * len(h)
                den += len(h)
        if den:
            values.append(num / den)
    if len(values) < iterations // 2:
        return None
    lo, hi = np.quantile(values, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def agreement_report(human: Sequence[str], judge: Sequence[str], groups: Sequence[str], labels: Sequence[str], *,
                     iterations: int = 1000, seed: int = 0) -> dict[str, Any]:
    """κ with CI and confusion matrix per group and overall, plus the sample-weighted κ."""
    by: dict[str, tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    for h, j, g in zip(human, judge, groups):
        by[g][0].append(h)
        by[g][1].append(j)
    per: dict[str, dict[str, Any]] = {}
    for g in sorted(by):
        hs, js = by[g]
        per[g] = {"n": len(hs), "kappa": kappa(hs, js, labels),
                  "ci": bootstrap_ci(hs, js, labels, iterations=iterations, seed=seed),
                  "accuracy": sum(a == b for a, b in zip(hs, js)) / len(hs), "confusion": confusion(hs, js, labels)}
    return {
        "labels": list(labels),
        "n": len(human),
        "kappa_pooled": kappa(human, judge, labels),
        "kappa_weighted": weighted_kappa(dict(by), labels),
        "kappa_weighted_ci": weighted_ci(dict(by), labels, iterations=iterations, seed=seed),
        "confusion": confusion(human, judge, labels),
        "per_group": per,
    }
