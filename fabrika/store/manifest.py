"""The run manifest: what ran, with which config and versions, and what came out.

Written atomically after every stage, so ``fabrika status`` can read a live or
crashed run. Fields: ``config`` and ``config_hash``, ``packages`` (versions),
``backend``, ``layout`` (stage kind/inputs/annotates), ``order``, ``stages``
(counts in/out/rejected by reason, timings, LLM counters, stage reports),
``accounting`` (the engine's snapshot), ``sandbox_isolation`` when a stage
reports it, ``versions`` (materialised datasets) and timestamps.

Secrets never reach it: :func:`redact` replaces the value of every
``*_key`` / ``*token*`` / ``*secret*`` / ``*password*`` field (``api_key``,
``hf_token``…) and the password of URLs (``https://user:pw@host``) with
``***`` before the config is recorded.
"""

from __future__ import annotations

import platform
import time
from importlib import metadata
from typing import Any, Sequence

from fabrika.gates import GATE_GROUPS
from fabrika.llm.redact import redact

PACKAGES = ("fabrika", "polars", "pyarrow", "pydantic", "datasets", "openai", "transformers", "trl", "torch")

def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def base_manifest(config: Any, config_hash: str, backend: str, ordered: Sequence[Any],
                  layout: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A fresh manifest for ``config`` (a ``PipelineConfig``) before any stage ran.

    ``layout`` is :func:`fabrika.pipeline.config.stage_layout` of it: the store records the
    stage graph but does not read it (the pipeline sits above the store).
    """
    return {
        "name": config.name,
        "config": redact(config.model_dump(mode="json")),
        "config_file": config.source,
        "config_hash": config_hash,
        "packages": package_versions(),
        "backend": backend,
        "layout": layout,
        # what materialisation checks is loaded before it applies gates (store.versions.check_gate_groups)
        "gate_groups": sorted(GATE_GROUPS),
        "order": [s.stage_name for s in ordered],
        "stages": {},
        "versions": {},
        "started_at": now(),
    }


def effective_status(manifest: dict[str, Any]) -> str:
    """The manifest's status, or ``killed`` when it says running but its process is gone (kill -9, OOM)."""
    import os
    import socket

    status = str(manifest.get("status", "unknown"))
    last = (manifest.get("invocations") or [{}])[-1]
    if status != "running" or last.get("host") != socket.gethostname() or not last.get("pid"):
        return status
    try:
        os.kill(int(last["pid"]), 0)
    except ProcessLookupError:
        return "killed"
    except PermissionError:
        return status
    return status
