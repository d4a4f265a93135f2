"""Fail closed: which isolation LLM-written code gets, decided before the first LLM call.

With a real model (any backend but ``sim``) verifier code runs only under bubblewrap,
unless the pipeline explicitly accepts weaker isolation with ``sandbox.isolation:
rlimits``. ``auto`` falls back to rlimits only for the offline ``sim`` backend (the
demo), and says so in the log, the progress header, the manifest, ``fabrika status``,
the report and the dataset card.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fabrika.sandbox.config import SandboxConfig, default_workers
from fabrika.sandbox.isolation import bwrap_probe

#: The one line `fabrika run` / `fabrika validate` print (exit 2) when bwrap cannot run.
FAIL_CLOSED_MESSAGE = ("install bubblewrap (apt-get install bubblewrap) or set sandbox.isolation: rlimits "
                       "to accept weaker isolation")

OFFLINE_BACKENDS = frozenset({"sim"})


class SandboxSettings(BaseModel):
    """The pipeline's ``sandbox:`` block: one sandbox policy for every stage and the IF reward."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    isolation: Literal["auto", "bwrap", "rlimits"] = Field(
        default="auto",
        description="'auto': bubblewrap; with the offline 'sim' backend only, fall back to rlimits when it cannot "
        "run. 'bwrap': bubblewrap or stop. 'rlimits': accept weaker isolation (no namespaces: the host's "
        "filesystem view and loopback network stay reachable; see docs/ARCHITECTURE.md).",
    )
    timeout_s: float = Field(default=1.0, gt=0, le=60, description="Wall-clock budget per verifier call (and per module body).")
    workers: int | None = Field(default=None, ge=1, description="Sandbox worker processes (None: CPU count).")
    memory_mb: int = Field(default=512, ge=64, le=65536, description="Address-space limit of a verifier process, in MiB.")

    def pool_config(self, backend: str, **overrides: object) -> SandboxConfig:
        """The :class:`SandboxConfig` for ``backend``: ``auto`` means ``bwrap`` with a real model."""
        isolation = self.isolation
        if isolation == "auto" and backend not in OFFLINE_BACKENDS:
            isolation = "bwrap"
        values: dict[str, Any] = {"isolation": isolation, "timeout_s": self.timeout_s, "memory_mb": self.memory_mb,
                                     "workers": self.workers or default_workers()}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return SandboxConfig.model_validate(values)


def isolation_problem(settings: SandboxSettings, backend: str) -> str | None:
    """:data:`FAIL_CLOSED_MESSAGE` when LLM-written code would have to run without bubblewrap
    although nobody accepted that; None when the run may start."""
    requested = settings.pool_config(backend).isolation
    if requested == "rlimits" or (requested == "auto" and backend in OFFLINE_BACKENDS):
        return None
    return None if bwrap_probe() is None else FAIL_CLOSED_MESSAGE


def expected_isolation(settings: SandboxSettings, backend: str) -> str:
    """What the pool will run as ("bwrap" | "rlimits"), for headers and manifests before it starts."""
    requested = settings.pool_config(backend).isolation
    if requested == "rlimits":
        return "rlimits"
    return "bwrap" if bwrap_probe() is None else "rlimits"


WEAK_NOTE = "WEAKER ISOLATION: rlimits only — the host's filesystem view and loopback network stay reachable"


def header_line(settings: SandboxSettings, backend: str) -> str:
    """The progress header's sandbox line (rich markup)."""
    mode = expected_isolation(settings, backend)
    if mode == "bwrap":
        return "sandbox: [green]bwrap[/] (a fresh namespaced process per verifier)"
    return f"sandbox: [bold red]rlimits[/] — {WEAK_NOTE}"
