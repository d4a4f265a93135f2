"""Verdicts do not depend on host load: the same verifiers give the same verdicts on a quiet host
and with CPU-burning processes alongside, because the budget is the verifier's own CPU time.

The pool and two hogs are pinned to one CPU, so the verifier gets about a third of it: a verifier
that needs ~0.4 s of CPU under a 1 s budget takes over a second of wall time. Before, the zygote's
clock was the wall clock and that verifier timed out under load."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fabrika.sandbox import SandboxConfig, SandboxPool
from tests.sandbox.conftest import require_bwrap

WORK = "def evaluate(r):\n    total = sum(i * i for i in range(10_000_000))\n    return (total > 0) == (r == 'да')\n"
CORPUS = [
    (WORK, ["да", "нет"]),
    ("def evaluate(r):\n    return r.count('а') >= 2\n", ["мама", "дом", "папа"]),
    ("def evaluate(r):\n    while r == 'стоп':\n        pass\n    return True\n", ["да", "стоп", "нет"]),
    ("def evaluate(r):\n    return 1 / (len(r) - 3) > 0\n", ["дом", "домик"]),
    ("import re\ndef evaluate(r):\n    return bool(re.fullmatch(r'[а-я ]+', r))\n", ["кот бежит", "Cat"]),
]
EXPECTED = [["true", "false"], ["true", "false", "true"], ["true", "timeout", "true"],
            ["error:exception", "true"], ["true", "false"]]


def _kinds(verdicts) -> list[str]:
    return [v.status if v.status != "error" else f"error:{v.error_kind}" for v in verdicts]


@pytest.fixture
def one_cpu():
    """This process (and so the pool it starts) on one CPU; restored afterwards."""
    before = os.sched_getaffinity(0)
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})
    yield cpu
    os.sched_setaffinity(0, before)


def _hogs(cpu: int, n: int = 2) -> list[subprocess.Popen]:
    """Bounded CPU burners on ``cpu`` (they stop by themselves after 300 s; killed at teardown)."""
    burn = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(n)]  # noqa: S603
    for p in procs:
        os.sched_setaffinity(p.pid, {cpu})
    return procs


def _verdicts(isolation: str) -> list[list[str]]:
    with SandboxPool(SandboxConfig(workers=1, timeout_s=1.0, isolation=isolation)) as pool:
        return [_kinds(pool.run_sync(code, responses)) for code, responses in CORPUS]


@pytest.mark.parametrize("isolation", ["bwrap", "rlimits"])
def test_verdicts_are_identical_with_cpu_hogs_alongside(one_cpu, isolation):
    if isolation == "bwrap":
        require_bwrap()
    quiet = _verdicts(isolation)
    assert quiet == EXPECTED
    hogs = _hogs(one_cpu)
    try:
        loaded = _verdicts(isolation)
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    assert loaded == quiet
