"""``ctx.map_cpu``: a pure per-row function mapped over a sequence, in chunks, wherever the executor says.

A global stage needs every row at once (LSH, clustering), but much of its CPU is a per-row function
(a text's MinHash signature). It hands that part to :meth:`StageContext.map_cpu`; the results come
back in input order. With ``executor: local`` the map runs here, in this process, as a plain loop;
under ``executor: ray`` the executor gives the context a mapper that sends chunks to the run's worker
actors (:mod:`fabrika.ray.cpu_map`). The function therefore travels **by name**: it must be defined at
the top level of an importable module (optionally wrapped in :func:`functools.partial` with picklable
arguments), checked here in both executors so a stage that works locally also works on a cluster.
"""

from __future__ import annotations

import functools
import importlib
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence

from fabrika.errors import FabrikaError

#: Rows between progress updates of a local map.
LOCAL_CHUNK = 2048


class NotImportableError(FabrikaError, TypeError):
    """The function given to ``map_cpu`` cannot be imported by name (a lambda, a nested function, ``__main__``)."""


@dataclass(frozen=True)
class CpuFunction:
    """A per-row function by reference: ``module``'s ``qualname``, called as ``fn(item, *args, **kwargs)``."""

    module: str
    qualname: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.module}:{self.qualname}"

    def load(self) -> Callable[..., Any]:
        """The function itself, imported by name (raises :class:`NotImportableError` naming it)."""
        try:
            obj: Any = importlib.import_module(self.module)
            for part in self.qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise NotImportableError(f"map_cpu: {self.name} cannot be imported here ({exc}); define it at the top "
                                     "level of a module every worker can import (fabrika or a plugins: module)") from None
        if self.args or self.kwargs:
            return functools.partial(obj, *self.args, **self.kwargs)
        return obj


def cpu_function(fn: Callable[..., Any]) -> CpuFunction:
    """``fn`` (a top-level function, or a :func:`functools.partial` of one) as a :class:`CpuFunction`."""
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}
    while isinstance(fn, functools.partial):
        args, kwargs = tuple(fn.args) + args, {**fn.keywords, **kwargs}
        fn = fn.func
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        raise NotImportableError(f"map_cpu: {qualname or fn!r} (module {module}) is not importable by name; "
                                 "define it at the top level of an importable module (no lambda, nested function "
                                 "or __main__), binding parameters with functools.partial")
    return CpuFunction(module, qualname, args, kwargs)


class CpuMapper(Protocol):
    """What an executor sets as a context's ``cpu_mapper``: runs ``func`` over ``items``, results in order."""

    def __call__(self, func: CpuFunction, items: Sequence[Any], label: str) -> Awaitable[list[Any]]: ...


async def map_in_process(func: CpuFunction, items: Sequence[Any], label: str,
                         report: Callable[[str, Any], None]) -> list[Any]:
    """The local map: a plain loop in this process (progress every :data:`LOCAL_CHUNK` rows)."""
    from fabrika.pipeline.progress import phase

    fn = func.load()
    started = time.monotonic()
    out: list[Any] = []
    for start in range(0, len(items), LOCAL_CHUNK):
        phase(label, start, len(items))
        out.extend(fn(x) for x in items[start:start + LOCAL_CHUNK])
    report(label, {"on": "driver", "items": len(items), "seconds": round(time.monotonic() - started, 3)})
    return out


__all__ = ["CpuFunction", "CpuMapper", "LOCAL_CHUNK", "NotImportableError", "cpu_function", "map_in_process"]
