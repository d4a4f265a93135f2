"""A verifier cannot read an earlier batch's code, responses or messages from its own memory: the
zygote passes request bodies and reply lines through buffers it zeroes, so the heap each spare is
forked from never held them. precheck=False and ctypes: the verifier reads its whole address space."""

from __future__ import annotations

import pytest

from fabrika.sandbox import SandboxConfig, SandboxPool
from tests.sandbox.conftest import require_bwrap

SECRET = "SECRET_MARKER_" + "Q7" * 5
EARLIER = f"""
def evaluate(r):
    if r.startswith("raise"):
        raise ValueError("the response was " + r)
    return r == {SECRET!r}
"""
#: Counts copies of the secret in every anonymous writable mapping; its own ``full`` is one of them.
SCAN = """
import ctypes
def evaluate(r):
    full = ("SECRET_MARKER_" + "Q7" * 4).encode() + b"Q7"
    hits = 0
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    for line in maps:
        parts = line.split()
        if not parts[1].startswith("rw") or len(parts) > 5 and parts[5].startswith("/"):
            continue
        a, b = (int(x, 16) for x in parts[0].split("-"))
        if b - a <= 2 ** 28:
            hits += ctypes.string_at(a, b - a).count(full)
    raise ValueError(f"hits {hits}")
"""


@pytest.mark.parametrize("isolation", ["bwrap", "rlimits"])
def test_no_earlier_batch_is_left_in_a_later_verifiers_memory(isolation):
    if isolation == "bwrap":
        require_bwrap()
    with SandboxPool(SandboxConfig(workers=1, isolation=isolation, precheck=False, memory_mb=2048)) as p:
        [control] = p.run_sync(SCAN, ["x"])
        assert control.message == "ValueError: hits 1", control  # only the scanner's own needle
        verdicts = p.run_sync(EARLIER, [SECRET, "raise " + SECRET, "другой ответ"])
        assert [v.status for v in verdicts] == ["true", "error", "false"]
        assert SECRET in verdicts[1].message  # the message reached the parent...
        for _ in range(2):
            [later] = p.run_sync(SCAN, ["x"])
            assert later.message == "ValueError: hits 1", later  # ...and no copy stayed in the zygote
