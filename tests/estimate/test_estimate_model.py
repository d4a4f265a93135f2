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
    small_sample,
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
    # finite-population correction: (1 - n/N) N² s² / n, widened by (t(n-1) / z)² for a spread seen on n items
    m = Moments.of(values)
    assert large.var == pytest.approx((1 - 8 / 100) * 100 ** 2 * m.var / 8 * small_sample(8))


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


def test_t_quantile_widens_small_samples_and_tends_to_the_normal():
    from fabrika.pipeline.estimate_model import Z95, small_sample, t_quantile

    # textbook values of Student's t, 97.5%
    for dof, exact in ((1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (19, 2.093), (100, 1.984)):
        assert t_quantile(dof) == pytest.approx(exact, rel=3e-3), dof
    assert t_quantile(10_000) == pytest.approx(Z95, rel=1e-3)
    assert small_sample(5) == pytest.approx((2.776 / Z95) ** 2, rel=5e-3) and small_sample(1) == 1.0
    # a spread measured on 5 items spans a wider range than the same spread on 50
    five = extrapolate(Moments(5, 10.0, 30.0), Figure(100.0))
    fifty = extrapolate(Moments(50, 100.0, 300.0), Figure(1000.0))
    assert five.sd / five.point > fifty.sd / fifty.point


def test_a_stage_whose_items_are_not_the_full_runs_has_no_finite_population_correction():
    m = Moments.of([1.0, 3.0, 5.0, 7.0])
    assert extrapolate(m, Figure(4.0)).var == 0.0  # the same 4 items
    other = extrapolate(m, Figure(4.0), subset=False)  # 4 items made from a sampled upstream: other items
    assert other.point == pytest.approx(16.0) and other.var > 0


def test_ratio_var_over_items_sees_rows_that_pass_together():
    from fabrika.pipeline.estimate_model import ratio_var, share_var

    # 20 items of 3 rows each; 6 items pass with all their rows: 18 of 60 rows kept
    pairs = [(3.0, 3.0)] * 6 + [(3.0, 0.0)] * 14
    clustered, binomial = ratio_var(pairs), share_var(18, 60)
    assert clustered > 2 * binomial  # three rows that pass together are one observation, not three
    assert ratio_var(pairs, f=1.0) == 0.0 and ratio_var([(3.0, 3.0)]) == 0.0
    assert share_var(0, 5) > 0  # 0 of 5 is not "surely none"


def test_times_share_carries_both_errors():
    from fabrika.pipeline.estimate_model import times_share

    fig = times_share(Figure(100.0, 25.0), 0.5, 0.01)
    assert fig.point == pytest.approx(50.0)
    assert fig.var == pytest.approx(25.0 * 0.25 + 100.0 ** 2 * 0.01 + 25.0 * 0.01)


def _stride(population: list, n: int) -> list:
    return [population[min(len(population) - 1, int((i + 0.5) * len(population) / n))] for i in range(n)]


def test_a_synthetic_stage_graph_s_true_totals_lie_in_the_predicted_range():
    """A cut stage of N items writes 1-4 rows each; a gate keeps an item's rows together with the item's own
    pass chance; a stage below makes 1-6 requests per kept row. The pilot sees a stride sample of 20% (at
    least 5) of the items; the predicted ranges (items below the gate, its requests) hold the true totals in
    nearly every population, small ones included. The old range (Z = 2, no error on the share) missed the
    gated rows in 19% (N = 400) to 36% (N = 30) of these populations."""
    from fabrika.pipeline.estimate_model import floor_var, ratio_var, share_var, times_share

    rng = random.Random(11)
    trials, misses_rows, misses_req = 300, 0, 0
    for _ in range(trials):
        size = rng.choice([30, 96, 400])
        pass_p = rng.choice([0.2, 0.36, 0.7])
        items = []
        for _ in range(size):
            rows = rng.randint(1, 4)
            kept = rows if rng.random() < pass_p else 0
            items.append((rows, kept, [rng.randint(1, 6) for _ in range(kept)]))
        true_kept = sum(k for _, k, _ in items)
        true_req = sum(sum(q) for _, _, q in items)
        n = min(size, max(5, -(-size // 5)))
        rng.shuffle(items)  # the input order carries no pattern the stride could pick up
        pilot = _stride(items, n)
        f = n / size
        ok = extrapolate(Moments.of([float(r) for r, _, _ in pilot]), Figure(float(size)))
        kept, seen = sum(k for _, k, _ in pilot), sum(r for r, _, _ in pilot)
        share = kept / seen
        var = max(share_var(kept, seen, f), ratio_var([(float(r), float(k)) for r, k, _ in pilot], f), floor_var(n, f))
        below = times_share(ok, share, var)
        misses_rows += not inside(true_kept, below.as_dict())
        per_row = [float(q) for _, _, qs in pilot for q in qs]
        req = extrapolate(Moments.of(per_row), below) if per_row else Figure(0.0, below.var)
        misses_req += not inside(true_req, req.as_dict())
    assert misses_rows / trials < 0.05, misses_rows
    assert misses_req / trials < 0.08, misses_req
