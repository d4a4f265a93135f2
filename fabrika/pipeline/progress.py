"""Run progress a person can trust: per-stage done/total, rate, ETA, tokens, cost, rejections.

Two renderings of the same state:

* a terminal (stdout is a TTY): a live rich display on stderr, one line per stage and an
  ``overall`` line;
* anything else (``| cat``, ``nohup``, SLURM logs): plain lines on stdout, one per running
  stage and one overall line every ``log_every`` seconds, plus one line when a stage ends.
  A background thread writes them, so a global stage that holds the event loop (embedding,
  MinHash) still shows up in the log.

Numbers mean what they say: ``done`` never exceeds ``total`` (a total that turns out too
small grows and is shown as ``≥``); the ETA comes from the current stage's own rate (items
finished in this invocation, resumed items excluded); "rej" counts rejections only, not
items passed over by a share (:data:`fabrika.pipeline.stage.PASSED_OVER_REASONS`); cost is
the engine's accounting (``llm.price_per_1m``). Long global stages report phases with
:func:`phase` (``phase("embedding", 3, 10)``), from any code running inside the stage.

Width: plain lines stay within ``width`` (default: the terminal's columns — ``COLUMNS`` or the
tty — capped at :data:`LINE_WIDTH`); what does not fit wraps onto indented continuation lines
instead of being cut. The live display drops the bar and the rate under 100 columns and folds
the counters column, so nothing runs off an 80-column terminal.
"""

from __future__ import annotations

import contextvars
import os
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column

#: Width the plain lines are kept under.
LINE_WIDTH = 100
#: Indent of a plain line's continuation lines (under the stage name, past the ``[elapsed]``).
INDENT = 9


def terminal_width(default: int = LINE_WIDTH) -> int:
    """Columns of the terminal (``COLUMNS`` first), at most ``default``; ``default`` when unknown."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return min(int(env), default)
    try:
        cols = os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return default
    return min(cols, default) if cols > 0 else default


def fit(head: str, tail: str, width: int) -> str:
    """``head tail`` on one line when it fits ``width``; else ``head`` (cut with … if even it is too
    long) and ``tail`` wrapped on lines indented by :data:`INDENT`."""
    line = f"{head} {tail}" if tail else head
    if len(line) <= width:
        return line
    first = head if len(head) <= width else head[: width - 1] + "…"
    rest = textwrap.wrap(tail, width=max(20, width), initial_indent=" " * INDENT, subsequent_indent=" " * INDENT,
                         break_on_hyphens=False)
    return "\n".join([first, *rest])


@dataclass
class _Stage:
    name: str
    total: int | None
    started: float
    done: int = 0
    processed: int = 0
    skipped: int = 0
    rejected: int = 0
    passed_over: int = 0
    tokens: int = 0
    requests: int = 0
    cached: int = 0
    errors: int = 0
    internal: int = 0
    cache_miss: int = 0
    pending: int = 0  # items left for the next run (outage, open breaker): not results
    first_processed: float | None = None
    phase: str | None = None
    finished: float | None = None
    grown: bool = False  # more items came than the counted total


_CURRENT: contextvars.ContextVar[tuple["RunProgress", int] | None] = contextvars.ContextVar(
    "fabrika_progress_stage", default=None)


def phase(name: str, done: int | None = None, total: int | None = None) -> None:
    """Name the phase the current stage is in (``embedding``, ``clustering``…); a no-op outside a run."""
    current = _CURRENT.get()
    if current is not None:
        current[0].set_phase(current[1], name, done, total)


def human(n: float) -> str:
    """``1234567`` → ``1.2M``."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def live_columns(width: int) -> list[Any]:
    """The live display's columns for a console ``width`` wide: all of them from 100 columns, else
    no bar and no rate, a shorter name, and the counters folding inside their column."""
    if width >= 100:
        return [TextColumn("[bold]{task.description:<26}"), BarColumn(bar_width=24),
                TextColumn("{task.fields[count]:>13}"), TextColumn("{task.fields[rate]:>8}"), TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"), TextColumn("{task.fields[extra]}")]
    return [TextColumn("[bold]{task.description}", table_column=Column(width=18, overflow="ellipsis", no_wrap=True)),
            TextColumn("{task.fields[count]:>11}", table_column=Column(no_wrap=True)),
            TimeElapsedColumn(), TextColumn("{task.fields[eta]}", table_column=Column(no_wrap=True)),
            TextColumn("{task.fields[extra]}", table_column=Column(overflow="fold", ratio=1))]


class RunProgress:
    """Progress of one ``fabrika run``; ``enabled=False`` (tests, ``--no-progress``) prints nothing.

    Args:
        enabled: show anything at all.
        log_every: seconds between plain lines (non-TTY); ``0`` prints only stage ends.
        plain: force plain lines (``True``) or the live display (``False``); default: plain unless
            stdout is a terminal.
        out: where plain lines go (default stdout).
        accounting: returns the engine's accounting snapshot (``rows`` with ``stage`` and ``cost``,
            ``totals``); cost is shown when prices are configured.
        expected_stages: how many stages this run will start (the overall line's denominator).
    """

    def __init__(self, enabled: bool = True, *, log_every: float = 30.0, plain: bool | None = None,
                 out: IO[str] | None = None, accounting: Callable[[], dict[str, Any]] | None = None,
                 expected_stages: int | None = None, width: int | None = None) -> None:
        self.enabled = enabled
        self.width = width or terminal_width()
        self.expected_stages = expected_stages
        self.plain = (not sys.stdout.isatty()) if plain is None else plain
        self.log_every = log_every
        self._out = out
        self._accounting = accounting
        self._stages: dict[int, _Stage] = {}
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_push: dict[int, float] = {}
        self._progress: Progress | None = None
        self._overall: Any = None
        if enabled and not self.plain:
            console = Console(stderr=True) if width is None else Console(stderr=True, width=width)
            self._progress = Progress(*live_columns(console.width), console=console, refresh_per_second=4)

    # -- lifecycle ------------------------------------------------------------------
    def __enter__(self) -> "RunProgress":
        self._started = time.monotonic()
        if self._progress is not None:
            self._progress.__enter__()
            self._overall = self._progress.add_task("overall", total=None, count="", rate="", eta="", extra="")
        elif self.enabled and self.plain and self.log_every > 0:
            self._thread = threading.Thread(target=self._tick, name="fabrika-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._progress is not None:
            self._push_overall()
            self._progress.__exit__(*exc)

    def note(self, text: str) -> None:
        """A line above the bars, for the run's header (e.g. the sandbox isolation mode)."""
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.console.print(text, highlight=False)
        else:  # plain logs: header notes are warnings-like, so they go to stderr with the warnings
            from rich.text import Text

            try:
                sys.stderr.write(Text.from_markup(text).plain + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    # -- the runner's calls -----------------------------------------------------------
    def add(self, name: str, total: int | None) -> int:
        """A stage starts; :func:`phase` calls from inside it reach this line from now on."""
        with self._lock:
            if self._progress is not None:
                task = int(self._progress.add_task(name, total=total, count="", rate="", eta="", extra=""))
            else:
                task = len(self._stages)
            self._stages[task] = _Stage(name=name, total=total, started=time.monotonic())
        _CURRENT.set((self, task))
        return task

    def advance(self, task: int, stats: Any) -> None:
        if self.enabled:
            self._update(task, stats)
            self._push(task, force=False)

    def finish(self, task: int, stats: Any) -> None:
        if not self.enabled:
            return
        self._update(task, stats)
        st = self._stages[task]
        st.finished = time.monotonic()
        st.phase = None
        if st.total is None or st.total < st.done:
            st.total = st.done
        self._push(task, force=True)
        if self.plain:
            self._write(self.stage_line(st, ended=True))

    def set_phase(self, task: int, name: str, done: int | None = None, total: int | None = None) -> None:
        st = self._stages.get(task)
        if st is None or not self.enabled:
            return
        st.phase = name if done is None else (f"{name} {done}/{total}" if total else f"{name} {done}")
        self._push(task, force=False)

    # -- state ---------------------------------------------------------------------------
    def _update(self, task: int, stats: Any) -> None:
        st = self._stages[task]
        llm = stats.llm
        st.processed = stats.processed
        st.skipped = stats.skipped
        st.done = stats.processed + stats.skipped
        if st.processed and st.first_processed is None:
            st.first_processed = st.started  # the rate counts this invocation's work, not resumed items
        if st.total is not None and st.done > st.total:
            st.total = None  # the input grew past its count: show "done/≥done" rather than 33/30
            st.grown = True
        st.rejected = stats.rejected
        st.passed_over = getattr(stats, "passed_over", 0)
        st.tokens = llm.prompt_tokens + llm.completion_tokens
        st.requests, st.cached, st.errors = llm.requests, llm.cached, llm.errors
        st.internal, st.cache_miss = stats.internal_errors, stats.cache_miss
        st.pending = getattr(stats, "pending", 0)

    def _costs(self) -> tuple[dict[str, float], float | None]:
        if self._accounting is None:
            return {}, None
        try:
            snap = self._accounting()
        except Exception:  # noqa: BLE001 - progress must never break a run
            return {}, None
        per: dict[str, float] = {}
        for row in snap.get("rows") or []:
            if row.get("cost") is not None:
                per[str(row.get("stage"))] = per.get(str(row.get("stage")), 0.0) + float(row["cost"])
        total = (snap.get("totals") or {}).get("cost")
        return per, (None if total is None else float(total))

    @staticmethod
    def _rate_eta(st: _Stage, now: float) -> tuple[float | None, float | None]:
        end = st.finished or now
        if not st.processed or st.first_processed is None or end <= st.first_processed:
            return None, None
        rate = st.processed / (end - st.first_processed)
        if st.total is None or st.finished:
            return rate, None
        return rate, max(0, st.total - st.done) / rate if rate > 0 else None

    @staticmethod
    def _count(st: _Stage) -> str:
        if st.total is None:
            return f"{st.done}/≥{st.done}" if st.grown else f"{st.done}/?"
        return f"{st.done}/{st.total}"

    def _extra(self, st: _Stage, cost: float | None) -> str:
        parts = [f"tok {human(st.tokens)}"]
        if cost is not None:
            parts.append(f"${cost:.2f}")
        if st.requests:
            parts.append(f"cache {st.cached}/{st.requests}")
        if st.rejected:
            parts.append(f"rej {st.rejected}")
        if st.passed_over:
            parts.append(f"passed-over {st.passed_over}")
        if st.skipped:
            parts.append(f"resumed {st.skipped}")
        if st.errors:
            parts.append(f"llm-err {st.errors}")
        if st.internal:
            parts.append(f"INTERNAL {st.internal}")
        if st.cache_miss:
            parts.append(f"cache-miss {st.cache_miss}")
        if st.pending:
            parts.append(f"PENDING {st.pending}")
        return " ".join(parts)

    # -- rendering -------------------------------------------------------------------------
    def stage_line(self, st: _Stage, ended: bool = False, cost: float | None = None) -> str:
        """A plain line about a stage (continuation lines when it does not fit ``width``, see :func:`fit`)."""
        now = time.monotonic()
        if cost is None:
            cost = self._costs()[0].get(st.name)
        rate, eta = self._rate_eta(st, now)
        pct = f" {100 * st.done / st.total:3.0f}%" if st.total else ""
        head = f"[{duration(now - self._started):>6}] {st.name[:22]:<22} {self._count(st)}{pct}"
        bits = [f"{rate:.1f}/s" if rate is not None else ""]
        if ended:
            bits.append(f"done in {duration((st.finished or now) - st.started)}")
        elif eta is not None:
            bits.append(f"ETA {duration(eta)}")
        if st.phase:
            bits.append(f"[{st.phase}]")
        return fit(" ".join(b for b in [head, *bits] if b), self._extra(st, cost), self.width)

    def overall_line(self) -> str:
        now = time.monotonic()
        _, total_cost = self._costs()
        stages = list(self._stages.values())
        done = sum(1 for s in stages if s.finished)
        running = [s.name for s in stages if not s.finished]
        tokens = sum(s.tokens for s in stages)
        rejected = sum(s.rejected for s in stages)
        of = max(len(stages), self.expected_stages or 0)
        head = (f"[{duration(now - self._started):>6}] {'overall':<22} stages {done}/{of} ended"
                f"  tok {human(tokens)}" + (f"  ${total_cost:.2f}" if total_cost is not None else "")
                + (f"  rej {rejected}" if rejected else ""))
        return fit(head, f"running: {', '.join(running)}" if running else "", self.width)

    def _write(self, line: str) -> None:
        stream = self._out or sys.stdout
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # closed pipe: progress is not worth a crash
            pass

    def _tick(self) -> None:
        while not self._stop.wait(self.log_every):
            with self._lock:
                stages = [s for s in self._stages.values() if not s.finished]
            per, _ = self._costs()
            for st in stages:
                self._write(self.stage_line(st, cost=per.get(st.name)))
            self._write(self.overall_line())

    def _push(self, task: int, force: bool) -> None:
        """Refresh the live display (at most a few times a second per stage)."""
        if self._progress is None:
            return
        now = time.monotonic()
        if not force and now - self._last_push.get(task, 0.0) < 0.25:
            return
        self._last_push[task] = now
        st = self._stages[task]
        per, _ = self._costs()
        rate, eta = self._rate_eta(st, now)
        desc = st.name if not st.phase else f"{st.name} [{st.phase}]"
        self._progress.update(
            TaskID(task), description=desc[:26], completed=st.done, total=st.total,
            count=self._count(st), rate=f"{rate:.1f}/s" if rate is not None else "",
            eta=f"ETA {duration(eta)}" if eta is not None else ("done" if st.finished else ""),
            extra=self._extra(st, per.get(st.name)))
        self._push_overall()

    def _push_overall(self) -> None:
        if self._progress is None or self._overall is None:
            return
        stages = list(self._stages.values())
        _, total_cost = self._costs()
        of = max(len(stages), self.expected_stages or 0, 1)
        ended = sum(1 for s in stages if s.finished)
        self._progress.update(
            self._overall, completed=ended, total=of, count=f"{ended}/{of} stages",
            extra=f"tok {human(sum(s.tokens for s in stages))}"
                  + (f" ${total_cost:.2f}" if total_cost is not None else "")
                  + (f" rej {sum(s.rejected for s in stages)}" if any(s.rejected for s in stages) else ""))
