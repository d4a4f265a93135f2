"""The sandbox of a driver-run stage on the Ray worker actors (``executor: ray``).

``if.responses`` calls the LLM, so it runs in the driver, next to the engine; but most of its CPU
goes to running every LLM-written verifier on each of its K responses. Under ``executor: ray`` its
sandbox pool is a :class:`RemoteSandboxPool`: the same ``run(code, responses)`` interface, each
call sent to the least busy actor of the run's worker pool (:class:`fabrika.ray.items.WorkerPool`,
the actors ``if.consistency`` runs on), which runs it in a sandbox pool of its own under its node's
fail-closed isolation check. Verdicts come back as data; the stage's rows are the same as with a
local pool. No extra CPUs are reserved: the calls share the workers with the worker-run stages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from fabrika.ray.items import WorkerPool
    from fabrika.sandbox.config import SandboxConfig, Verdict


class RemoteSandboxPool:
    """:class:`fabrika.sandbox.SandboxPool`'s ``run`` / ``isolation`` / ``stats`` / ``close`` over the worker actors."""

    def __init__(self, config: "SandboxConfig", pool: Callable[[], "WorkerPool"]) -> None:
        self.config = config
        self._pool = pool  # the run's worker pool, started on first use
        self.calls = 0
        self._isolation: str | None = None

    @property
    def isolation(self) -> str:
        """The isolation the workers' pools run under (asked once; ``bwrap`` or ``rlimits``)."""
        if self._isolation is None:
            pool = self._pool()
            self._isolation = str(pool.ray.get(pool.actors[0].sandbox_isolation.remote(self.config)))
        return self._isolation

    async def run(self, code: str, responses: Sequence[Any]) -> list["Verdict"]:
        pool = self._pool()
        w = pool.least_busy()
        pool.load[w] += 1
        try:
            self.calls += 1
            return list(await pool.actors[w].sandbox_run.remote(self.config, code, list(responses)))
        finally:
            pool.load[w] -= 1

    def stats(self) -> dict[str, int]:
        return {"remote_calls": self.calls}

    def close(self) -> None:
        """Nothing of its own: the workers' pools close with the run's worker pool."""


def remote_sandbox_factory(pool: Callable[[], "WorkerPool"],
                           report: Callable[[str, Any], None]) -> Callable[["SandboxConfig"], RemoteSandboxPool]:
    """The ``sandbox_factory`` a driver-run stage's context gets under ``executor: ray`` (``report``: the
    stage's manifest facts, told where its code runs when its pool is made)."""

    def build(config: "SandboxConfig") -> RemoteSandboxPool:
        report("sandbox_on", "ray workers")
        return RemoteSandboxPool(config, pool)

    return build


__all__ = ["RemoteSandboxPool", "remote_sandbox_factory"]
