"""Running fabrika on a Ray cluster (``executor: ray``); see docs/RAY.md.

Nothing here imports ``ray`` at module level: the package is the optional extra
``fabrika[ray]``, imported by :func:`import_ray` only when a run uses it.
"""

from __future__ import annotations

from typing import Any

from fabrika.errors import ConfigError
from fabrika.pipeline.sections import RAY_MISSING, RaySettings


def import_ray() -> Any:
    """``import ray`` or a :class:`ConfigError` naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(RAY_MISSING) from exc
    return ray


def connect(settings: RaySettings) -> Any:
    """Join (or start) the cluster once per process; returns the ``ray`` module."""
    ray = import_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if settings.address is not None:
            kwargs["address"] = settings.address
        ray.init(**kwargs)
    return ray


__all__ = ["connect", "import_ray"]
