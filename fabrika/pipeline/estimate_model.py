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

The range is ``point ± (Z · sd + MARGIN · point)``: ``Z`` standard errors, plus a
systematic margin for what the sampling error does not see — the pilot is a stride sample
in input order, not a random one, and dedup and gates may keep another share at scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Standard errors on each side of the point.
Z = 2.0
#: Systematic margin (share of the point) on each side: first-items pilot, nonlinear dedup and gates.
MARGIN = 0.12


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


def extrapolate(m: Moments, full: Figure) -> Figure:
    """Total over ``full.point`` items of a quantity measured per item on ``m.n`` of them."""
    N = full.point
    if m.n == 0:
        return Figure(0.0, 0.0)
    f = min(1.0, m.n / N) if N > 0 else 1.0
    sampling = (1.0 - f) * N * N * m.var / m.n
    return Figure(N * m.mean, sampling + m.mean ** 2 * full.var)


def ratio_figure(pilot_out: float, pilot_in: float, full: Figure) -> Figure:
    """Output of a stage seen as a whole (global stages: dedup, clustering): ``out/in`` of the pilot
    times the full input, with a binomial-like sampling term for the kept share."""
    if pilot_in <= 0:
        return Figure(0.0, 0.0)
    p = pilot_out / pilot_in
    N = full.point
    f = min(1.0, pilot_in / N) if N > 0 else 1.0
    keep = p * (1.0 - p) if p <= 1 else p  # a share kept, or a fan-out (Poisson-like)
    return Figure(N * p, (1.0 - f) * N * keep * N / max(pilot_in, 1.0) + p * p * full.var)


@dataclass(frozen=True)
class Fit:
    """``y = a + b·x`` by least squares over the pilot's items, and its residual variance."""

    a: float
    b: float
    resid_var: float
    n: int


def fit_line(xs: list[float], ys: list[float]) -> Fit:
    """Least squares; with no spread in ``x`` the line goes through the origin (``y ∝ x``) when ``x > 0``."""
    n = len(xs)
    if n == 0:
        return Fit(0.0, 0.0, 0.0, 0)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 1e-12:
        a, b = (0.0, my / mx) if mx > 0 else (my, 0.0)
    else:
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        a = my - b * mx
    dof = max(1, n - 2)
    resid = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys)) / dof if n > 1 else 0.0
    return Fit(a, b, resid, n)


def extrapolate_fit(fit: Fit, items: int, x_total: float) -> Figure:
    """Total of ``a + b·x_i`` over ``items`` full-run items whose ``x`` sums to ``x_total``."""
    if fit.n == 0:
        return Figure(0.0, 0.0)
    f = min(1.0, fit.n / items) if items > 0 else 1.0
    return Figure(fit.a * items + fit.b * x_total, (1.0 - f) * items * items * fit.resid_var / fit.n)


def inside(value: float, fig: dict[str, float]) -> bool:
    """Whether a real figure falls inside a range as :meth:`Figure.as_dict` writes it."""
    return fig["low"] - 0.5 <= value <= fig["high"] + 0.5
