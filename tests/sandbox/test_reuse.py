"""A verifier that never reads its response is decided once per pool (issue 26, the real IF mix).

The IF demo's mix spends most of its time on one verifier, ``while True: pass``, written for ten
constraints: each probed call cost a full CPU budget. Its first verdict cannot depend on the response
(``reuse.ignores_response``), so the pool learns it once: a later probed call gets a fatal first
verdict without running, a later plain call a timeout (after a timeout every response of a call starts
a fresh child, so each is again a first verdict). The verdicts must be exactly those of running the
calls, whatever the arrival order, in both modes.
"""

from __future__ import annotations

import asyncio

import pytest

from fabrika.sandbox import SandboxConfig, SandboxPool, precheck
from fabrika.sandbox.reuse import ignores_response
from tests.sandbox.conftest import require_bwrap

HANGS = "def evaluate(response):\n    while True:\n        pass\n"
BODY_HANGS = "while True:\n    pass\ndef evaluate(response):\n    return True\n"
#: Ignores its response but is stateful: its first verdict is reusable, its later ones are not.
COUNTER = "N = [0]\ndef evaluate(response):\n    N[0] += 1\n    return N[0] % 2 == 1\n"
#: Hangs only on some responses: reads its argument, so nothing is reused.
READS = "def evaluate(response):\n    while response == 'loop':\n        pass\n    return len(response) > 1\n"
CASES = ["a", "bb", "loop", "ccc"]


@pytest.mark.parametrize("code", [
    HANGS, BODY_HANGS, COUNTER,
    "def evaluate(response: str) -> bool:\n    return True\n",
    "import re\nX = re.compile('a')\ndef evaluate(_):\n    return bool(X.search('abc'))\n",
    "def evaluate(response):\n    def inner(text):\n        return text == 'x'\n    return inner('x')\n",
])
def test_code_that_never_reads_its_response_is_reusable(code):
    assert ignores_response(code)


@pytest.mark.parametrize("code", [
    READS,
    "def evaluate(response):\n    return [w for w in response.split()] == []\n",
    "def evaluate(response):\n    def inner():\n        return response\n    return inner() == ''\n",
    "def evaluate(*args):\n    return args[0] == ''\n",
    "def evaluate(response, **kw):\n    return kw == {}\n",
    "def evaluate(r):\n    global r\n    return True\n",
    "import functools\n@functools.lru_cache\ndef evaluate(response):\n    return True\n",
    "def evaluate(response):\n    return True\ndef evaluate(response):\n    return response == ''\n",
    "def evaluate(response):\n    return True\nevaluate = len\n",
    "def first(response):\n    return True\nevaluate = first\n",
    "def evaluat(response):\n    return True\n",
    "def evaluate(response:\n",
])
def test_code_that_may_read_its_response_is_not(code):
    assert not ignores_response(code)


def signature(verdicts) -> list[str]:
    return [v.status if v.status != "error" else f"error:{v.error_kind}" for v in verdicts]


def pool_for(mode: str, **overrides) -> SandboxPool:
    if mode == "bwrap":
        require_bwrap()
    return SandboxPool(SandboxConfig(**{"workers": 2, "timeout_s": 0.3, "isolation": mode, **overrides}))


def _one_by_one(code: str, calls: list[list[str]], probed: bool) -> list[list[str]]:
    """What each call gives on a pool of its own (nothing learnt from another call)."""
    out = []
    for call in calls:
        with pool_for("rlimits", workers=1) as pool:
            out.append(signature(pool.run_probed_sync(code, call) if probed else pool.run_sync(code, call)))
    return out


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
def test_a_hanging_verifier_costs_one_batch_per_pool_and_the_same_verdicts(mode):
    for code in (HANGS, BODY_HANGS):
        assert precheck(code) == []
        calls = [CASES[i:] + CASES[:i] for i in range(len(CASES))] * 2
        probed_alone = _one_by_one(code, calls[:2], probed=True)
        assert probed_alone == [["timeout"] * len(CASES)] * 2
        for order in (calls, calls[::-1]):
            with pool_for(mode) as pool:
                async def all_at_once(pool=pool, order=order, code=code):
                    return await asyncio.gather(*(pool.run_probed(code, c) for c in order))

                got = [signature(v) for v in asyncio.run(all_at_once())]
                assert got == [["timeout"] * len(CASES)] * len(order)
                assert pool.stats["batches"] == 1, "the calls waiting for the first one's verdict ran anyway"
                # a plain call after the timeout is known: every response a timeout, no batch
                assert signature(pool.run_sync(code, CASES)) == ["timeout"] * len(CASES)
                assert pool.stats["batches"] == 1


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
def test_a_verdict_that_is_not_fatal_is_never_reused(mode):
    """COUNTER's first verdict (true) is learnt but answers nothing: each call still runs, fresh."""
    calls = [CASES, CASES[:2], CASES[1:]]
    want_probed = _one_by_one(COUNTER, calls, probed=True)
    want_plain = _one_by_one(COUNTER, calls, probed=False)
    assert want_plain[0] == ["true", "false", "true", "false"]
    with pool_for(mode) as pool:
        assert [signature(pool.run_probed_sync(COUNTER, c)) for c in calls] == want_probed
        assert [signature(pool.run_sync(COUNTER, c)) for c in calls] == want_plain
        assert pool.stats["batches"] == 2 * len(calls)


def test_code_that_reads_its_response_is_run_every_time():
    calls = [["loop", "a"], ["a", "loop"], ["loop"]]
    want = _one_by_one(READS, calls, probed=True)
    assert want == [["timeout", "timeout"], ["false", "timeout"], ["timeout"]]
    with pool_for("rlimits") as pool:
        assert [signature(pool.run_probed_sync(READS, c)) for c in calls] == want
        assert pool.stats["batches"] == len(calls)


def test_nothing_is_reused_without_the_precheck():
    """Without the guarded builtins a verifier could read its argument through its frame."""
    with pool_for("rlimits", precheck=False, workers=1) as pool:
        for _ in range(2):
            assert signature(pool.run_probed_sync(HANGS, CASES[:2])) == ["timeout"] * 2
        assert pool.stats["batches"] == 2
