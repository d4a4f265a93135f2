"""LLM workers as Ray actors (``executor: ray`` with ``llm_workers: N``).

The driver side is the same as for local subprocesses (:mod:`fabrika.pipeline.llm_workers`); only
where :func:`fabrika.pipeline.llm_worker.run_partition` runs changes: one fresh actor per partition
and attempt, reserving no CPU (an LLM worker waits on the network; Ray's CPUs stay with the item
workers of CPU stages, so the two never wait for each other). Every actor builds its own engine
client against the shared fleet; the run directory (shards, journals, the sqlite cache) is a path
every node must see, as for the item workers. An actor that dies (``kill -9``, OOM, a lost node:
``RayActorError``) is a dead worker: the driver recovers its journal and retries its partition.
Actors are owned by the driver and die with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from fabrika.pipeline.llm_worker import WorkerJob, WorkerOutcome, run_partition
from fabrika.pipeline.llm_workers import Died

if TYPE_CHECKING:
    from fabrika.pipeline.sections import RaySettings


class LLMWorkerActor:
    """One partition of one LLM stage, in a Ray actor process."""

    async def run(self, job: WorkerJob) -> WorkerOutcome:
        import os

        outcome = await run_partition(job)
        outcome.pid = os.getpid()
        return outcome

    def pid(self) -> int:
        import os

        return os.getpid()


class RayLLMLauncher:
    """Runs each :class:`WorkerJob` in a fresh :class:`LLMWorkerActor` (see module docs)."""

    name = "ray actors"

    def __init__(self, ray: Any, settings: "RaySettings") -> None:
        self.ray = ray
        self.settings = settings
        #: pids of the actors running now, by partition (tests kill one)
        self.running: dict[int, Any] = {}

    async def run(self, job: WorkerJob, on_live: Callable[[dict[str, Any]], None]) -> WorkerOutcome | Died:
        ray = self.ray
        actor = ray.remote(num_cpus=0, max_restarts=0)(LLMWorkerActor).remote()
        self.running[job.partition.index] = actor
        try:
            outcome: WorkerOutcome = await actor.run.remote(job)
            return outcome
        except ray.exceptions.RayActorError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return Died(f"its Ray actor died ({first[:200]})")
        finally:
            self.running.pop(job.partition.index, None)
            ray.kill(actor, no_restart=True)


__all__ = ["LLMWorkerActor", "RayLLMLauncher"]
