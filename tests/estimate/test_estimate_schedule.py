"""The estimate's wall time: stages' seconds laid out by the runner's scheduling rules, not summed."""

from __future__ import annotations

import pytest

from fabrika.pipeline.estimate_schedule import TIME_RESOLUTION_S, Job, simulate, within


def _branches(pool: str) -> list[Job]:
    """src (2 s) -> two independent branches a (10 s) and b (6 s) -> join (1 s)."""
    return [Job("src", 2.0, pool=pool), Job("a", 10.0, frozenset({"src"}), pool=pool),
            Job("b", 6.0, frozenset({"src"}), pool=pool), Job("join", 1.0, frozenset({"a", "b"}), pool=pool)]


def test_independent_branches_take_the_longer_branch_not_the_sum():
    s = simulate(_branches("wait"), max_parallel_stages=4, cores=2)
    assert s.wall == pytest.approx(2 + 10 + 1)  # max(10, 6), not 10 + 6
    assert s.start["a"] == s.start["b"] == pytest.approx(2.0)
    assert s.end["b"] == pytest.approx(8.0) and s.start["join"] == pytest.approx(12.0)


def test_a_chain_is_the_sum():
    jobs = [Job("a", 3.0, pool="wait"), Job("b", 4.0, frozenset({"a"}), pool="wait"),
            Job("c", 5.0, frozenset({"b"}), pool="wait")]
    assert simulate(jobs, max_parallel_stages=4, cores=8).wall == pytest.approx(12.0)


@pytest.mark.parametrize("pool", ["wait", "driver", "workers"])
def test_one_stage_at_a_time_is_the_sum(pool):
    assert simulate(_branches(pool), max_parallel_stages=1, cores=8).wall == pytest.approx(2 + 10 + 6 + 1)


def test_stages_in_one_process_share_its_core():
    # CPU-bound in the driver: overlapping gains nothing, whatever the cores
    s = simulate(_branches("driver"), max_parallel_stages=4, cores=8)
    assert s.wall == pytest.approx(19.0)
    assert s.end["b"] == pytest.approx(2 + 12)  # b shared the core with a: 6 s of work took 12 s


def test_sandbox_stages_use_the_other_cores_but_not_more_than_there_are():
    assert simulate(_branches("workers"), max_parallel_stages=4, cores=2).wall == pytest.approx(13.0)
    # one core: the two branches share it, as if one after another
    assert simulate(_branches("workers"), max_parallel_stages=4, cores=1).wall == pytest.approx(19.0)
    # a sandbox stage beside a driver stage: each on its own core
    jobs = [Job("gen", 8.0, pool="driver"), Job("check", 5.0, pool="workers")]
    assert simulate(jobs, max_parallel_stages=2, cores=2).wall == pytest.approx(8.0)
    assert simulate(jobs, max_parallel_stages=2, cores=1).wall == pytest.approx(13.0)


def test_slots_are_taken_in_the_order_stages_become_ready():
    jobs = [Job("a", 5.0, pool="wait"), Job("b", 1.0, pool="wait"), Job("c", 1.0, pool="wait")]
    s = simulate(jobs, max_parallel_stages=2, cores=4)
    assert s.start["c"] == pytest.approx(1.0)  # b's slot frees first
    assert s.wall == pytest.approx(5.0)


def test_a_streaming_stage_starts_with_its_upstream_and_ends_after_it():
    jobs = [Job("up", 10.0, pool="wait"), Job("down", 4.0, frozenset({"up"}), stream_from="up", pool="wait")]
    s = simulate(jobs, max_parallel_stages=4, cores=2)
    assert s.start["down"] == pytest.approx(0.0) and s.end["down"] == pytest.approx(10.0)
    assert s.wall == pytest.approx(10.0)
    # without streaming it waits for the upstream
    jobs[1] = Job("down", 4.0, frozenset({"up"}), pool="wait")
    assert simulate(jobs, max_parallel_stages=4, cores=2).wall == pytest.approx(14.0)


def test_bad_graphs_are_refused():
    with pytest.raises(ValueError, match="unknown"):
        simulate([Job("a", 1.0, frozenset({"nope"}))], 1, 1)
    with pytest.raises(ValueError, match="never start"):
        simulate([Job("a", 1.0, frozenset({"b"})), Job("b", 1.0, frozenset({"a"}))], 2, 2)
    with pytest.raises(ValueError):
        Job("a", 1.0, pool="gpu")


def test_a_time_point_is_right_within_a_quarter_or_the_resolution():
    assert TIME_RESOLUTION_S == 1.0
    assert within(2.0, 1.0)            # 1 s off a 1-second run: below what a second-long run can tell
    assert not within(2.5, 1.0)        # 1.5 s off is not
    assert within(120.0, 100.0) and not within(130.0, 100.0)  # long runs: the ±25% rule
