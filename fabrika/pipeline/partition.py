"""Splitting an LLM-calling stage over ``llm_workers`` processes: who owns an item, and each worker's share.

An item belongs to worker ``partition_of(item_id, n)``: a stable hash of its id (blake2b, not
Python's salted ``hash``), so the split is the same in every process, on every run and on every
node, and a worker that died is replaced by one that owns exactly the same items. Items keep
their ids and their rows whatever worker makes them, so the dataset does not depend on ``n``
(DESIGN contract 7).

Each worker runs its own engine client, so the limits that protect the fleet are divided among
every engine that can be sending at once (:func:`fabrika.pipeline.config.limit_shares`): the ``n`` workers of each split
stage that may run alongside another split stage, and the driver's engine when an LLM stage it runs
(a global stage) may run alongside a split one. An endpoint's ``max_concurrency``, the engine's
``llm.max_in_flight`` and the stages' ``max_in_flight`` become ``limit // engines`` (at least 1) in
each worker (:func:`worker_config`) and, when it may overlap, in the driver (:func:`driver_config`),
so the sum over every process never passes the limit. Which stages may overlap is read from the
dependency graph (two stages overlap unless one waits, directly or not, for the other) and
``max_parallel_stages``; the division is fixed for the run (no cross-process limiter), so a stage
that runs alone in a pipeline with overlapping branches gets only its share.
Routing stays a pure function of the routing key: the affinity ring is built from the endpoints'
URLs only, which the division leaves as they are, so an episode's home server is the same from any
worker.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabrika.store.journal import partition_journal

if TYPE_CHECKING:
    from fabrika.pipeline.config import PipelineConfig
    from fabrika.pipeline.outcome import StageStats


def partition_of(item_id: str, count: int) -> int:
    """The worker (``0 .. count-1``) that owns ``item_id``: a stable hash of the id, modulo ``count``."""
    digest = hashlib.blake2b(item_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


@dataclass(frozen=True)
class Partition:
    """Worker ``index`` of ``count``: the items it owns and the journal it appends to."""

    index: int
    count: int

    def owns(self, item_id: str) -> bool:
        return partition_of(item_id, self.count) == self.index

    @property
    def journal(self) -> str:
        return partition_journal(self.index)


def share(limit: int, count: int) -> int:
    """One worker's part of ``limit`` so that ``count`` workers together never pass it (at least 1)."""
    return max(1, limit // count)


def _divided(config: "PipelineConfig", count: int) -> "PipelineConfig":
    llm = config.llm
    endpoints = [ep.model_copy(update={"max_concurrency": share(ep.max_concurrency, count)}) for ep in llm.endpoints]
    llm = llm.model_copy(update={"endpoints": endpoints, "max_in_flight": share(llm.max_in_flight, count)})
    stages = [s.model_copy(update={"max_in_flight": share(s.max_in_flight, count)}) if s.max_in_flight else s
              for s in config.stages]
    return config.model_copy(update={"llm": llm, "max_in_flight": share(config.max_in_flight, count),
                                     "stages": stages})


def worker_config(config: "PipelineConfig", count: int) -> "PipelineConfig":
    """The pipeline as one of ``count`` LLM workers sees it: every concurrency limit divided (:func:`share`)
    by the engines that may send at once (:func:`limit_shares`; ``count`` when only one split stage runs)."""
    from fabrika.pipeline.config import limit_shares

    engines = limit_shares(config)[0] if config.llm_workers == count else count
    return _divided(config, max(count, engines))


def driver_config(config: "PipelineConfig") -> "PipelineConfig":
    """The pipeline as the driver's engine sees it: undivided, unless one of its LLM stages may run next to a
    split stage (:func:`limit_shares`); then it takes one share, like each worker."""
    from fabrika.pipeline.config import limit_shares

    engines, overlaps = limit_shares(config)
    return _divided(config, engines) if overlaps else config


#: StageStats counters that add up across workers.
SUMMED = ("seen", "processed", "skipped", "cache_miss", "internal_errors", "transient", "rejected", "passed_over",
          "shards", "rows_written", "pending", "llm_failed", "ok_rows", "recovered")
LLM_SUMMED = ("requests", "cached", "errors", "prompt_tokens", "completion_tokens", "pending")


def merge_stats(into: "StageStats", part: "StageStats") -> None:
    """Add one worker's counters to the stage's (reports: the first worker's value of a key wins)."""
    for name in SUMMED:
        setattr(into, name, getattr(into, name) + getattr(part, name))
    into.stopped_early = into.stopped_early or part.stopped_early
    into.last_transient = part.last_transient or into.last_transient
    for name in LLM_SUMMED:
        setattr(into.llm, name, getattr(into.llm, name) + getattr(part.llm, name))
    for kind, n in part.llm.errors_by_kind.items():
        into.llm.errors_by_kind[kind] = into.llm.errors_by_kind.get(kind, 0) + n
    tally = into.llm.failures
    for key, n in part.llm.failures.counts.items():
        tally.counts[key] = tally.counts.get(key, 0) + n
        tally.examples.setdefault(key, part.llm.failures.examples.get(key, ""))
    for key, value in part.report.items():
        into.report.setdefault(key, value)
    into.reprocessed.extend(r for r in part.reprocessed if r not in into.reprocessed)


LIVE_FIELDS = ("seen", "processed", "skipped", "pending", "rejected", "ok_rows", "rows_written", "shards")


def live_counters(stats: "StageStats") -> dict[str, Any]:
    """What a worker reports while it runs (the driver's progress line and live manifest)."""
    out: dict[str, Any] = {k: getattr(stats, k) for k in LIVE_FIELDS}
    out["requests"] = stats.llm.requests
    out["cached"] = stats.llm.cached
    return out


__all__ = ["LIVE_FIELDS", "Partition", "driver_config", "live_counters", "merge_stats", "partition_of",
           "share", "worker_config"]
