"""Distractor topics are drawn without scanning the whole pool per plan."""

from __future__ import annotations

import random

from fabrika.generators.fc.plans import _sample_other_topics


def test_distinct_topics_never_the_own_one():
    pool = [f"t{i}" for i in range(50)]
    for seed in range(200):
        picked = _sample_other_topics(random.Random(seed), pool, "t7", 4)
        assert len(picked) == 4 == len(set(picked)) and "t7" not in picked


def test_small_pools_give_what_exists():
    assert _sample_other_topics(random.Random(0), ["a", "b"], "a", 5) == ["b"]
    assert _sample_other_topics(random.Random(0), ["a"], "a", 3) == []
    assert sorted(_sample_other_topics(random.Random(0), ["x", "y"], "z", 5)) == ["x", "y"]


def test_deterministic_for_a_seed():
    pool = [f"t{i}" for i in range(1000)]
    assert _sample_other_topics(random.Random(5), pool, "t1", 3) == _sample_other_topics(random.Random(5), pool, "t1", 3)
