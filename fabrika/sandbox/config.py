"""Configuration and verdict types of the sandbox (the stable public surface)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

VerdictStatus = Literal["true", "false", "error", "timeout"]

#: Error kinds a verdict can carry (``Verdict.error_kind``).
ERROR_KINDS: frozenset[str] = frozenset(
    {
        "precheck",     # the static pre-check refused the code (message lists the problems)
        "syntax",       # the code does not compile
        "no_function",  # the code defines no callable ``evaluate``
        "exception",    # evaluate (or the module body) raised; message is "Type: text"
        "non_bool",     # evaluate returned something other than True/False
        "memory",       # MemoryError under the address-space limit
        "crash",        # the verifier's own process died (signal, os._exit, rlimit) while on this response
        "protocol",     # the verifier's own process wrote something its zygote cannot parse
        # (a dead zygote or a garbled zygote->parent stream is no verdict: SandboxInfrastructureError)
    }
)


def default_workers() -> int:
    """One worker per CPU."""
    return os.cpu_count() or 1


class SandboxConfig(BaseModel):
    """How the verifier sandbox runs. Every field has a safe default for production use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workers: int = Field(
        default_factory=default_workers, ge=1,
        description="Number of long-lived worker processes; concurrent `run` calls spread over them.",
    )
    timeout_s: float = Field(
        default=1.0, gt=0, le=600,
        description="CPU-time budget per response (the module body gets one too), measured on the verifier's "
        "own CPU clock so that host load changes no verdict; on expiry the verifier's process is SIGKILLed, "
        "the response is a timeout and the remaining responses go to a fresh one.",
    )
    wall_ceiling_s: float | None = Field(
        default=None, gt=0, le=3600,
        description="Wall-clock ceiling per response (None: max(10 x timeout_s, 10 s)). A verifier asleep that "
        "long is a timeout; one the host starved of CPU that long is an infrastructure failure (retried, then "
        "the item stays pending), never a verdict.",
    )
    scratch_mb: int = Field(default=16, ge=1, le=1024,
                            description="Size of a verifier's private scratch tmpfs (/tmp under bwrap), in MiB.")
    scratch_inodes: int = Field(default=1024, ge=16, le=1_000_000,
                                description="Inode cap of that tmpfs: how many files and directories a verifier "
                                "may create (the size limit alone counts blocks, not files).")
    memory_mb: int = Field(
        default=512, ge=64,
        description="Address-space limit (RLIMIT_AS) of a worker, in MiB; allocations beyond it raise MemoryError.",
    )
    recycle_after: int = Field(
        default=100_000, ge=1,
        description="Restart a worker (zygote) after this many evaluated responses. Verifier state never "
        "survives its batch (each batch runs in a fresh child); this only bounds the zygote's own drift.",
    )
    isolation: Literal["auto", "bwrap", "rlimits"] = Field(
        default="auto",
        description="'bwrap' requires bubblewrap; 'rlimits' runs plain processes with resource limits only "
        "(weaker, warns loudly); 'auto' picks bwrap when it works here, else rlimits.",
    )
    batch_size: int = Field(
        default=256, ge=1,
        description="A `run` with more responses is split into batches of this size, run on several workers at once.",
    )
    group_calls: bool = Field(
        default=True,
        description="Calls of the same verifier code that wait for a worker together run in one isolated "
        "batch (up to batch_size responses), each call with a module state of its own (its module body run "
        "afresh), so the verdicts are those of separate calls whatever the grouping. Off with precheck=False: "
        "without the lint a verifier can reach process state that outlives its module.",
    )
    precheck: bool = Field(
        default=True,
        description="Static pre-check plus guarded builtins. TEST-ONLY switch: False proves that the "
        "runtime isolation alone contains hostile code. Never disable in a pipeline.",
    )
    max_file_mb: int = Field(default=1, ge=0,
                             description="RLIMIT_FSIZE in MiB: the largest file a verifier may write (scratch tmpfs only).")
    max_open_files: int = Field(default=64, ge=16, description="RLIMIT_NOFILE of a worker.")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one ``evaluate(response)`` call.

    ``status`` is "true"/"false" for a real bool, "timeout" when the CPU-time budget
    ran out (or the verifier slept past the wall ceiling), "error" otherwise with ``error_kind`` (see :data:`ERROR_KINDS`) and a
    ``message`` naming what happened.
    """

    status: VerdictStatus
    error_kind: str | None = None
    message: str | None = None

    @property
    def value(self) -> bool | None:
        """True/False for a clean verdict, None for error and timeout."""
        return {"true": True, "false": False}.get(self.status)

    @property
    def passed(self) -> bool:
        """True only for a clean True verdict; errors and timeouts never pass."""
        return self.status == "true"

    @classmethod
    def error(cls, kind: str, message: str) -> Verdict:
        return cls("error", kind, message)


TRUE = Verdict("true")
FALSE = Verdict("false")
