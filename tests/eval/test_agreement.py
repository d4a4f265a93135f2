"""Cohen's κ on hand-computed confusion matrices, intervals, weighting."""

from __future__ import annotations

import pytest

from fabrika.eval.agreement import agreement_report, bootstrap_ci, confusion, kappa, weighted_kappa


def from_matrix(matrix: list[list[int]], labels: list[str]) -> tuple[list[str], list[str]]:
    human, judge = [], []
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            human += [labels[i]] * count
            judge += [labels[j]] * count
    return human, judge


def test_kappa_two_by_two_by_hand():
    # po = 85/100; pe = .5 * .45 + .5 * .55 = .5; κ = (.85 - .5) / (1 - .5) = .7
    h, j = from_matrix([[40, 10], [5, 45]], ["A", "B"])
    assert kappa(h, j) == pytest.approx(0.7, abs=1e-12)


def test_kappa_three_by_three_by_hand():
    # po = 75/100; judge columns 30, 35, 35; human rows 30, 30, 40
    # pe = .3*.3 + .3*.35 + .4*.35 = .335; κ = .415 / .665
    labels = ["A", "B", "tie"]
    m = [[20, 5, 5], [5, 25, 0], [5, 5, 30]]
    h, j = from_matrix(m, labels)
    assert kappa(h, j, labels) == pytest.approx(0.415 / 0.665, abs=1e-12)
    assert confusion(h, j, labels) == m


def test_kappa_edge_cases():
    assert kappa(["A", "B", "A"], ["A", "B", "A"]) == pytest.approx(1.0)
    # chance-level: judge independent of humans → 0
    h, j = from_matrix([[25, 25], [25, 25]], ["A", "B"])
    assert kappa(h, j) == pytest.approx(0.0)
    # systematically opposite → negative
    assert kappa(["A", "B"] * 5, ["B", "A"] * 5) == pytest.approx(-1.0)
    # a single category on both sides: κ is 0/0, reported as None, not 1 or nan
    assert kappa(["A"] * 4, ["A"] * 4) is None
    assert kappa([], []) is None
    with pytest.raises(ValueError):
        kappa(["A"], ["A", "B"])


def test_bootstrap_interval_contains_the_point_estimate():
    h, j = from_matrix([[40, 10], [5, 45]], ["A", "B"])
    lo, hi = bootstrap_ci(h, j, ["A", "B"], iterations=400, seed=1)
    assert lo < 0.7 < hi and hi - lo < 0.4
    assert bootstrap_ci(h, j, ["A", "B"], iterations=400, seed=1) == (lo, hi)  # seeded


def test_weighted_kappa_is_sample_weighted_mean():
    g1 = from_matrix([[40, 10], [5, 45]], ["A", "B"])  # κ .7, n 100
    g2 = from_matrix([[10, 0], [0, 10]], ["A", "B"])  # κ 1, n 20
    assert weighted_kappa({"x": g1, "y": g2}, ["A", "B"]) == pytest.approx((0.7 * 100 + 1.0 * 20) / 120)
    rep = agreement_report(g1[0] + g2[0], g1[1] + g2[1], ["x"] * 100 + ["y"] * 20, ["A", "B"], iterations=200)
    assert rep["per_group"]["x"]["kappa"] == pytest.approx(0.7)
    assert rep["per_group"]["y"]["confusion"] == [[10, 0], [0, 10]]
    assert rep["kappa_weighted"] == pytest.approx((0.7 * 100 + 20) / 120)


def test_fast_kappa_equals_scikit_learn():
    import random

    import numpy as np
    from sklearn.metrics import cohen_kappa_score

    from fabrika.eval.agreement import kappa_from_codes

    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(5, 60)
        h = [rng.randrange(3) for _ in range(n)]
        j = [x if rng.random() < 0.6 else rng.randrange(3) for x in h]
        if len(set(h) | set(j)) < 2:
            continue
        ours = kappa_from_codes(np.array(h), np.array(j), 3)
        assert ours == pytest.approx(cohen_kappa_score(h, j, labels=[0, 1, 2]), abs=1e-12)
