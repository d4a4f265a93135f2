"""Stopping a run on SIGTERM or SIGINT, whatever the step is doing.

``loop.add_signal_handler`` acts only when the event loop gets control, so a run sitting in a
CPU-bound step on the loop thread (a 30-minute index build) ignored SIGTERM until it finished.
:class:`StopOnSignals` installs plain ``signal.signal`` handlers, which Python runs in the main
thread between two bytecodes of whatever it is doing, and stops in three steps:

1. **The first signal asks the loop to stop**: the run's main task is cancelled (thread-safely, the
   loop wakes up), so every stage saves what it finished — a per-item stage writes its finished
   items as a shard, the manifest says ``interrupted`` — exactly as Ctrl-C always did.
2. **A busy loop is interrupted.** A watchdog thread waits :data:`GRACE_S` for the loop to take the
   stop; when it does not (the loop thread is in a CPU-bound step), the watchdog signals the main
   thread once more and the handler raises :class:`RunStopped` there, in the middle of the step,
   the way a second Ctrl-C does. The step unwinds through the same ``except``/``finally`` code, so
   finished items are saved and the manifest says ``interrupted``. The nudge is deferred while the
   main thread is inside a store write or the runner's bookkeeping right after one
   (:data:`PROTECTED`): an exception between a shard's rename and the runner noting it would write
   those items twice; it is retried every :data:`NUDGE_RETRY_S` until it lands outside.
3. **A second signal stops at once**, and so does the watchdog when the whole stop has not ended
   within :data:`LIMIT_S`: one line on stderr and ``os._exit`` — exactly what ``kill -9`` does,
   which the store is built to survive (whole-item journal records, shards renamed into place,
   a manifest that names the dead process, see :func:`fabrika.store.manifest.effective_status`).
   Child processes die with the driver: LLM worker subprocesses and sandbox zygotes ask the kernel
   for ``PR_SET_PDEATHSIG`` (bubblewrap: ``--die-with-parent``).

Work in a thread-pool executor (``asyncio.to_thread``) cannot be interrupted — Python has no way
to stop a thread — but it no longer holds the stop: the cancelled ``await`` returns at once, the
loop's default executor is a :class:`StopAwareExecutor` that, once a stop was asked, shuts down
without waiting for running work, and ``fabrika``'s process entry (:func:`fabrika.cli.app.main`)
leaves with ``os._exit`` after a stop, so a thread still computing does not keep the process
alive. What such a thread writes later is an atomic rename or nothing.

A stop always ends in :class:`RunStopped` (a :class:`KeyboardInterrupt`, so code that handles
Ctrl-C handles it), whose exit code is 128 + the signal's number: 130 for SIGINT, 143 for
SIGTERM — the shell's convention, never 0, and never 3 (a run that ended with items pending).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import FrameType, TracebackType
from typing import Any, Awaitable, Callable, TypeVar
from weakref import WeakKeyDictionary

T = TypeVar("T")


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


#: Seconds the event loop gets to take a stop before the main thread is interrupted where it is
#: (``FABRIKA_STOP_GRACE_S``).
GRACE_S = _seconds("FABRIKA_STOP_GRACE_S", 3.0)
#: Seconds the whole stop may take (saving finished items, LLM workers saving theirs, closing
#: pools) before the process exits at once as on a second signal (``FABRIKA_STOP_LIMIT_S``).
LIMIT_S = _seconds("FABRIKA_STOP_LIMIT_S", 120.0)
#: A deferred nudge (the main thread was inside a store write) is retried this often.
NUDGE_RETRY_S = 0.1
#: Where the main thread is never interrupted: store writes (shards, journal, manifest, request
#: bodies) and the runner's bookkeeping around them (module prefix, or ``(module, function)``).
PROTECTED: tuple[str | tuple[str, str], ...] = (
    "fabrika.store.",
    ("fabrika.pipeline.execute", "flush"),
    ("fabrika.pipeline.execute", "finished_item"),
    ("fabrika.pipeline.runner", "save"),
    ("fabrika.eval.runstore", "append"),
)

#: The signal of the stop in progress (set by the first signal, cleared when its scope ends; read by
#: the LLM-worker launcher, which then also signals its workers).
_received: list[int] = []


class RunStopped(KeyboardInterrupt):
    """The run was stopped by a signal; ``exit_code`` is 128 + its number (130 SIGINT, 143 SIGTERM)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal_name(signum)}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal_name(self.signum)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def stop_received() -> int | None:
    """The signal of the stop in progress in this process, if there is one."""
    return _received[0] if _received else None


def _protected(frame: FrameType | None) -> bool:
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        for p in PROTECTED:
            if (module.startswith(p) if isinstance(p, str)
                    else (module == p[0] and frame.f_code.co_name == p[1])):
                return True
        frame = frame.f_back
    return False


def _say(line: str) -> None:
    """One line on stderr, written straight to the fd (safe inside a signal handler)."""
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


class StopAwareExecutor(ThreadPoolExecutor):
    """The loop's default executor: after a stop was asked, ``shutdown`` does not wait for running work
    (a thread cannot be interrupted) and drops queued work, so ``asyncio.run`` ends without it."""

    #: set by :class:`StopOnSignals` on the first signal
    stopping = False

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self.stopping:
            wait, cancel_futures = False, True
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


_executors: WeakKeyDictionary[asyncio.AbstractEventLoop, StopAwareExecutor] = WeakKeyDictionary()


def guard_default_executor(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop``'s default executor a :class:`StopAwareExecutor` (once per loop)."""
    if loop not in _executors:
        executor = _executors[loop] = StopAwareExecutor(thread_name_prefix="asyncio")
        loop.set_default_executor(executor)


class StopOnSignals:
    """Stop ``task`` (the run's main task, on ``loop``) on ``signals``; see the module docs.

    A context manager; outside the main thread it does nothing (Python delivers signals there only).
    ``hard_stop_line``: what the line printed on an immediate stop says after "stopped at once";
    ``notice``: say on stderr that the first signal was heard (an LLM worker leaves that to its driver).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any],
                 signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT), grace_s: float | None = None,
                 limit_s: float | None = None,
                 hard_stop_line: str = "finished items are in the stage journals; rerun the same command to resume",
                 exit_now: Callable[[int], None] = os._exit, notice: bool = True) -> None:
        self.loop = loop
        self.task = task
        self.signals = signals
        self.grace_s = GRACE_S if grace_s is None else grace_s
        self.limit_s = LIMIT_S if limit_s is None else limit_s
        self.hard_stop_line = hard_stop_line
        self.exit_now = exit_now
        self.notice = notice
        #: the first signal received in this scope
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._asked = threading.Event()  # the first signal came (or the scope ended)
        self._taken = threading.Event()  # the loop took the stop (or the scope ended)
        self._ended = threading.Event()
        self._nudge = False  # the next signal the handler sees is the watchdog's: raise RunStopped
        self._lock = threading.Lock()  # the watchdog never signals the main thread once the scope ended
        self._raised = False  # a nudge raised RunStopped in the main thread
        self._sent = 0  # nudges the watchdog sent, and signals the handler saw while nudging
        self._seen = 0
        self._watchdog: threading.Thread | None = None

    # -- scope ------------------------------------------------------------------------
    def __enter__(self) -> StopOnSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handler)
        self._watchdog = threading.Thread(target=self._watch, name="fabrika-stop-watchdog", daemon=True)
        self._watchdog.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            with self._lock:
                self._ended.set()
        finally:
            self._asked.set()
            self._taken.set()
            if self.signum is not None and self.signum in _received:
                _received.remove(self.signum)
            for signum, previous in self._previous.items():  # (None: a handler set outside Python)
                signal.signal(signum, signal.SIG_DFL if previous is None else previous)
            self._previous.clear()

    @property
    def stopped(self) -> RunStopped | None:
        """The stop to raise once the run has saved what it finished (``None``: no signal came)."""
        return None if self.signum is None else RunStopped(self.signum)

    # -- the handler (main thread, between two bytecodes of whatever runs there) -----------
    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self._ended.is_set():
            return  # the run is past its stop (or finished); the previous handlers come back now
        if self._sent:  # the watchdog nudged (the loop did not take the stop): up to its count, signals are its own
            self._seen += 1  # (signals coalesce: a user's signal may count as a nudge; the next one will not)
            if self._seen > self._sent:  # more signals than the watchdog sent: one is the user's second
                self.stop_at_once(f"{signal_name(signum)} again")
                return
            if not self._nudge or _protected(frame):
                return  # a late nudge after the one that landed / retried once out of the store write
            self._nudge = False
            self._raised = True
            assert self.signum is not None
            raise RunStopped(self.signum)
        if self.signum is None:
            self.signum = signum
            _received.append(signum)
            executor = _executors.get(self.loop)
            if executor is not None:
                executor.stopping = True
            if self.notice:
                _say(f"fabrika: {signal_name(signum)}: stopping — saving finished items "
                     f"(send it again to stop at once)")
            try:
                self.loop.call_soon_threadsafe(self._take)
            except RuntimeError:  # the loop is closed: nothing left to save
                self._taken.set()
            self._asked.set()
            return
        self.stop_at_once(f"{signal_name(signum)} again")

    def _take(self) -> None:
        """On the loop: the stop reached it; cancel the run (stages save what they finished)."""
        self._taken.set()
        self._nudge = False  # the loop has it: no need to interrupt anything
        if not self._ended.is_set() and not self._raised:  # (a landed nudge is unwinding the run already)
            self.task.cancel()

    def stop_at_once(self, why: str) -> None:
        """One line, then exit like ``kill -9`` would (see module docs)."""
        signum = self.signum if self.signum is not None else signal.SIGTERM
        _say(f"fabrika: stopped at once ({why}): {self.hard_stop_line}")
        self.exit_now(128 + signum)

    # -- the watchdog thread -----------------------------------------------------------
    def _watch(self) -> None:
        self._asked.wait()
        if self._ended.is_set():
            return
        asked = time.monotonic()
        main = threading.main_thread().ident
        if not self._taken.wait(self.grace_s):  # the loop thread is busy: interrupt it where it is
            assert self.signum is not None and main is not None
            self._nudge = True
            while self._nudge and not self._taken.is_set():
                with self._lock:
                    if self._ended.is_set():
                        return
                    self._sent += 1
                    signal.pthread_kill(main, self.signum)  # a real signal: a blocking call returns EINTR
                if self._ended.wait(NUDGE_RETRY_S):
                    return
        if not self._ended.wait(max(0.0, asked + self.limit_s - time.monotonic())):
            self.stop_at_once(f"the stop took longer than {self.limit_s:g} s")


async def stoppable(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` in the current task under :class:`StopOnSignals`: SIGTERM/SIGINT raise
    :class:`RunStopped` once it has unwound (what it saved is kept), whatever it was doing."""
    return await stoppable_with(lambda _stop: awaitable)


async def stoppable_with(make: Callable[[StopOnSignals], Awaitable[T]]) -> T:
    """:func:`stoppable` of ``make(stop)``, for work that needs the :class:`StopOnSignals` itself (the runner
    checks it after its last stage, before writing a version)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None  # a coroutine awaited by asyncio.run always runs in a task
    guard_default_executor(loop)
    with StopOnSignals(loop, task) as stop:
        try:
            result = await make(stop)
        except asyncio.CancelledError as exc:
            if stop.stopped is None:
                raise
            raise stop.stopped from exc
        if stop.stopped is not None:
            raise stop.stopped
        return result


__all__ = ["GRACE_S", "LIMIT_S", "PROTECTED", "RunStopped", "StopAwareExecutor", "StopOnSignals", "stoppable_with",
           "guard_default_executor", "signal_name", "stop_received", "stoppable"]
