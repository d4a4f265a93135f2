"""What a run's outcome is: per-stage counters, and the lines that say a run did not finish.

A stage did not finish when items are still pending (an outage, an open
breaker, ``--cache-only`` misses), when its share of items that failed for LLM
reasons passes ``llm.max_failure_rate`` (judged once ``MIN_ITEMS_FOR_RATE``
items finished, or at 100 %), or when it stopped early (the runner stops a
stage when the rate over its recent items — a window of ``2 × max_in_flight``,
at least ``MIN_ITEMS_FOR_RATE`` — passes the limit). A stage that rejected
every item it processed is a loud warning, not a failure (a strict gate may do that).
Items left pending by an infrastructure fault in stage code (``transient``, retried within
the run first; :mod:`fabrika.pipeline.taxonomy`) count as pending too. A bug or a
configuration problem is not an outcome here: it stops the run with
:class:`fabrika.errors.StageFailure`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from fabrika.pipeline.llm_wrap import LLMCounters

#: A stage's failure rate is judged (for stopping early) once this many items finished.
MIN_ITEMS_FOR_RATE = 50


@dataclass
class StageStats:
    """What one stage did in this invocation (store totals are added from the shards)."""

    seen: int = 0
    processed: int = 0
    skipped: int = 0
    cache_miss: int = 0
    #: always 0: an exception in stage code is never a row (kept so older manifests read alike)
    internal_errors: int = 0
    #: item attempts that met an infrastructure fault in stage code (each retried or left pending)
    transient: int = 0
    #: the last such fault (``Type: message``), for the one-line summary
    last_transient: str | None = None
    rejected: int = 0
    #: rows stored with a sampling/eligibility reason (``not_sampled``): by design, not rejections
    passed_over: int = 0
    shards: int = 0
    rows_written: int = 0
    seconds: float = 0.0
    llm: LLMCounters = field(default_factory=LLMCounters)
    report: dict[str, Any] = field(default_factory=dict)
    fingerprint: str | None = None
    #: items left unwritten because an LLM answer failed outside the item (retried by the next run)
    pending: int = 0
    #: items whose LLM call failed terminally and that produced nothing but rejections
    llm_failed: int = 0
    ok_rows: int = 0
    recovered: int = 0
    stopped_early: bool = False
    reprocessed: list[str] = field(default_factory=list)

    def failure_rate(self) -> float:
        finished = self.processed + self.pending - self.cache_miss
        return (self.pending - self.cache_miss + self.llm_failed) / finished if finished > 0 else 0.0

    def restart_items(self) -> None:
        """Forget the item counters: the stage's items are redone from scratch (LLM counters and reports stay)."""
        for name in ("seen", "processed", "skipped", "cache_miss", "internal_errors", "transient", "rejected",
                     "passed_over", "shards", "rows_written", "pending", "llm_failed", "ok_rows", "recovered"):
            setattr(self, name, 0)
        self.stopped_early = False

    def manifest_facts(self) -> dict[str, Any]:
        """What the manifest records of a finished stage (the store adds its table's counts)."""
        facts: dict[str, Any] = dict(
            seen=self.seen, processed=self.processed, skipped=self.skipped, cache_miss=self.cache_miss,
            internal_errors=self.internal_errors, seconds=round(self.seconds, 3), llm=self.llm.as_dict(),
            report=self.report, pending=self.pending, recovered_from_journal=self.recovered,
            stopped_early=self.stopped_early, failure_rate=round(self.failure_rate(), 4),
            transient=self.transient,
        )
        if self.fingerprint is not None:
            facts["input_fingerprint"] = self.fingerprint
        if self.reprocessed:
            facts["reprocessed_because"] = self.reprocessed
        return facts

    def live_facts(self) -> dict[str, Any]:
        """What the manifest shows of a stage still running (counters only)."""
        return dict(seen=self.seen, processed=self.processed, skipped=self.skipped,
                    rows_written_this_run=self.rows_written, internal_errors=self.internal_errors,
                    llm=self.llm.as_dict())


def run_problems(stats: Mapping[str, StageStats], max_failure_rate: float, halted: str | None,
                 not_run: Sequence[str]) -> list[str]:
    """One line per stage that did not finish, naming the most common error and its fix."""
    out = []
    for name, st in stats.items():
        rate = st.failure_rate()
        common = st.llm.failures.most_common()
        why = f"most common error: {common[0]}" if common else (
            f"infrastructure fault: {st.last_transient}" if st.last_transient else "no LLM error recorded")
        if st.pending:
            out.append(f"stage {name}: {st.pending} item(s) pending ({why})")
        elif rate > max_failure_rate and (st.processed >= MIN_ITEMS_FOR_RATE or rate >= 1.0):
            out.append(f"stage {name}: {rate:.0%} of items failed, above llm.max_failure_rate="
                       f"{max_failure_rate:g} ({why})")
        elif st.stopped_early:
            out.append(f"stage {name}: stopped early ({why})")
        elif st.llm.pending:  # a global stage (or a setup call) whose LLM answers failed: redone next run
            out.append(f"stage {name}: {st.llm.pending} LLM request(s) failed outside items; the stage is "
                       f"redone on the next run ({why})")
    if halted and not_run:
        out.append(f"stages not run because {halted} stopped: {', '.join(not_run)}")
    return out


def run_warnings(stats: Mapping[str, StageStats], manifest: Mapping[str, Any], run_dir: Path) -> list[str]:
    """A loud line per stage that rejected every item it processed in this run."""
    out = []
    for name, st in stats.items():
        if st.processed and not st.ok_rows:
            reasons = (manifest.get("stages", {}).get(name, {}) or {}).get("rejected") or {}
            top = max(reasons, key=lambda r: reasons[r]) if reasons else "unknown"
            out.append(f"stage {name}: all {st.processed} item(s) processed in this run were rejected "
                       f"(most common reason: {top}); see `fabrika status {run_dir}`")
    return out
