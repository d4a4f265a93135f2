"""A share a stage draws (``fc.irrelevance``' ``share``) is raised in the pilot and weighed back."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

import fabrika.generators.fc.irrelevance  # noqa: F401 - registers fc.irrelevance, which declares its draw
from fabrika.pipeline.estimate_draws import Draw, draw_fields, pilot_draws, reweigh
from fabrika.pipeline.estimate_model import Figure


def _stage(name: str, kind: str, **fields: float) -> SimpleNamespace:
    return SimpleNamespace(stage_name=name, kind=kind, **fields)


def test_a_declared_share_below_the_cut_is_raised_so_the_pilot_draws_as_many_as_the_run():
    stages = [_stage("irr", "fc.irrelevance", share=0.3), _stage("above", "fc.irrelevance", share=0.3),
              _stage("all", "fc.irrelevance", share=1.0), _stage("q", "if.queries", system_share=0.6)]
    draws = pilot_draws(stages, below_cut={"irr", "all", "q"}, fraction=0.2)
    # 0.3 / 0.2 > 1: every eligible input is drawn; a stage above the cut ran in full and keeps its share; a share
    # of 1 draws everything already; a mix that writes a row either way (system_share) is not a draw
    assert draws == {"irr": Draw("share", 0.3, 1.0)}
    assert pilot_draws(stages, {"irr"}, fraction=0.5) == {"irr": Draw("share", 0.3, 0.6)}
    assert pilot_draws(stages, {"irr"}, fraction=1.0) == {}  # nothing sampled: nothing to raise
    assert draw_fields("fc.irrelevance") == ("share",) and draw_fields("if.queries") == ()


def test_reweighing_is_unbiased_and_adds_the_full_run_s_own_draw():
    draw = Draw("share", 0.3, 1.0)
    fig = reweigh(Figure(100.0, 25.0), draw, draws_full=30.0)
    assert fig.point == pytest.approx(30.0)
    assert fig.var == pytest.approx(25.0 * 0.09 + 30.0 ** 2 * 0.7 / 30.0)
    # simulated: per input a cost when drawn; the pilot draws all, the run a Bernoulli(0.3) share
    rng = random.Random(0)
    costs = [rng.choice([2, 2, 4]) for _ in range(400)]
    full = [sum(c for c in costs if rng.random() < 0.3) for _ in range(200)]
    predicted = reweigh(Figure(float(sum(costs))), draw, draws_full=0.3 * len(costs))
    mean = sum(full) / len(full)
    assert abs(predicted.point - mean) < 0.03 * mean
    share_inside = sum(predicted.low() <= f <= predicted.high() for f in full) / len(full)
    assert share_inside > 0.95
