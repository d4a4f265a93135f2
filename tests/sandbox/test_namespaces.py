"""Per-batch namespaces (bwrap): a fresh tmpfs /tmp with an inode cap and a fresh IPC namespace for
every verifier batch; rlimits: a fresh private scratch directory per batch. precheck=False: the
isolation must hold on its own."""

from __future__ import annotations

import os

import pytest

from fabrika.sandbox import SandboxConfig, SandboxPool
from tests.sandbox.conftest import require_bwrap

FLOOD = """
import os
def evaluate(r):
    n = 0
    try:
        while n < 200_000:
            os.close(os.open(f"f{n}", os.O_CREAT | os.O_WRONLY, 0o600))
            n += 1
    except OSError as exc:
        raise ValueError(f"stopped after {n} files: {exc.strerror}")
    return True
"""
LOOK = "import os\ndef evaluate(r):\n    return sorted(os.listdir('.'))\n"
HONEST = "def evaluate(r):\n    return r == 'да'\n"
SHM = """
import ctypes
def evaluate(r):
    libc = ctypes.CDLL(None, use_errno=True)
    if r == "make":
        small = libc.shmget(4242, 4096, 0o1666)
        big = libc.shmget(4343, 512 * 2 ** 20, 0o1666)
        return small >= 0 and big < 0  # a small segment is fine; 512 MiB is over the namespace's limit
    return libc.shmget(4242, 0, 0o666) < 0  # the earlier batch's segment is not visible
"""


@pytest.fixture(scope="module")
def bwrap_pool():
    require_bwrap()
    with SandboxPool(SandboxConfig(workers=1, timeout_s=2.0, precheck=False, isolation="bwrap",
                                   scratch_inodes=256)) as p:
        yield p


def test_an_inode_flood_stops_at_the_cap_and_leaves_nothing_for_the_next_verifier(bwrap_pool):
    [flood] = bwrap_pool.run_sync(FLOOD, ["x"])
    assert flood.error_kind == "exception" and "No space left on device" in flood.message, flood
    assert int(flood.message.split("after ")[1].split()[0]) < 256  # the cap, not the CPU budget, stopped it
    for _ in range(3):  # the next verifiers: an honest verdict at once, an empty scratch
        assert [v.status for v in bwrap_pool.run_sync(HONEST, ["да", "нет"])] == ["true", "false"]
        [look] = bwrap_pool.run_sync(LOOK, ["x"])
        assert look.error_kind == "non_bool" and "[]" in look.message
    assert bwrap_pool.stats["spawned"] == 1  # the zygote never had to be replaced


def test_sysv_shared_memory_is_per_batch_and_small(bwrap_pool):
    assert [v.status for v in bwrap_pool.run_sync(SHM, ["make"])] == ["true"]
    assert [v.status for v in bwrap_pool.run_sync(SHM, ["look"])] == ["true"]


def test_posix_shared_memory_and_message_queues_are_refused(bwrap_pool):
    code = ("import os, ctypes\ndef evaluate(r):\n"
            "    try:\n        os.open('/dev/shm/x', os.O_CREAT | os.O_WRONLY)\n        return False\n"
            "    except OSError:\n        pass\n"
            "    rt = ctypes.CDLL('librt.so.1', use_errno=True)\n"
            "    return rt.mq_open(b'/q', os.O_CREAT | os.O_RDWR, 0o600, None) < 0\n")
    assert [v.status for v in bwrap_pool.run_sync(code, ["x"])] == ["true"]


def test_rlimits_gives_each_batch_a_fresh_private_scratch_dir():
    with SandboxPool(SandboxConfig(workers=1, timeout_s=2.0, precheck=False, isolation="rlimits")) as p:
        # the cwd travels with '/' spelled '|': a verdict message never carries a host path (it is cleaned)
        write = ("import os\ndef evaluate(r):\n    open('left', 'w').write(r)\n"
                 "    raise ValueError(os.getcwd().replace('/', '|'))\n")
        dirs = {p.run_sync(write, ["x"])[0].message.split(": ", 1)[1].replace("|", "/") for _ in range(3)}
        assert len(dirs) == 3  # a new directory per batch
        base = os.path.dirname(next(iter(dirs)))
        [plain] = p.run_sync("import os\ndef evaluate(r):\n    raise ValueError(os.getcwd())\n", ["x"])
        assert base not in plain.message and "<path>" in plain.message  # stripped before any caller sees it
        assert oct(os.stat(base).st_mode & 0o777) == "0o711"  # children can enter their own, list none
        [look] = p.run_sync(LOOK, ["x"])
        assert look.error_kind == "non_bool" and "[]" in look.message
    assert not os.path.exists(base)  # the pool removes its scratch base when it closes
