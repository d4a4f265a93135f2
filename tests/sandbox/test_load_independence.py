"""Verdicts do not depend on host load: the same verifiers give the same verdicts on a quiet host
and with CPU-burning processes alongside, because the budget is the verifier's own CPU time.

The pool and two hogs are pinned to one CPU, so the verifier gets about a third of it. The budget is
twice the CPU the working verifier needs on this machine (measured first: a fixed budget made the test
a statement about the CPU's speed — 0.4 s of work on one machine, 1.2 s on another), so it passes
quietly and, at a third of a CPU, takes ~1.5× the budget in wall time. Before, the zygote's clock was
the wall clock and that verifier timed out under load."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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


def _work_cpu_s() -> float:
    """CPU seconds the working verifier's loop takes in this interpreter (the slower of two tries)."""
    spent = []
    for _ in range(2):
        start = time.process_time()
        sum(i * i for i in range(10_000_000))
        spent.append(time.process_time() - start)
    return max(spent)


def _verdicts(isolation: str, budget_s: float) -> list[list[str]]:
    with SandboxPool(SandboxConfig(workers=1, timeout_s=budget_s, isolation=isolation)) as pool:
        return [_kinds(pool.run_sync(code, responses)) for code, responses in CORPUS]


@pytest.mark.parametrize("isolation", ["bwrap", "rlimits"])
def test_verdicts_are_identical_with_cpu_hogs_alongside(one_cpu, isolation):
    if isolation == "bwrap":
        require_bwrap()
    budget = round(max(1.0, 2 * _work_cpu_s()), 2)
    quiet = _verdicts(isolation, budget)
    assert quiet == EXPECTED
    hogs = _hogs(one_cpu)
    try:
        loaded = _verdicts(isolation, budget)
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    assert loaded == quiet
