"""The estimate's wall time: the stages' predicted seconds laid out by the runner's own scheduling rules.

The pilot runs one stage at a time, so each stage's seconds are its own (:mod:`fabrika.pipeline.estimate_time`).
The real run does not add them up: the runner (:meth:`fabrika.pipeline.runner.PipelineRun._schedule`)
starts a stage once the stages it depends on have finished, at most ``max_parallel_stages`` at once
(a semaphore taken in the order stages become ready), so independent branches overlap; with
``overlap: true`` a stage that :func:`fabrika.pipeline.overlap.streaming_inputs` allows starts when its
upstream starts and finishes no earlier than it. :func:`simulate` replays those rules over the stages'
predicted seconds as a small discrete-event simulation with processor sharing, since overlapping stages
compete for the same CPUs:

* ``driver`` stages do their work in this one Python process (on the ``sim`` backend every stage is
  CPU-bound; on an endpoint the LLM-free ones): together they get one core, shared equally;
* ``workers`` stages run LLM-written code in sandbox worker processes (``uses_sandbox``): each gets up to
  one core of its own while cores are free, beside the driver;
* ``wait`` stages wait on a real endpoint (latency-bound): they use no core and never slow another stage.

With ``cores`` = 1, or ``max_parallel_stages`` = 1, the wall time is the sum of the stages; with
independent branches of ``wait`` stages it is their longest path. What it does not model: a stage's
in-process time spent waiting on its sandbox workers (so it counts a ``workers`` stage as off the driver
entirely), and the load other programs put on the box.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Pools a stage's work runs in (see the module docstring).
POOLS = ("driver", "workers", "wait")
#: Seconds below which a measured wall time is noise (start-up, the box's load): a time point counts as
#: right when it is within max(25%, this) of the real wall time.
TIME_RESOLUTION_S = 1.0


@dataclass
class Job:
    """One stage as the scheduler sees it: its predicted seconds alone, what it waits for, where it runs."""

    name: str
    seconds: float
    deps: frozenset[str] = frozenset()
    #: the upstream it streams from (``overlap: true``): starts when that one starts, ends no earlier
    stream_from: str | None = None
    pool: str = "driver"

    def __post_init__(self) -> None:
        if self.pool not in POOLS:
            raise ValueError(f"pool {self.pool!r} is not one of {POOLS}")


@dataclass
class Schedule:
    """When each stage started and ended in the simulated run, and the run's wall time."""

    wall: float
    start: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)


def _rates(running: list[Job], left: dict[str, float], cores: int) -> dict[str, float]:
    """Each running stage's progress per second (its share of the cores)."""
    busy = [j for j in running if left[j.name] > 1e-12]
    driver = [j for j in busy if j.pool == "driver"]
    workers = [j for j in busy if j.pool == "workers"]
    rates = {j.name: 1.0 for j in busy if j.pool == "wait"}
    groups = len(workers) + (1 if driver else 0)
    share = min(1.0, cores / groups) if groups else 0.0  # a group (the driver, one sandbox stage) gets <= 1 core
    for j in driver:
        rates[j.name] = share / len(driver)
    for j in workers:
        rates[j.name] = share
    return rates


def simulate(jobs: list[Job], max_parallel_stages: int, cores: int) -> Schedule:
    """The run's wall time when ``jobs`` (in config order) are scheduled as the runner does.

    A stage is ready when every dependency has finished (its streaming upstream: has started); ready
    stages take one of ``max_parallel_stages`` slots in the order they became ready (config order on a
    tie) and hold it until they end; running stages share ``cores`` as :func:`_rates` says."""
    if max_parallel_stages < 1 or cores < 1:
        raise ValueError("max_parallel_stages and cores must be at least 1")
    by_name = {j.name: j for j in jobs}
    for j in jobs:
        unknown = (set(j.deps) | ({j.stream_from} if j.stream_from else set())) - set(by_name)
        if unknown:
            raise ValueError(f"{j.name} depends on unknown stages {sorted(unknown)}")
    order = {j.name: i for i, j in enumerate(jobs)}
    left = {j.name: max(0.0, j.seconds) for j in jobs}
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    ready_at: dict[str, float] = {}
    running: list[Job] = []
    now = 0.0

    def deps_met(j: Job) -> bool:
        return all((d in start) if d == j.stream_from else (d in end) for d in j.deps | (
            {j.stream_from} if j.stream_from else set()))

    while len(end) < len(jobs):
        admitted = True
        while admitted:  # a stage started now may make a streaming stage ready now
            for j in jobs:
                if j.name not in ready_at and deps_met(j):
                    ready_at[j.name] = now
            waiting = sorted((n for n in ready_at if n not in start), key=lambda n: (ready_at[n], order[n]))
            admitted = bool(waiting[: max(0, max_parallel_stages - len(running))])
            for n in waiting[: max(0, max_parallel_stages - len(running))]:
                start[n] = now
                running.append(by_name[n])
        # a stage whose work is done ends now, unless it streams from an upstream still running
        done = [j for j in running if left[j.name] <= 1e-12 and (j.stream_from is None or j.stream_from in end)]
        if done:
            for j in done:
                end[j.name] = now
                running.remove(j)
            continue
        if not running:
            raise ValueError(f"stages that can never start (a dependency cycle?): {sorted(set(by_name) - set(start))}")
        rates = _rates(running, left, cores)
        steps = [left[n] / r for n, r in rates.items() if r > 0]
        if not steps:  # only streaming stages waiting for their upstream: cannot happen while it runs
            raise ValueError("no running stage makes progress")
        dt = min(steps)
        for n, r in rates.items():
            left[n] = max(0.0, left[n] - r * dt)
        now += dt
    return Schedule(wall=now, start=start, end=end)


def within(point: float, real: float, share: float = 0.25, floor: float = TIME_RESOLUTION_S) -> bool:
    """Whether a time point is right: within max(``share`` of the real figure, ``floor`` seconds) of it."""
    return abs(point - real) <= max(share * real, floor)
