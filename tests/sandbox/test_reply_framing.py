"""The parent's side of the reply stream: only lines with the batch's nonce count, a missing end
marker or any byte after it taints the worker, and no buffer survives into the next batch.

A scripted stand-in for the zygote (a plain Python script speaking the protocol) forges
exactly the streams a compromised worker could send.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

import fabrika.sandbox.pool as pool_module
from fabrika.sandbox import SandboxConfig, SandboxPool

FAKE_ZYGOTE = textwrap.dedent('''
    import json, os, struct, sys
    cfg = json.loads(sys.argv[1])
    rep = cfg["reply_fd"]
    def read(n):
        out = b""
        while len(out) < n:
            chunk = os.read(0, n - len(out))
            if not chunk:
                sys.exit(0)
            out += chunk
        return out
    while True:
        req = json.loads(read(struct.unpack(">I", read(4))[0]))
        nonce, code, n = req["nonce"].encode(), req["code"], len(req["responses"])
        if "NO_NONCE" in code:
            os.write(rep, b"T\\n" * n + b"D\\n")
        elif "OLD_NONCE" in code:
            os.write(rep, b"0123456789abcdefT\\n" * n + b"0123456789abcdefD\\n")
        elif "LEFTOVER" in code:
            os.write(rep, (nonce + b"T\\n") * n + nonce + b"D\\n" + nonce + b"T\\n" * 8)
        elif "NO_END" in code:
            os.write(rep, (nonce + b"T\\n") * n + nonce + b"T\\n")
        else:
            os.write(rep, b"".join(nonce + (b"T" if r == 1 or r == "да" else b"F") + b"\\n"
                                   for r in req["responses"]) + nonce + b"D\\n")
''')


@pytest.fixture
def fake_pool(tmp_path, monkeypatch):
    script = tmp_path / "fake_zygote.py"
    script.write_text(FAKE_ZYGOTE, encoding="utf-8")
    monkeypatch.setattr(pool_module, "worker_command", lambda isolation, cfg: [sys.executable, str(script), cfg])
    with SandboxPool(SandboxConfig(workers=1, isolation="rlimits", timeout_s=0.5)) as p:
        yield p


def kinds(verdicts):
    return [v.status if v.status != "error" else f"error:{v.error_kind}" for v in verdicts]


@pytest.mark.parametrize("forgery", ["NO_NONCE", "OLD_NONCE", "LEFTOVER", "NO_END"])
def test_forged_or_trailing_replies_poison_only_their_batch(fake_pool, forgery):
    code = f"# {forgery}\ndef evaluate(r):\n    return True\n"
    assert kinds(fake_pool.run_sync(code, ["да", "нет", "да"])) == ["error:protocol"] * 3
    spawned = fake_pool.stats["spawned"]
    # the next batch gets a fresh worker and exactly its own verdicts, nothing left over
    assert kinds(fake_pool.run_sync("def evaluate(r):\n    return True\n", ["да", "нет"])) == ["true", "false"]
    assert fake_pool.stats["spawned"] == spawned + 1


def test_honest_stream_keeps_its_worker(fake_pool):
    for _ in range(3):
        assert kinds(fake_pool.run_sync("def evaluate(r):\n    return True\n", ["да", "нет"])) == ["true", "false"]
    assert fake_pool.stats["spawned"] == 1


def test_late_bytes_between_batches_taint_the_worker(fake_pool):
    assert kinds(fake_pool.run_sync("def evaluate(r):\n    return True\n", ["да"])) == ["true"]
    worker = fake_pool._workers[0]
    # bytes that arrive after the end marker was read (written into the worker's reply pipe)
    with open(f"/proc/{worker.proc.pid}/fd/{_reply_fd(worker)}", "wb", buffering=0) as pipe:
        pipe.write(b"0000000000000000T\n")
    spawned = fake_pool.stats["spawned"]
    assert kinds(fake_pool.run_sync("def evaluate(r):\n    return True\n", ["да", "нет"])) == ["true", "false"]
    assert fake_pool.stats["spawned"] == spawned + 1  # replaced before the batch, not trusted


def _reply_fd(worker) -> int:
    cmdline = open(f"/proc/{worker.proc.pid}/cmdline", "rb").read().split(b"\0")
    return json.loads(cmdline[2])["reply_fd"]


def test_a_reply_already_in_the_pipe_counts_even_when_the_parent_wakes_past_the_deadline() -> None:
    """Under load the parent may be scheduled after the deadline although the worker answered in time:
    the answer in the pipe is read, and only an empty pipe is a timeout."""
    import os
    import time

    worker = pool_module._Worker(SandboxConfig(), "none")
    rfd, wfd = os.pipe()
    worker.rfd = rfd
    try:
        os.write(wfd, b"abcT\n")
        assert worker.read_line(time.monotonic() - 5.0) == b"abcT"
        with pytest.raises(pool_module._Timeout):  # nothing more in the pipe: a timeout, at once
            worker.read_line(time.monotonic() - 5.0)
    finally:
        os.close(rfd)
        os.close(wfd)
