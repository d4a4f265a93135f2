"""Where a stage's items are processed: in this process, or on the worker actors of a Ray cluster.

The runner owns ordering, resume and the manifest; an executor only decides where
``process`` runs. :class:`LocalExecutor` leaves every stage to the runner's own
in-process loop. Other executors are named in :data:`EXECUTORS` and loaded by module
string: ``executor: ray`` is :class:`fabrika.ray.executor.RayExecutor`, which takes the
per-item stages that never call the LLM (``Stage.calls_llm = False``, e.g.
``if.consistency``, which runs the sandbox) and runs them as batches of input rows,
keyed by id, on worker actors (:mod:`fabrika.ray.items`); each worker writes its batch's rows as one shard,
atomically, into the run directory. Global stages and every stage that calls the LLM
stay in the driver, next to the engine (cache, retries, accounting).

:func:`process_item` is the one definition of "run ``process`` on one item" both use:
the rows get ``input_id``/``status``/``llm_backend``, an empty answer becomes
``no_output``, an exception becomes ``internal_error`` and an outage leaves the item pending.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from fabrika.pipeline.llm_wrap import ITEM_LAST_ANSWER, ITEM_STATE, ItemState
from fabrika.pipeline.stage import Row, Stage, is_rejection, rejected

if TYPE_CHECKING:
    from fabrika.pipeline.config import PipelineConfig
    from fabrika.pipeline.outcome import StageStats


def finish_rows(out: Any, item_id: str | None, backend_name: str, backends: set[str] | None = None) -> list[Row]:
    """Fill the runner's columns of ``process``/``run_all`` output (see :mod:`fabrika.pipeline.stage`)."""
    if not isinstance(out, list) or not all(isinstance(r, dict) and r.get("id") for r in out):
        raise TypeError(f"process() must return a list of row dicts with an 'id', got {type(out).__name__}")
    # labelled by the backends whose answers the item used (a cached answer keeps its origin)
    label = "+".join(sorted(backends)) if backends else backend_name
    rows = []
    for r in out:
        row = dict(r)
        row.setdefault("status", "ok")
        row.setdefault("reason", None)
        row["input_id"] = item_id if item_id is not None else row.get("input_id")
        row.setdefault("llm_backend", label)
        rows.append(row)
    return rows


def new_items(stage: Stage, rows: Iterator[Row], done: Any, stats: "StageStats",
              on_skip: Callable[[], None]) -> Iterator[tuple[str, Row]]:
    """``(item_id, row)`` for each input item not yet written, up to the stage's ``max_items``.

    Counts ``seen`` and ``skipped`` in ``stats`` and adds each yielded id to ``done``, so
    a resumed stage never processes an id twice (contract 1); ``on_skip`` is called for
    each already written item (the progress line).
    """
    max_items = stage.config.max_items
    while max_items is None or stats.seen < max_items:
        row = next(rows, None)
        if row is None:
            return
        stats.seen += 1
        item_id = stage.item_id(row)
        if item_id in done:
            stats.skipped += 1
            on_skip()
            continue
        done.add(item_id)
        yield item_id, row


@dataclass
class ItemResult:
    """One processed item: its rows (``None`` = pending, nothing to write) and what happened."""

    item_id: str
    rows: list[Row] | None
    state: ItemState
    internal_error: bool = False


async def process_item(stage: Stage, row: Row, item_id: str, backend_name: str) -> ItemResult:
    """Run ``stage.process`` on one item; never raises except on cancellation."""
    state = ItemState()
    ITEM_STATE.set(state)
    answer: list[Any] = [None, 0, 0]  # excerpt, calls started, start number of the excerpt's call
    ITEM_LAST_ANSWER.set(answer)
    internal = False
    try:
        out = finish_rows(await stage.process(row), item_id, backend_name, state.backends)
        if not out:
            out = finish_rows([rejected(item_id, "no_output: process returned no rows")], item_id, backend_name)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded as data, counted loudly
        if state.pending is not None:  # a failure caused by the outage itself: still pending
            return ItemResult(item_id, None, state)
        internal = True
        msg = str(exc).replace("\n", " ")[:500]
        out = finish_rows([rejected(item_id, f"internal_error: {type(exc).__name__}: {msg}")], item_id, backend_name)
    if answer[0] is not None:  # the reason next to the raw answer that caused it (the report's sample browser)
        for r in out:
            if r["status"] != "ok" and is_rejection(r.get("reason")) and not r.get("raw_excerpt"):
                r["raw_excerpt"] = answer[0]
    return ItemResult(item_id, None if state.pending is not None else out, state, internal)


class Executor(Protocol):
    """Chooses where a per-item stage's items run."""

    name: str

    def takes(self, stage: Stage) -> bool:
        """True when this executor runs the stage's items (the runner then calls :meth:`run_items`)."""
        ...

    async def run_items(self, run: Any, stage: Stage, stats: "StageStats") -> None:
        """Process every not-yet-written item of ``stage`` (the runner's ``_Run`` gives the store,
        resume flag, progress and config); ``stage.setup`` has not been called in the driver."""
        ...


class LocalExecutor:
    """Everything in this process: the runner's own concurrent loop (``executor: local``)."""

    name = "local"

    def takes(self, stage: Stage) -> bool:
        return False

    async def run_items(self, run: Any, stage: Stage, stats: "StageStats") -> None:  # pragma: no cover
        raise NotImplementedError("the local executor leaves items to the runner")


#: Executors other than ``local``, by the name ``executor:`` gives, as ``"module:Class"``. Loaded by
#: string like stage kinds, so the pipeline never imports an optional extra (or a layer above it).
#: The class is built with the :class:`~fabrika.pipeline.config.PipelineConfig`; it may define
#: ``build_engine(config, run_dir)`` returning the run's LLM engine, or None to use the usual one.
EXECUTORS: dict[str, str] = {
    "ray": "fabrika.ray.executor:RayExecutor",
}


def executor_class(name: str) -> Any:
    """The class :data:`EXECUTORS` names for ``executor: <name>``."""
    import importlib

    try:
        module, _, attr = EXECUTORS[name].partition(":")
    except KeyError:
        raise ValueError(f"executor {name!r} is not one of local, {', '.join(sorted(EXECUTORS))}") from None
    return getattr(importlib.import_module(module), attr)


def executor_for(config: "PipelineConfig") -> Executor:
    """The executor ``config.executor`` names."""
    if config.executor == "local":
        return LocalExecutor()
    executor: Executor = executor_class(config.executor)(config)
    return executor


__all__ = ["EXECUTORS", "Executor", "ItemResult", "LocalExecutor", "executor_class", "executor_for", "finish_rows",
           "process_item"]
