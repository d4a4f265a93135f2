"""The fan-out model behind ``fabrika estimate``: a point and a range per stage, from a pilot.

Pure arithmetic, no I/O: :mod:`fabrika.pipeline.estimate` runs the pilot and hands each
stage's observations here.

Per stage the pilot gives ``n`` items and, per item, how many requests, tokens and rows it
made (:class:`Moments`: count, sum, sum of squares). The full run will see ``N`` items —
known exactly for the cut stages and the stages that make their own items (slots), and
*predicted* for every other stage from the rows of its inputs (with that prediction's own
variance). A quantity ``y`` per item then totals

    point = N · mean(y)
    var   = (1 - n/N) · N² · s²/n  +  mean(y)² · var(N)

— the first term is the error of a mean measured on ``n`` of ``N`` items (sampling without
replacement: zero when the pilot saw every item), the second carries the upstream
uncertainty down the graph. A cut stage whose requests can be counted without calling the
LLM (an :class:`~fabrika.pipeline.llm_stage.LLMStage`: its ``requests(row)`` for every
input row) uses that exact count ``X`` instead of ``N · mean``, and its rows come from a
least-squares fit ``rows_i = a + b · x_i`` over the pilot's items (``if.expand`` spreads a
fixed number of calls over the first seeds, so the first 20% of the seeds hold all of
them: scaling by items was 5× off).

A share measured in the pilot — the gated rows a stage reads of its input's rows, the rows
a dataset keeps of a stage's rows — is a ratio estimate with its own error
(:func:`ratio_var`: over the upstream items as clusters when rows are grouped by item,
binomial otherwise); it is carried into the count it scales, so a 36% gate measured on 20
constraints is a wide range, not the pilot's 25% ± nothing.

The range is ``point ± (Z · sd + MARGIN · point)``: ``Z`` standard errors, plus a
systematic margin for what the sampling error does not see — the pilot is a stride sample
in input order, not a random one, and dedup and gates may keep another share at scale.
A variance measured on ``n`` items is widened by ``(t(n-1) / z)²`` (:func:`small_sample`):
a spread measured on 5 items is itself uncertain, and Student's t says by how much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Standard errors on each side of the point.
Z = 2.0
#: Systematic margin (share of the point) on each side: first-items pilot, nonlinear dedup and gates.
MARGIN = 0.12


#: Two-sided 95% normal quantile; :func:`t_quantile` tends to it as the degrees of freedom grow.
Z95 = 1.959964


def t_quantile(dof: int) -> float:
    """Student's t 97.5% quantile (Cornish-Fisher expansion in ``1/dof``; within 0.3% of the exact value
    from 4 degrees of freedom up, exact enough for a range). ``dof < 1`` counts as 1."""
    if dof < 1:
        dof = 1
    if dof == 1:
        return 12.706
    if dof == 2:
        return 4.303
    if dof == 3:
        return 3.182
    z = Z95
    return (z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * dof ** 3))


def small_sample(n: int) -> float:
    """Factor on a variance measured on ``n`` items so that ``Z`` standard errors span a t interval."""
    return (t_quantile(n - 1) / Z95) ** 2 if n >= 2 else 1.0


@dataclass(frozen=True)
class Figure:
    """A predicted total: the point and its variance (``sd``); :meth:`low` / :meth:`high` are the range."""

    point: float
    var: float = 0.0

    @property
    def sd(self) -> float:
        return math.sqrt(max(0.0, self.var))

    def spread(self, margin: float = MARGIN) -> float:
        return Z * self.sd + margin * abs(self.point)

    def low(self, margin: float = MARGIN) -> float:
        return max(0.0, self.point - self.spread(margin))

    def high(self, margin: float = MARGIN) -> float:
        return self.point + self.spread(margin)

    def scaled(self, k: float) -> "Figure":
        return Figure(self.point * k, self.var * k * k)

    def __add__(self, other: "Figure") -> "Figure":
        return Figure(self.point + other.point, self.var + other.var)

    def as_dict(self, exact: bool = False) -> dict[str, float]:
        """``point``, ``low``, ``high`` rounded; ``exact`` (nothing was extrapolated) gives no margin."""
        m = 0.0 if exact else MARGIN
        return {"point": round(self.point, 1), "low": round(self.low(m), 1), "high": round(self.high(m), 1)}


@dataclass
class Moments:
    """Per-item observations of one quantity: how many items, their sum and sum of squares."""

    n: int = 0
    total: float = 0.0
    sumsq: float = 0.0

    @classmethod
    def of(cls, values: list[float], n: int | None = None) -> "Moments":
        """``values`` of the items that had any; ``n`` counts the others as zeros."""
        count = len(values) if n is None else max(n, len(values))
        return cls(count, float(sum(values)), float(sum(v * v for v in values)))

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    @property
    def var(self) -> float:
        """Sample variance (``n - 1``); 0 for fewer than two items."""
        if self.n < 2:
            return 0.0
        return max(0.0, (self.sumsq - self.n * self.mean ** 2) / (self.n - 1))


def extrapolate(m: Moments, full: Figure, subset: bool = True) -> Figure:
    """Total over ``full.point`` items of a quantity measured per item on ``m.n`` of them.

    ``subset``: the pilot's items are among the full run's (the same ids), so the finite-population
    correction applies; when they are not (a stage whose inputs were sampled above it reads other
    items at full size, even when it saw as many in the pilot) the mean is one of a sample of items.
    """
    N = full.point
    if m.n == 0:
        return Figure(0.0, 0.0)
    f = min(1.0, m.n / N) if N > 0 and subset else 0.0
    sampling = (1.0 - f) * N * N * m.var / m.n * small_sample(m.n)
    return Figure(N * m.mean, sampling + m.mean ** 2 * full.var)


def ratio_var(pairs: list[tuple[float, float]], f: float = 0.0) -> float:
    """Variance of ``R = Σy / Σx`` over items ``(x_i, y_i)`` sampled from a population (the ratio
    estimator's linearised variance, ``(1 - f) · Σ(y_i - R x_i)² / ((n - 1) · n · x̄²)``, widened for
    small ``n``); 0 with fewer than two items or no ``x``."""
    n = len(pairs)
    sx = sum(x for x, _ in pairs)
    if n < 2 or sx <= 0:
        return 0.0
    r = sum(y for _, y in pairs) / sx
    resid = sum((y - r * x) ** 2 for x, y in pairs) / (n - 1)
    return max(0.0, 1.0 - f) * resid / (n * (sx / n) ** 2) * small_sample(n)


def share_var(kept: float, seen: float, f: float = 0.0) -> float:
    """Variance of a share ``kept / seen`` of rows taken independently (binomial; a fan-out above 1 is
    Poisson-like), widened for small samples: the fallback of :func:`ratio_var` when rows are not grouped
    by item. Never below :func:`floor_var` of ``seen``: 0 kept of 5 is not "surely none"."""
    if seen <= 0:
        return 0.0
    p = kept / seen
    spread = p * (1.0 - p) if p <= 1 else p
    return max(max(0.0, 1.0 - f) * spread / seen * small_sample(round(seen)), floor_var(seen, f))


def floor_var(n: float, f: float = 0.0) -> float:
    """The least doubt about a share seen on ``n`` units: none of ``n`` passing still allows up to about
    ``3 / n`` (the rule of three), i.e. a standard error of ``1.5 / n`` at ``Z`` = 2."""
    return max(0.0, 1.0 - f) * (1.5 / n) ** 2 if n > 0 else 0.0


def times_share(fig: Figure, share: float, share_variance: float) -> Figure:
    """``fig · share`` where the share is itself an estimate with ``share_variance``."""
    return Figure(fig.point * share, fig.var * share * share + fig.point ** 2 * share_variance
                  + fig.var * share_variance)


def ratio_figure(pilot_out: float, pilot_in: float, full: Figure) -> Figure:
    """Output of a stage seen as a whole (global stages: dedup, clustering): ``out/in`` of the pilot
    times the full input, with a binomial-like sampling term for the kept share."""
    if pilot_in <= 0:
        return Figure(0.0, 0.0)
    p = pilot_out / pilot_in
    N = full.point
    f = min(1.0, pilot_in / N) if N > 0 else 1.0
    return times_share(full, p, share_var(pilot_out, pilot_in, f))


@dataclass(frozen=True)
class Fit:
    """``y = a + b·x`` by least squares over the pilot's items, and its residual variance."""

    a: float
    b: float
    resid_var: float
    n: int


def fit_line(xs: list[float], ys: list[float], weights: list[float] | None = None) -> Fit:
    """Least squares (weighted by ``weights``, mean 1: a stratified pilot's weights); with no spread in ``x``
    the line goes through the origin (``y ∝ x``) when ``x > 0``."""
    n = len(xs)
    if n == 0:
        return Fit(0.0, 0.0, 0.0, 0)
    ws = weights or [1.0] * n
    sw = sum(ws)
    if sw <= 0:
        return Fit(0.0, 0.0, 0.0, 0)
    mx, my = sum(w * x for w, x in zip(ws, xs)) / sw, sum(w * y for w, y in zip(ws, ys)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    if sxx <= 1e-12:
        a, b = (0.0, my / mx) if mx > 0 else (my, 0.0)
    else:
        b = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sxx
        a = my - b * mx
    dof = max(1, n - 2)
    resid = sum(w * (y - a - b * x) ** 2 for w, x, y in zip(ws, xs, ys)) / sw * n / dof if n > 1 else 0.0
    return Fit(a, b, resid, n)


def extrapolate_fit(fit: Fit, items: int, x_total: float) -> Figure:
    """Total of ``a + b·x_i`` over ``items`` full-run items whose ``x`` sums to ``x_total``."""
    if fit.n == 0:
        return Figure(0.0, 0.0)
    f = min(1.0, fit.n / items) if items > 0 else 1.0
    return Figure(fit.a * items + fit.b * x_total,
                  (1.0 - f) * items * items * fit.resid_var / fit.n * small_sample(fit.n - 1))


def inside(value: float, fig: dict[str, float]) -> bool:
    """Whether a real figure falls inside a range as :meth:`Figure.as_dict` writes it."""
    return fig["low"] - 0.5 <= value <= fig["high"] + 0.5
