"""Grouping a verifier's calls into one isolated batch changes no verdict (issue 26, item 4).

Calls of the same code that wait for a worker together run in one batch, each call with a
module state of its own (its module body run afresh in the batch's child). A STATEFUL verifier
(one that mutates a global) is the case that would tell: its verdicts must be those of separate
calls whatever the grouping — one call at a time, all calls waiting together, and batch sizes
("chunk sizes") that cut the calls differently — with a timeout in the middle of a call too.
``run_probed`` must give what a one-response probe call followed by a call with the rest gives.
"""

from __future__ import annotations

import asyncio

import pytest

from fabrika.sandbox import SandboxConfig, SandboxPool, precheck
from tests.sandbox.conftest import require_bwrap

#: Counts the responses its module has seen: any state carried from another call changes verdicts.
STATEFUL = '''
from typing import List

SEEN: List[str] = []
TOTAL = 0

def evaluate(response: str) -> bool:
    global TOTAL
    if response == "loop":
        while True:
            pass
    SEEN.append(response)
    TOTAL += len(response)
    return len(SEEN) % 2 == 1 and TOTAL < 12
'''

#: One call per "item" of a chunk: different sizes, a timeout in the middle of one of them.
CALLS = [["a", "bb", "c"], ["dd"], ["e", "loop", "ff", "g"], ["hhh", "i"], ["j"], ["kk", "l", "mmm", "n", "o"],
         ["p", "q"], ["rr"]]


def signature(verdicts) -> list[str]:
    return [v.status if v.status != "error" else f"error:{v.error_kind}" for v in verdicts]


def pool_for(mode: str, **overrides) -> SandboxPool:
    if mode == "bwrap":
        require_bwrap()
    return SandboxPool(SandboxConfig(**{"workers": 1, "timeout_s": 0.3, "isolation": mode, **overrides}))


async def _together(pool: SandboxPool, calls) -> list[list[str]]:
    return [signature(v) for v in await asyncio.gather(*(pool.run(STATEFUL, c) for c in calls))]


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
def test_a_stateful_verifier_gives_the_same_verdicts_grouped_and_ungrouped(mode):
    assert precheck(STATEFUL) == []
    with pool_for(mode, group_calls=False) as pool:
        one_by_one = [signature(pool.run_sync(STATEFUL, c)) for c in CALLS]
    # the expected verdicts follow from a fresh state per call (a state carried over would differ)
    assert one_by_one[0] == ["true", "false", "true"] and one_by_one[1] == ["true"]
    assert one_by_one[2] == ["true", "timeout", "true", "false"]  # the call goes on, fresh, after the timeout
    # batch sizes >= the longest call: only which calls share a batch changes
    for batch_size in (256, 7, 5):
        with pool_for(mode, batch_size=batch_size) as pool:
            got = asyncio.run(_together(pool, CALLS))
            batches = pool.stats["batches"]
        assert got == one_by_one, batch_size
        if batch_size == 256:
            assert batches < len(CALLS), "the calls waiting together were not grouped"
    # a smaller one also splits a long call into fresh batches: grouped equals ungrouped at that size
    with pool_for(mode, batch_size=3, group_calls=False) as pool:
        split = [signature(pool.run_sync(STATEFUL, c)) for c in CALLS]
    with pool_for(mode, batch_size=3) as pool:
        assert asyncio.run(_together(pool, CALLS)) == split


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
def test_grouping_is_the_same_for_any_order_of_arrival(mode):
    """The chunk's calls in another order (another timing) give each call the same verdicts."""
    with pool_for(mode) as pool:
        forward = asyncio.run(_together(pool, CALLS))
        backward = asyncio.run(_together(pool, CALLS[::-1]))[::-1]
    assert forward == backward


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
def test_run_probed_equals_a_probe_call_then_the_rest(mode):
    broken = "def evaluate(response):\n    return int(response) > 0\n"  # raises: not fatal, every case runs
    hangs = "def evaluate(response):\n    while True:\n        pass\n"
    no_function = "def evaluat(response):\n    return True\n"
    cases = ["a", "bb", "ccc", "loop", "d"]
    with pool_for(mode, group_calls=False) as pool:
        expected = {}
        for code in (STATEFUL, broken, hangs, no_function):
            first = pool.run_sync(code, cases[:1])
            fatal = first[0].status == "timeout" or first[0].error_kind in {"no_function", "memory", "crash"}
            expected[code] = signature(first * len(cases) if fatal else first + pool.run_sync(code, cases[1:]))
    assert expected[STATEFUL] == ["true", "true", "false", "timeout", "true"]
    assert expected[hangs] == ["timeout"] * len(cases)
    assert expected[broken] == ["error:exception"] * len(cases)
    with pool_for(mode) as pool:
        for code, want in expected.items():
            assert signature(pool.run_probed_sync(code, cases)) == want, code
        batches = pool.stats["batches"]

        async def concurrently():
            return await asyncio.gather(*(pool.run_probed(code, cases) for code in expected))

        for code, got in zip(expected, asyncio.run(concurrently())):
            assert signature(got) == expected[code]
    assert batches == 4, "one batch per probed call, not two"
