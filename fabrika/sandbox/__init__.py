"""Running LLM-written verifier code: isolated worker pool, limits, timeouts, verdicts.

Public API (stable; other packages code against exactly this)::

    from fabrika.sandbox import SandboxPool, SandboxConfig, SandboxSettings, Verdict, precheck

    with SandboxPool(SandboxConfig(timeout_s=1.0)) as pool:      # or: async with
        verdicts = pool.run_sync(code, responses)                 # or: await pool.run(...)
        verdicts = pool.run_probed_sync(code, responses)          # or: await pool.run_probed(...):
                  # the first response's fatal verdict (timeout, no_function, memory, crash…) answers all
    pool.isolation        # "bwrap" | "rlimits" -> manifest field sandbox.isolation
    verdict.status        # "true" | "false" | "error" | "timeout"  (timeout: CPU time, not wall time)
    verdict.error_kind    # "precheck" | "syntax" | "no_function" | "exception" | "non_bool"
                          # | "memory" | "crash" | "protocol"  (None unless status == "error")
    # no verdict for reasons of the host (worker death, framing, starved past the wall ceiling),
    # on fresh workers too: run/run_sync raise fabrika.errors.SandboxInfrastructureError (pending)
    verdict.value         # True / False / None;  verdict.passed -> bool
    precheck(code)        # list of problems; [] means the lint passes (it is not a boundary)
    SandboxSettings(...).pool_config(backend)   # the pipeline's `sandbox:` block -> SandboxConfig
    isolation_problem(settings, backend)        # FAIL_CLOSED_MESSAGE when bwrap is needed but cannot run

The code must define ``evaluate(response) -> bool``; only a real ``bool`` counts.
Bad code never raises in the caller: it becomes an error verdict. Concurrent calls of one
verifier may share a batch, each with a module state of its own. Every batch runs
in a fresh process forked from a preloaded zygote, under bwrap in a mount and IPC
namespace of its own with a fresh inode-capped tmpfs ``/tmp``: no verifier sees
another's state, files, IPC objects or inputs.
"""

from __future__ import annotations

from fabrika.sandbox.config import ERROR_KINDS, SandboxConfig, Verdict
from fabrika.sandbox.policy import FAIL_CLOSED_MESSAGE, SandboxSettings, isolation_problem
from fabrika.sandbox.pool import SandboxPool
from fabrika.sandbox.precheck import ALLOWED_MODULES, precheck

__all__ = ["ALLOWED_MODULES", "ERROR_KINDS", "FAIL_CLOSED_MESSAGE", "SandboxConfig", "SandboxPool", "SandboxSettings",
           "Verdict", "isolation_problem", "precheck"]
