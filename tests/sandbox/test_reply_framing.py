"""The parent's side of the reply stream: only lines with the batch's nonce count, a missing end
marker or any byte after it taints the worker, and no buffer survives into the next batch. A
tainted or dead worker is infrastructure, never a verdict: the batch is retried on a fresh worker
and then raises SandboxInfrastructureError. A clean exit right after a complete answer is valid.

A scripted stand-in for the zygote (a plain Python script speaking the protocol) forges
exactly the streams a compromised worker could send.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

import fabrika.sandbox.pool as pool_module
from fabrika.errors import SandboxInfrastructureError
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
        head = json.loads(read(struct.unpack(">I", read(4))[0]))  # nonce, n, lazy
        req = {**json.loads(read(struct.unpack(">I", read(4))[0])), **head}  # code, responses, guard
        nonce, code, n = req["nonce"].encode(), req["code"], len(req["responses"])
        flag = code.split("FLAG=")[1].split()[0] if "FLAG=" in code else None
        if "EXIT_AFTER_ANSWER" in code:  # a complete, well-framed answer, then a clean exit
            os.write(rep, b"".join(nonce + b"T\\n" for _ in range(n)) + nonce + b"D\\n")
            sys.exit(0)
        elif "DIE_MID_ANSWER" in code and not (flag and os.path.exists(flag)):
            if flag:
                open(flag, "w").close()  # dies once: the retry on a fresh worker answers
            os.write(rep, nonce + b"T\\n")
            os.kill(os.getpid(), 9)
        elif "NO_NONCE" in code:
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
def test_forged_or_trailing_replies_are_infrastructure_not_verdicts(fake_pool, forgery):
    code = f"# {forgery}\ndef evaluate(r):\n    return True\n"
    spawned = fake_pool.stats["spawned"]
    with pytest.raises(SandboxInfrastructureError, match="3 tries on fresh workers: protocol"):
        fake_pool.run_sync(code, ["да", "нет", "да"])
    assert fake_pool.stats["spawned"] == spawned + 2  # the first try on the old worker, two retries on fresh ones
    # the next batch gets a fresh worker and exactly its own verdicts, nothing left over
    spawned = fake_pool.stats["spawned"]
    assert kinds(fake_pool.run_sync("def evaluate(r):\n    return True\n", ["да", "нет"])) == ["true", "false"]
    assert fake_pool.stats["spawned"] == spawned + 1


def test_a_clean_exit_right_after_a_complete_answer_is_a_valid_answer(fake_pool, monkeypatch):
    """Before: under load the worker's EOF was already readable after the end marker and the pool
    called it "protocol: bytes after the end marker" — correct verifiers recorded as broken.
    The parent descheduled under load is simulated: it looks at the pipe only once the worker is gone."""
    real_read_line = pool_module._Worker.read_line

    def late_read_line(self, deadline):
        if self.pos == 0 and not self.buf and self.proc is not None:
            try:
                self.proc.wait(timeout=0.5)  # the worker finishes (and exits) before the parent reads
            except Exception:  # noqa: BLE001 - a worker that stays alive is read as usual
                pass
        return real_read_line(self, deadline)

    monkeypatch.setattr(pool_module._Worker, "read_line", late_read_line)
    code = "# EXIT_AFTER_ANSWER\ndef evaluate(r):\n    return True\n"
    for _ in range(3):
        spawned = fake_pool.stats["spawned"]
        assert kinds(fake_pool.run_sync(code, ["да", "нет"])) == ["true", "true"]
        assert fake_pool.stats["spawned"] <= spawned + 1  # no retry: the answer was valid
    assert kinds(fake_pool.run_sync("def evaluate(r):\n    return True\n", ["да", "нет"])) == ["true", "false"]


def test_a_worker_killed_mid_answer_is_retried_on_a_fresh_worker(fake_pool, tmp_path):
    flag = tmp_path / "died_once"
    code = f"# DIE_MID_ANSWER FLAG={flag}\ndef evaluate(r):\n    return True\n"
    spawned = fake_pool.stats["spawned"]
    assert kinds(fake_pool.run_sync(code, ["да", "нет"])) == ["true", "false"]  # the fresh worker's answer
    assert flag.exists() and fake_pool.stats["spawned"] == spawned + 1


def test_a_worker_that_dies_every_time_is_infrastructure_not_a_crash_verdict(fake_pool):
    code = "# DIE_MID_ANSWER\ndef evaluate(r):\n    return True\n"
    with pytest.raises(SandboxInfrastructureError, match="eof"):
        fake_pool.run_sync(code, ["да", "нет"])
    assert kinds(fake_pool.run_sync("def evaluate(r):\n    return True\n", ["да"])) == ["true"]


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
