"""A pool of sandboxed workers that run ``evaluate(response) -> bool``, one fresh process per verifier.

Why a pool of zygotes: verifiers run millions of times; starting a sandboxed
interpreter with razdel and pymorphy3 costs a third of a second, a fork about a
millisecond, a call a few microseconds. So each worker is a long-lived zygote
(see ``_worker.py``) that preloads the libraries once and forks a fresh child
for every request (one verifier, compiled once, and a batch of its responses).
State a verifier changes dies with its child: no verifier can change the
verdicts of another. Calls of the SAME verifier code that wait for a worker together
share one batch (``SandboxConfig.group_calls``), each call a segment whose module body
the child runs afresh, so their verdicts are those of separate calls; ``run_probed``
puts a one-response probe and the rest in one batch the same way.

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
import collections
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
from fabrika.sandbox.reuse import ignores_response
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

    def send(self, code: str, responses: list[Any], guard: bool, nonce: str, segments: list[int],
             probes: list[int]) -> None:
        self.buf, self.pos = b"", 0  # nothing read for an earlier batch survives into this one
        if select.select([self.rfd], [], [], 0)[0]:  # late bytes (or EOF) since the last end marker
            raise _WorkerGone("bytes (or end of file) between batches")
        try:
            body = json.dumps({"code": code, "responses": responses, "guard": guard, "segments": segments},
                              ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            raise SandboxError(f"responses must be JSON-serialisable (str, numbers, lists, dicts): {exc}") from exc
        # The header is all the zygote decodes; the body (code and responses) it only passes on, from a
        # buffer it zeroes after the batch: no later verifier finds this one's inputs in its memory.
        header = json.dumps({"nonce": nonce, "n": len(responses), "lazy": [m for m in LAZY_MODULES if m in code],
                             "segments": segments, "probes": probes}).encode()
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


class _Unit:
    """One queued call (or one ``batch_size`` slice of it): a segment (two for a probed call) of a batch."""

    __slots__ = ("code", "responses", "segments", "probe", "future", "taken")

    def __init__(self, code: str, responses: list[Any], segments: list[int], probe: bool) -> None:
        self.code, self.responses, self.segments, self.probe = code, responses, segments, probe
        self.future: Future[list[Verdict]] = Future()
        self.taken = False


#: First verdicts of a probed call that answer the whole call (see ``SandboxPool.run_probed``).
PROBE_FATAL_KINDS = frozenset({"precheck", "syntax", "no_function", "memory", "crash"})


def _is_fatal(verdict: Verdict) -> bool:
    return verdict.status == "timeout" or (verdict.status == "error" and verdict.error_kind in PROBE_FATAL_KINDS)


def _gather_into(done: Future[list[Verdict]], futures: list[Future[list[Verdict]]]) -> None:
    """Set ``done`` to the concatenated results of ``futures`` once all are done (or to the first error)."""
    left = [len(futures)]
    lock = threading.Lock()

    def one(_: Future[list[Verdict]]) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        try:
            done.set_result([v for future in futures for v in future.result()])
        except BaseException as exc:  # noqa: BLE001 - the caller gets it
            done.set_exception(exc)

    for future in futures:
        future.add_done_callback(one)


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
        # calls waiting for a worker, oldest first, and the same per verifier code (see ``_take``)
        self._queue: collections.deque[_Unit] = collections.deque()
        self._by_code: dict[str, collections.deque[_Unit]] = {}
        self._queue_lock = threading.Lock()
        self._batches_run = 0
        # the first verdict of a call of code that never reads its response (``reuse.ignores_response``):
        # the same for every call, so a fatal one is learnt once per pool (see ``_known_verdicts``)
        self._first: dict[str, Verdict] = {}
        self._first_pending: dict[str, Future[list[Verdict]]] = {}
        self._first_lock = threading.Lock()
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
        batches = self._batches(responses)
        if len(batches) == 1:
            # one batch: this thread runs it (or whichever queued call is oldest) itself, instead of
            # handing it to a pool thread and waiting to be woken: two thread hand-offs less per batch
            future = self._submit(code, batches[0], inline=True)
            self._drain()
            return future.result()
        futures = [self._submit(code, batch) for batch in batches]
        return [v for future in futures for v in future.result()]

    async def run(self, code: str, responses: Sequence[Any]) -> list[Verdict]:
        """Async :meth:`run_sync`; concurrent calls spread over the workers (and calls of the same
        verifier that wait together share one isolated batch, each with a module state of its own)."""
        early = self._early_verdicts(code, responses)
        if early is not None:
            return early
        futures = [asyncio.wrap_future(self._submit(code, batch)) for batch in self._batches(responses)]
        results = await asyncio.gather(*futures)
        return [v for batch in results for v in batch]

    async def run_probed(self, code: str, responses: Sequence[Any]) -> list[Verdict]:
        """Like :meth:`run`, but when the FIRST response's verdict says the code cannot run at all
        (a timeout, or an error of kind precheck, syntax, no_function, memory or crash) every response
        gets that verdict and the others are not run: a hanging verifier costs one timeout, not one
        per response. The same verdicts as a one-response call followed (when not fatal) by a call
        with the rest, in one isolated batch instead of two."""
        return await asyncio.wrap_future(self._submit_probed(code, responses))

    def run_probed_sync(self, code: str, responses: Sequence[Any]) -> list[Verdict]:
        """Blocking :meth:`run_probed`."""
        return self._submit_probed(code, responses).result()

    def close(self) -> None:
        """Stop every worker. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with self._queue_lock:
            left, self._queue, self._by_code = list(self._queue), collections.deque(), {}
        self._executor.shutdown(wait=True, cancel_futures=True)
        for unit in left:
            if not unit.future.done():
                unit.future.set_exception(SandboxError("SandboxPool was closed before this call ran"))
        # a batch that a ``run_sync`` caller runs in its own thread finishes first (it holds its worker;
        # the zygote's wall ceiling and the backstop bound it), as the pool threads' batches did above
        held = [self._idle.get() for _ in self._workers]
        for worker in self._workers:
            if worker.proc is not None:
                worker.kill()
        for worker in held:  # a caller still waiting for a worker gets one, finds the queue empty and returns
            self._idle.put(worker)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    @property
    def stats(self) -> dict[str, int]:
        """Worker starts so far (first starts + respawns after kill/recycle) and isolated batches run
        for callers (several calls of one verifier may share one, see ``SandboxConfig.group_calls``)."""
        return {"spawned": sum(w.spawned for w in self._workers), "workers": len(self._workers),
                "batches": self._batches_run}

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SandboxPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # -- internals ------------------------------------------------------------------

    def _early_verdicts(self, code: str, responses: Sequence[Any], probed: bool = False) -> list[Verdict] | None:
        if self._closed:
            raise SandboxError("SandboxPool is closed; create a new one")
        if not responses:
            return []
        verdict = _static_verdict(code, self.config.precheck) if isinstance(code, str) else \
            Verdict.error("precheck", f"code must be a str, got {type(code).__name__}")
        if verdict is None:
            verdict = self._known_verdict(code, probed)
        return None if verdict is None else [verdict] * len(responses)

    def _reusable(self, code: str) -> bool:
        """The first verdict of any call of ``code`` is the same (``reuse.ignores_response``; sound only
        with the pre-check and guarded builtins on)."""
        return self.config.precheck and ignores_response(code)

    def _known_verdict(self, code: str, probed: bool) -> Verdict | None:
        """The verdict of every response of a call of ``code``, when it is already known without running it.

        Only for code whose first verdict does not depend on the response (:meth:`_reusable`), once a call
        of it has given that verdict: a probed call is answered by a fatal first verdict (as
        :meth:`run_probed` does after its probe); a plain call by a timeout, because after a timeout the
        zygote runs the next response in a fresh child, module body first, so every response of the call
        is again a first verdict. The same verdicts as running the call, in no isolated batch at all."""
        if not self._reusable(code):
            return None
        known = self._first.get(code)
        if known is None:
            return None
        if known.status == "timeout" or (probed and _is_fatal(known)):
            return known
        return None

    def _learn_first(self, units: list[_Unit], verdicts: list[Verdict]) -> None:
        """Remember the first verdict of each call of reusable code in a finished batch (each call's
        segment started with a fresh module, so its first verdict is the code's first verdict)."""
        pos = 0
        for unit in units:
            if unit.responses and self._reusable(unit.code) and unit.code not in self._first:
                with self._first_lock:
                    if len(self._first) < 4096:
                        self._first.setdefault(unit.code, verdicts[pos])
            pos += len(unit.responses)

    def _batches(self, responses: Sequence[Any]) -> list[list[Any]]:
        size = self.config.batch_size
        items = list(responses)
        return [items[i:i + size] for i in range(0, len(items), size)]

    def _submit(self, code: str, batch: list[Any], probe: bool = False, inline: bool = False) -> Future[list[Verdict]]:
        """Queue one call's batch; a worker thread picks it up, with other queued calls of the same code
        (``inline``: the caller runs :meth:`_drain` itself, in its own thread)."""
        probe = probe and len(batch) > 1
        unit = _Unit(code, batch, [1, len(batch) - 1] if probe else [len(batch)], probe)
        with self._queue_lock:
            if self._closed:
                raise SandboxError("SandboxPool is closed; create a new one")
            self._queue.append(unit)
            self._by_code.setdefault(code, collections.deque()).append(unit)
        if not inline:
            self._executor.submit(self._drain)
        return unit.future

    def _submit_probed(self, code: str, responses: Sequence[Any]) -> Future[list[Verdict]]:
        early = self._early_verdicts(code, responses, probed=True)
        if early is not None:
            done: Future[list[Verdict]] = Future()
            done.set_result(early)
            return done
        items = list(responses)
        if not self._reusable(code):
            return self._submit_probed_items(code, items)
        # code whose first verdict is the same for every call: while one probed call of it runs, the
        # others wait for its verdict (a fatal one answers them too) instead of each costing a timeout
        with self._first_lock:
            pending = self._first_pending.get(code)
            if pending is None:
                mine = self._submit_probed_items(code, items)
                self._first_pending[code] = mine
                mine.add_done_callback(lambda _: self._first_pending.pop(code, None))
                return mine
        done = Future()

        def after(_: Future[list[Verdict]]) -> None:
            try:
                early = self._early_verdicts(code, items, probed=True)
                if early is not None:
                    done.set_result(early)
                    return
                inner = self._submit_probed_items(code, items)
            except BaseException as exc:  # noqa: BLE001 - the caller gets it (a closed pool)
                done.set_exception(exc)
                return
            _gather_into(done, [inner])

        pending.add_done_callback(after)
        return done

    def _submit_probed_items(self, code: str, items: list[Any]) -> Future[list[Verdict]]:
        if len(items) <= self.config.batch_size:
            return self._submit(code, items, probe=True)
        done: Future[list[Verdict]] = Future()  # rare: more than one batch; the probe first, then (when not fatal) the rest
        first = self._submit(code, items[:1])

        def rest(future: Future[list[Verdict]]) -> None:
            try:
                verdict = future.result()[0]
                if _is_fatal(verdict):
                    done.set_result([verdict] * len(items))
                    return
                futures = [self._submit(code, batch) for batch in self._batches(items[1:])]
            except BaseException as exc:  # noqa: BLE001 - the caller gets it
                done.set_exception(exc)
                return
            _gather_into(done, [future, *futures])

        first.add_done_callback(rest)
        return done

    def _take(self) -> list[_Unit]:
        """The oldest queued call and, when grouping is on, later queued calls of the same code, up
        to ``batch_size`` responses in all (the caller holds ``_queue_lock``)."""
        while self._queue and self._queue[0].taken:
            self._queue.popleft()
        if not self._queue:
            return []
        head = self._queue.popleft()
        same = self._by_code[head.code]
        group = self.config.group_calls and self.config.precheck
        units: list[_Unit] = []
        size = 0
        while same and (not units or group):
            unit = same[0]
            if units and size + len(unit.responses) > self.config.batch_size:
                break
            same.popleft()
            unit.taken = True
            units.append(unit)
            size += len(unit.responses)
        if not same:
            del self._by_code[head.code]
        return units

    def _drain(self) -> None:
        """One worker thread's turn: an idle worker runs the calls :meth:`_take` groups into one batch."""
        worker = self._idle.get()
        try:
            with self._queue_lock:
                units = self._take()
            if not units:
                return
            responses = [r for unit in units for r in unit.responses]
            segments: list[int] = []
            probes: list[int] = []
            for unit in units:
                if unit.probe:
                    probes.append(len(segments))
                segments.extend(unit.segments)
            try:
                verdicts = self._run_batch(worker, units[0].code, responses, segments, probes)
            except BaseException as exc:  # noqa: BLE001 - every caller of the batch gets it
                for unit in units:
                    unit.future.set_exception(exc)
                return
            self._batches_run += 1
            self._learn_first(units, verdicts)
            pos = 0
            for unit in units:
                unit.future.set_result(verdicts[pos:pos + len(unit.responses)])
                pos += len(unit.responses)
        finally:
            self._idle.put(worker)

    def _run_batch(self, worker: _Worker, code: str, responses: list[Any], segments: list[int] | None = None,
                   probes: Sequence[int] = ()) -> list[Verdict]:
        """Verdicts of one batch (``segments``: the sizes of the calls in it, each run with a fresh
        module state; ``probes``: the segments that answer the next one when fatal, see
        :meth:`run_probed`); an infrastructure failure is retried on a fresh worker, then raised."""
        problems: list[str] = []
        for _ in range(INFRA_ATTEMPTS):
            try:
                verdicts = self._attempt(worker, code, responses, segments or [len(responses)], list(probes))
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

    def _attempt(self, worker: _Worker, code: str, responses: list[Any], segments: list[int],
                 probes: list[int]) -> list[Verdict]:
        """One try of a batch on ``worker`` (started when needed); raises _WorkerGone on any
        infrastructure problem, which leaves nothing of this try trusted."""
        if not worker.alive:
            if worker.proc is not None:
                worker.kill()
            worker.spawn()
        nonce = secrets.token_hex(8)
        try:
            worker.send(code, responses, self.config.precheck, nonce, segments, probes)
        except _WorkerGone:  # it died (or finished cleanly) since its last batch: a fresh one
            worker.kill()
            worker.spawn()
            worker.send(code, responses, self.config.precheck, nonce, segments, probes)
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
