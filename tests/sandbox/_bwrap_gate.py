"""Whether a test that needs bubblewrap runs, skips loudly, or fails (CI must not skip it)."""

from __future__ import annotations

from typing import Literal, Mapping

REQUIRE_VARS = ("CI", "FABRIKA_REQUIRE_BWRAP")
TRUTHY = frozenset({"1", "true", "yes", "on"})
SKIP_MARK = "bubblewrap cannot run here"


def bwrap_required(env: Mapping[str, str]) -> bool:
    """CI=true (set by every common CI) or FABRIKA_REQUIRE_BWRAP=1: a missing bwrap is a failure."""
    return any(env.get(name, "").strip().lower() in TRUTHY for name in REQUIRE_VARS)


def gate(env: Mapping[str, str], probe_reason: str | None) -> tuple[Literal["run", "skip", "fail"], str]:
    """``probe_reason`` is :func:`fabrika.sandbox.isolation.bwrap_probe`'s answer (None: bwrap works)."""
    if probe_reason is None:
        return "run", ""
    why = f"{SKIP_MARK} ({probe_reason}); install it: apt-get install bubblewrap"
    if bwrap_required(env):
        return "fail", f"{why} — required because {' or '.join(REQUIRE_VARS)} is set"
    return "skip", why
