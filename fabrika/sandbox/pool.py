"""A pool of sandboxed workers that run ``evaluate(response) -> bool``, one fresh process per verifier.

Why a pool of zygotes: verifiers run millions of times; starting a sandboxed
interpreter with razdel and pymorphy3 costs a third of a second, a fork about a
millisecond, a call a few microseconds. So each worker is a long-lived zygote
(see ``_worker.py``) that preloads the libraries once and forks a fresh child
for every request (one verifier, compiled once, and a batch of its responses).
State a verifier changes dies with its child: no verifier can change the
verdicts of another.

The zygote owns the per-response clock: ``timeout_s`` seconds of the verifier's own
CPU time (the child is killed, the remaining responses go to a new child), so a
loaded host changes no verdict. The parent keeps a backstop: a zygote silent past
the wall ceiling is SIGKILLed with its whole sandbox and replaced.

Verdicts versus infrastructure: what a verifier does (returns, raises, loops, crashes
its own process) is a verdict. What the host does is not: a worker that dies, a
reply stream without this batch's nonce, a missing end marker or bytes after it, a
verifier starved of CPU past the wall ceiling. Such a batch is retried on a fresh
worker (``INFRA_ATTEMPTS`` in all) and then raises :class:`SandboxInfrastructureError`
— the pipeline leaves the item pending; it never becomes "verifier broken". A worker
that exits cleanly right after a complete, well-framed answer gave a valid answer
(it is simply restarted for the next batch). The read buffer starts empty for every batch.

Usage::

    with SandboxPool(SandboxConfig(workers=4)) as pool:
        verdicts = pool.run_sync(code, ["ответ 1", "ответ 2"])
    async with SandboxPool() as pool:
        verdicts = await pool.run(code, responses)
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import queue
import secrets
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Sequence

from fabrika.errors import SandboxError, SandboxInfrastructureError
from fabrika.sandbox.config import ERROR_KINDS, FALSE, TRUE, SandboxConfig, Verdict
from fabrika.sandbox.isolation import WORKER_ENV, resolve_isolation, worker_command, worker_config
from fabrika.sandbox.precheck import is_syntax_error, precheck
from fabrika.sandbox.verdict_text import clean_message

log = logging.getLogger(__name__)

MAX_LINE = 64 * 1024
#: How much longer than the zygote's wall ceiling the parent waits for the zygote's next line before
#: it kills the whole sandbox (an infrastructure failure); covers a fork and a lazy pymorphy3 load.
BACKSTOP_S = 30.0
#: Tries of one batch (the first and the retries on fresh workers) before an infrastructure failure is raised.
INFRA_ATTEMPTS = 3
SELF_TEST_CODE = "def evaluate(r):\n    return r == 1\n"
#: Allowed libraries the zygote loads only when a verifier names them (see ``_worker.LAZY``).
LAZY_MODULES = ("pymorphy3",)
MESSAGE_MAX = 400


class _Timeout(Exception):
    pass


class _WorkerGone(Exception):
    pass


class _Worker:
    """One worker process and the parent's end of its pipes. Used by one thread at a time."""

    def __init__(self, config: SandboxConfig, isolation: str, scratch_base: str | None = None) -> None:
        self.config = config
        self.isolation = isolation
        self.scratch_base = scratch_base
        self.proc: subprocess.Popen[bytes] | None = None
        self.rfd = -1
        self.buf = b""
        self.pos = 0
        self.served = 0
        self.spawned = 0
        self.eof = False  # the worker closed its reply pipe (after a complete answer): restart before reuse

    def spawn(self) -> None:
        rfd, wfd = os.pipe()
        try:
            cmd = worker_command(self.isolation, worker_config(self.config, self.isolation, wfd, self.scratch_base))
            self.proc = subprocess.Popen(  # noqa: S603 - argv built by us
                cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(wfd,), start_new_session=True, close_fds=True, env=dict(WORKER_ENV), cwd="/",
            )
        except OSError as exc:
            os.close(rfd)
            raise SandboxError(f"cannot start a sandbox worker ({self.isolation}): {exc}") from exc
        finally:
            os.close(wfd)
        self.rfd, self.buf, self.pos, self.served, self.eof = rfd, b"", 0, 0, False
        self.spawned += 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and not self.eof and self.proc.poll() is None

    def kill(self, grace_s: float = 0.0) -> str:
        """SIGKILL the worker's process group (bwrap takes its pid namespace down with it).

        ``grace_s`` first waits that long for a worker that is already dying, so the
        returned description names its real end (a segfault, not our SIGKILL)."""
        proc, how = self.proc, ""
        if proc is not None and grace_s:
            try:
                code = proc.wait(timeout=grace_s)
                how = _describe_exit(code)
            except subprocess.TimeoutExpired:
                pass
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                code = proc.wait(timeout=5)
                how = how or _describe_exit(code)
            except subprocess.TimeoutExpired:
                how = how or "unknown"
            if proc.stdin:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        self._release()
        return how

    def close(self) -> None:
        """Graceful stop: EOF on stdin makes the worker return; kill if it does not."""
        proc = self.proc
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def _release(self) -> None:
        if self.rfd >= 0:
            os.close(self.rfd)
        self.rfd, self.proc, self.buf, self.pos = -1, None, b"", 0

    def send(self, code: str, responses: list[Any], guard: bool, nonce: str) -> None:
        self.buf, self.pos = b"", 0  # nothing read for an earlier batch survives into this one
        if select.select([self.rfd], [], [], 0)[0]:  # late bytes (or EOF) since the last end marker
            raise _WorkerGone("bytes (or end of file) between batches")
        try:
            body = json.dumps({"code": code, "responses": responses, "guard": guard}, ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            raise SandboxError(f"responses must be JSON-serialisable (str, numbers, lists, dicts): {exc}") from exc
        # The header is all the zygote decodes; the body (code and responses) it only passes on, from a
        # buffer it zeroes after the batch: no later verifier finds this one's inputs in its memory.
        header = json.dumps({"nonce": nonce, "n": len(responses), "lazy": [m for m in LAZY_MODULES if m in code]}).encode()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(struct.pack(">I", len(header)) + header + struct.pack(">I", len(body)) + body)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise _WorkerGone(str(exc)) from exc

    def read_line(self, deadline: float) -> bytes:
        """Next reply line; raises _Timeout at ``deadline`` and _WorkerGone on EOF or garbage."""
        while True:
            nl = self.buf.find(b"\n", self.pos)
            if nl >= 0:
                line, self.pos = self.buf[self.pos:nl], nl + 1
                return line
            self.buf, self.pos = self.buf[self.pos:], 0
            if len(self.buf) > MAX_LINE:
                raise _WorkerGone("protocol: reply line too long")
            # Poll once more even past the deadline: a parent descheduled under load must not call a
            # verdict that already sits in the pipe a timeout (verdicts would differ between runs).
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.rfd], [], [], left)
            if not ready:
                raise _Timeout
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                raise _WorkerGone("eof")
            self.buf += chunk

    def has_leftover(self) -> bool:
        """Bytes after the end marker, buffered or still in the pipe: the zygote cannot be trusted.

        End of file is not a byte: a worker that exits cleanly right after a complete answer (its
        pipe readable because it closed) gave a valid answer; it is only restarted for the next batch."""
        if self.pos < len(self.buf):
            return True
        if not select.select([self.rfd], [], [], 0)[0]:
            return False
        chunk = os.read(self.rfd, 1)
        if chunk:
            return True
        self.eof = True
        return False


@functools.lru_cache(maxsize=4096)
def _static_verdict(code: str, check: bool) -> Verdict | None:
    """Pre-check and syntax verdict of ``code`` (cached: one verifier meets many batches)."""
    if check:
        problems = precheck(code)
        if problems:
            return Verdict.error("precheck", "; ".join(problems)[:MESSAGE_MAX])
    syntax = is_syntax_error(code)
    return Verdict.error("syntax", syntax[:MESSAGE_MAX]) if syntax else None


def _describe_exit(code: int) -> str:
    """Exit status in words; bwrap reports a child killed by signal N as exit code 128+N."""
    sig = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        return f"signal {signal.Signals(sig).name}" if sig else f"exit code {code}"
    except ValueError:
        return f"exit code {code}"


def _message(payload: bytes) -> str:
    try:
        return str(json.loads(payload)["m"])[:MESSAGE_MAX]
    except (ValueError, KeyError, TypeError):
        return repr(payload[:80])


def _wall_ceiling(config: SandboxConfig) -> float:
    """The per-response wall ceiling the zygote applies (see ``SandboxConfig.wall_ceiling_s``)."""
    return config.wall_ceiling_s or max(10 * config.timeout_s, 10.0)


def _parse_reply(line: bytes, nonce: bytes) -> Verdict:
    """A verdict line from the zygote: ``<nonce>T|F|E{...}|X{...}``; raises on bad framing."""
    if not line.startswith(nonce):
        raise _WorkerGone(f"protocol: reply without this batch's nonce {line[:40]!r}")
    body = line[len(nonce):]
    tag = body[:1]
    if body == b"T":
        return TRUE
    if body == b"F":
        return FALSE
    try:
        data = json.loads(body[1:])
        # verifier-controlled text: clipped, control characters and host data (paths, passwd lines,
        # NAME=value pairs) removed before any caller can store it
        message = clean_message(str(data["m"]), MESSAGE_MAX)
        kind = str(data["k"]) if tag == b"E" else None
    except (ValueError, KeyError, TypeError) as exc:
        raise _WorkerGone(f"protocol: unparseable reply {line[:80]!r}") from exc
    if tag == b"X":
        return Verdict("timeout", None, message)
    if tag == b"E" and kind in ERROR_KINDS:
        return Verdict.error(kind, message)
    raise _WorkerGone(f"protocol: unexpected reply {line[:80]!r}")


class SandboxPool:
    """Runs LLM-written verifiers in isolated, resource-limited, long-lived worker processes.

    ``isolation`` is "bwrap" or "rlimits" (what actually runs, after ``auto``); the
    pipeline runner records it in the manifest as ``sandbox.isolation``.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.isolation: str = resolve_isolation(self.config.isolation)
        # rlimits: per-child scratch dirs live here (traversable, not listable, by the children's uids)
        self._scratch = None
        if self.isolation == "rlimits":
            self._scratch = tempfile.mkdtemp(prefix="fabrika-sandbox-")
            os.chmod(self._scratch, 0o711)
        self._workers = [_Worker(self.config, self.isolation, self._scratch) for _ in range(self.config.workers)]
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for worker in self._workers:
            self._idle.put(worker)
        self._executor = ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="sandbox")
        self._closed = False
        self._lock = threading.Lock()
        self._self_test()

    def _self_test(self) -> None:
        """Fail at construction, not on the millionth call, when workers cannot run code here.

        Never a fallback: the isolation chosen once (``resolve_isolation``) is the isolation this
        pool runs or it does not start — a verifier's verdicts must not depend on which mode a
        particular pool start happened to land in."""
        worker = self._workers[0]
        try:
            verdict = self._run_batch(worker, SELF_TEST_CODE, [1])[0]
        except SandboxError as exc:  # a worker that exits at once may close its pipe before we write
            problem = str(exc)
        else:
            if verdict.status == "true":
                return
            problem = f"{verdict.status} {verdict.error_kind or ''} {verdict.message or ''}".strip()
        self.close()
        hint = ("check that bubblewrap works here (a bwrap self-test failure is never a silent fallback) or set "
                "isolation='rlimits' to accept weaker isolation" if self.isolation == "bwrap" else
                "check the Python installation the workers start from")
        raise SandboxError(f"sandbox workers ({self.isolation}) fail their self-test: {problem}; {hint}")

    # -- public API -----------------------------------------------------------------

    def run_sync(self, code: str, responses: Sequence[Any]) -> list[Verdict]:
        """Verdicts of ``evaluate(r)`` for each response, in order; never raises for bad code."""
        early = self._early_verdicts(code, responses)
        if early is not None:
            return early
        futures = [self._submit(code, batch) for batch in self._batches(responses)]
        return [v for future in futures for v in future.result()]

    async def run(self, code: str, responses: Sequence[Any]) -> list[Verdict]:
        """Async :meth:`run_sync`; concurrent calls spread over the workers."""
        early = self._early_verdicts(code, responses)
        if early is not None:
            return early
        futures = [asyncio.wrap_future(self._submit(code, batch)) for batch in self._batches(responses)]
        results = await asyncio.gather(*futures)
        return [v for batch in results for v in batch]

    def close(self) -> None:
        """Stop every worker. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        for worker in self._workers:
            if worker.proc is not None:
                worker.kill()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    @property
    def stats(self) -> dict[str, int]:
        """Worker starts so far (first starts + respawns after kill/recycle)."""
        return {"spawned": sum(w.spawned for w in self._workers), "workers": len(self._workers)}

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SandboxPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # -- internals ------------------------------------------------------------------

    def _early_verdicts(self, code: str, responses: Sequence[Any]) -> list[Verdict] | None:
        if self._closed:
            raise SandboxError("SandboxPool is closed; create a new one")
        if not responses:
            return []
        verdict = _static_verdict(code, self.config.precheck) if isinstance(code, str) else \
            Verdict.error("precheck", f"code must be a str, got {type(code).__name__}")
        return None if verdict is None else [verdict] * len(responses)

    def _batches(self, responses: Sequence[Any]) -> list[list[Any]]:
        size = self.config.batch_size
        items = list(responses)
        return [items[i:i + size] for i in range(0, len(items), size)]

    def _submit(self, code: str, batch: list[Any]) -> Future[list[Verdict]]:
        return self._executor.submit(self._run_on_idle_worker, code, batch)

    def _run_on_idle_worker(self, code: str, batch: list[Any]) -> list[Verdict]:
        worker = self._idle.get()
        try:
            return self._run_batch(worker, code, batch)
        finally:
            self._idle.put(worker)

    def _run_batch(self, worker: _Worker, code: str, responses: list[Any]) -> list[Verdict]:
        """Verdicts of one batch; an infrastructure failure is retried on a fresh worker, then raised."""
        problems: list[str] = []
        for _ in range(INFRA_ATTEMPTS):
            try:
                verdicts = self._attempt(worker, code, responses)
            except _WorkerGone as exc:
                how = worker.kill(grace_s=0.2)
                problems.append(f"{exc} (worker {how})" if str(exc) == "eof" and how else str(exc))
                continue
            if worker.proc is not None and worker.served >= self.config.recycle_after:
                worker.kill()  # recycle: nothing in a zygote is worth a graceful stop
            return verdicts
        raise SandboxInfrastructureError(
            f"sandbox ({self.isolation}) gave no verdict in {INFRA_ATTEMPTS} tries on fresh workers: "
            + "; ".join(dict.fromkeys(problems)))

    def _attempt(self, worker: _Worker, code: str, responses: list[Any]) -> list[Verdict]:
        """One try of a batch on ``worker`` (started when needed); raises _WorkerGone on any
        infrastructure problem, which leaves nothing of this try trusted."""
        if not worker.alive:
            if worker.proc is not None:
                worker.kill()
            worker.spawn()
        nonce = secrets.token_hex(8)
        try:
            worker.send(code, responses, self.config.precheck, nonce)
        except _WorkerGone:  # it died (or finished cleanly) since its last batch: a fresh one
            worker.kill()
            worker.spawn()
            worker.send(code, responses, self.config.precheck, nonce)
        tag = nonce.encode()
        wait = _wall_ceiling(self.config) + BACKSTOP_S
        verdicts: list[Verdict] = []
        try:
            while len(verdicts) < len(responses):
                line = worker.read_line(time.monotonic() + wait)
                if line.startswith(tag + b"I"):  # the zygote says the host kept it from a verdict
                    raise _WorkerGone(f"infrastructure: {_message(line[len(tag) + 1:])}")
                verdicts.append(_parse_reply(line, tag))
            end = worker.read_line(time.monotonic() + wait)
        except _Timeout:
            raise _WorkerGone(f"the sandbox worker sent nothing for {wait:.0f}s (wall ceiling + backstop)") from None
        if end != tag + b"D":
            raise _WorkerGone(f"protocol: expected the end marker, got {end[:40]!r}")
        if worker.has_leftover():
            raise _WorkerGone("protocol: bytes after the end marker")
        worker.served += len(verdicts)
        return verdicts
