"""Running LLM-written verifier code: isolated worker pool, limits, timeouts, verdicts.

Public API (stable; other packages code against exactly this)::

    from fabrika.sandbox import SandboxPool, SandboxConfig, Verdict, precheck

    with SandboxPool(SandboxConfig(timeout_s=1.0)) as pool:      # or: async with
        verdicts = pool.run_sync(code, responses)                 # or: await pool.run(...)
    pool.isolation        # "bwrap" | "rlimits" -> manifest field sandbox.isolation
    verdict.status        # "true" | "false" | "error" | "timeout"
    verdict.error_kind    # "precheck" | "syntax" | "no_function" | "exception" | "non_bool"
                          # | "memory" | "crash" | "protocol"  (None unless status == "error")
    verdict.value         # True / False / None;  verdict.passed -> bool
    precheck(code)        # list of problems; [] means the static check passes

The code must define ``evaluate(response) -> bool``; only a real ``bool`` counts.
Bad code never raises in the caller: it becomes an error verdict.
"""

from __future__ import annotations

from fabrika.sandbox.config import ERROR_KINDS, SandboxConfig, Verdict
from fabrika.sandbox.pool import SandboxPool
from fabrika.sandbox.precheck import ALLOWED_MODULES, precheck

__all__ = ["ALLOWED_MODULES", "ERROR_KINDS", "SandboxConfig", "SandboxPool", "Verdict", "precheck"]
