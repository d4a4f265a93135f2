"""The fan-out model's arithmetic: points, spreads and ranges of :mod:`fabrika.pipeline.estimate_model`."""

from __future__ import annotations

import random

import pytest

from fabrika.pipeline.estimate_model import (
    MARGIN,
    Figure,
    Moments,
    Z,
    extrapolate,
    extrapolate_fit,
    fit_line,
    inside,
    ratio_figure,
)


def test_moments_count_items_without_observations_as_zeros():
    m = Moments.of([2.0, 4.0], n=4)  # two of four items made requests
    assert m.n == 4 and m.mean == pytest.approx(1.5)
    assert m.var == pytest.approx(sum((v - 1.5) ** 2 for v in (2, 4, 0, 0)) / 3)
    assert Moments.of([5.0]).var == 0.0 and Moments().mean == 0.0


def test_a_pilot_that_saw_every_item_has_no_sampling_error():
    m = Moments.of([1.0, 3.0, 5.0, 7.0])
    full = extrapolate(m, Figure(4.0))
    assert full.point == pytest.approx(16.0) and full.var == 0.0
    assert full.as_dict(exact=True) == {"point": 16.0, "low": 16.0, "high": 16.0}


def test_sampling_error_shrinks_with_the_pilot_and_grows_with_the_full_run():
    values = [float(v) for v in (1, 9, 2, 8, 3, 7, 4, 6)]
    small = extrapolate(Moments.of(values[:4]), Figure(100.0))
    large = extrapolate(Moments.of(values), Figure(100.0))
    assert small.sd > large.sd > 0
    assert extrapolate(Moments.of(values), Figure(1000.0)).sd > large.sd
    # finite-population correction: (1 - n/N) N² s² / n
    m = Moments.of(values)
    assert large.var == pytest.approx((1 - 8 / 100) * 100 ** 2 * m.var / 8)


def test_upstream_uncertainty_is_carried_down():
    m = Moments.of([2.0, 2.0, 2.0])  # no spread per item: only the input count is uncertain
    fig = extrapolate(m, Figure(50.0, var=25.0))
    assert fig.point == pytest.approx(100.0) and fig.sd == pytest.approx(2.0 * 5.0)


def test_range_is_z_standard_errors_plus_the_margin():
    fig = Figure(1000.0, var=100.0)
    assert fig.high() == pytest.approx(1000 + Z * 10 + MARGIN * 1000)
    assert fig.low() == pytest.approx(1000 - Z * 10 - MARGIN * 1000)
    assert Figure(10.0, var=400.0).low() == 0.0  # never negative
    assert inside(1000, fig.as_dict()) and not inside(2000, fig.as_dict())


def test_fit_line_recovers_rows_per_item_plus_rows_per_request():
    xs = [1, 1, 1, 0, 0, 1, 0]
    ys = [1 + 9 * x for x in xs]  # a seed row per item, nine candidates per request
    fit = fit_line([float(x) for x in xs], [float(y) for y in ys])
    assert fit.a == pytest.approx(1.0) and fit.b == pytest.approx(9.0) and fit.resid_var == pytest.approx(0.0)
    # the full run: 70 items but still only 12 requests (a fixed number of calls over the first items)
    assert extrapolate_fit(fit, 70, 12.0).point == pytest.approx(70 + 108)


def test_fit_line_without_spread_in_x_is_proportional():
    fit = fit_line([2.0, 2.0, 2.0], [10.0, 12.0, 14.0])
    assert fit.a == 0.0 and fit.b == pytest.approx(6.0)
    assert fit_line([0.0, 0.0], [1.0, 3.0]).a == pytest.approx(2.0)


def test_ratio_figure_for_a_global_stage():
    fig = ratio_figure(50, 100, Figure(1000.0))  # dedup kept half in the pilot
    assert fig.point == pytest.approx(500.0) and fig.sd > 0
    assert ratio_figure(50, 100, Figure(100.0)).var == 0.0  # it saw everything
    assert ratio_figure(5, 0, Figure(10.0)).point == 0.0


def test_ranges_cover_the_truth_of_simulated_pilots():
    """On synthetic fan-outs, Z=2 plus the margin covers the real total in nearly every pilot."""
    rng = random.Random(3)
    misses = 0
    trials = 300
    for _ in range(trials):
        population = [float(rng.choice([0, 1, 1, 2, 3, 5, 8])) for _ in range(400)]
        pilot = rng.sample(population, 40)
        fig = extrapolate(Moments.of(pilot), Figure(400.0))
        misses += not inside(sum(population), fig.as_dict())
    assert misses / trials < 0.02
