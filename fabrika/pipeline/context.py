"""What a stage may touch while it runs: the :class:`StageContext` protocol and the runner's
:class:`RunContext`, which gets everything it hands out from the runner explicitly."""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, Sequence

import polars as pl

from fabrika.gates import gate_lazy
from fabrika.pipeline.cpu_map import CpuMapper, cpu_function, map_in_process
from fabrika.schemas.ids import derive_seed

if TYPE_CHECKING:
    from fabrika.llm.base import LLMClient
    from fabrika.store.run import RunStore


class StageContext(Protocol):
    """The runner's view handed to each stage.

    Attributes:
        llm: the engine (cache, retries, accounting already applied).
        seed: the pipeline's global seed.
        run_dir: the run directory.
        pipeline: the validated pipeline config (``fabrika.pipeline.config.PipelineConfig``).
        backend_name: name of the LLM backend (``"sim"``, ``"openai"``, ``"vllm"``).
    """

    llm: "LLMClient"
    seed: int
    run_dir: Path
    pipeline: Any
    backend_name: str

    def iter_rows(self, stage_name: str, *, gated: bool = True, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
        """Stream rows written by ``stage_name`` (``gated``: only ``ok`` rows that pass the configured gates)."""
        ...

    def rng(self, *parts: Any) -> random.Random:
        """A deterministic RNG for one item: seeded by the pipeline seed, the stage name and ``parts``."""
        ...

    def resource(self, name: str, factory: Callable[[], Any]) -> Any:
        """A run-wide shared object (sandbox pool, embedder), created once by ``factory``.

        The runner closes it (``aclose()`` or ``close()``) after the last stage; stages must not.
        """
        ...

    def stage_dir(self, stage_name: str) -> Path:
        """Directory of a stage's shards (for stages that keep side files, e.g. a topic model)."""
        ...

    def report(self, key: str, value: Any) -> None:
        """Record a fact in the manifest (e.g. ``report("sandbox_isolation", "bwrap")``)."""
        ...

    async def map_cpu(self, fn: Callable[[Any], Any], items: Sequence[Any], *, label: str | None = None) -> list[Any]:
        """``[fn(x) for x in items]``, in input order, where the executor puts CPU work: in this process
        locally, in chunks on the worker actors under ``executor: ray``. ``fn`` must be pure and importable
        by name (a top-level function, or a ``functools.partial`` of one with picklable arguments); the
        stage's report gets ``cpu_map.<label>`` (where it ran, items, chunks, worker processes)."""
        ...


def item_rng(global_seed: int, stage_name: str, *parts: Any) -> random.Random:
    """The RNG every context's :meth:`StageContext.rng` returns."""
    return random.Random(derive_seed(global_seed, stage_name, *parts))


class SharedContextParts:
    """What every :class:`StageContext` implementation does alike (the runner's, a Ray worker's,
    the test harness's): the per-item RNG, run-wide resources, side-file directories and
    manifest facts. Subclasses set ``stage_name``, ``seed``, ``run_dir``, ``resources`` and
    ``reported``."""

    stage_name: str
    seed: int
    run_dir: Path
    resources: dict[str, Any]
    reported: dict[str, Any]
    #: set by an executor that runs ``map_cpu`` elsewhere (``executor: ray``); None: in this process
    cpu_mapper: CpuMapper | None = None

    def rng(self, *parts: Any) -> random.Random:
        return item_rng(self.seed, self.stage_name, *parts)

    def resource(self, name: str, factory: Callable[[], Any]) -> Any:
        if name not in self.resources:
            self.resources[name] = factory()
        return self.resources[name]

    def stage_dir(self, stage_name: str) -> Path:
        path = self.run_dir / "stages" / stage_name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def report(self, key: str, value: Any) -> None:
        self.reported[key] = value

    async def map_cpu(self, fn: Callable[[Any], Any], items: Sequence[Any], *, label: str | None = None) -> list[Any]:
        func = cpu_function(fn)  # checked in every executor: what works locally also works on a cluster
        name = label or func.qualname
        if self.cpu_mapper is not None:
            return await self.cpu_mapper(func, items, name)
        return await map_in_process(func, items, name, self.report_map)

    def report_map(self, label: str, facts: dict[str, Any]) -> None:
        """Where one ``map_cpu`` ran, for the manifest: ``cpu_map.<label>``."""
        self.reported.setdefault("cpu_map", {})[label] = facts


class RunContext(SharedContextParts):
    """The :class:`StageContext` the runner hands to one stage.

    Args:
        stage_name: the stage it serves (its RNG and its LLM counters are keyed by it).
        store: the run's store (tables are read from it).
        pipeline: the validated pipeline config (``seed``, ``filters`` and ``resolve_path`` come from it).
        llm: the stage's view of the run's engine (:class:`~fabrika.pipeline.llm_wrap.StageLLM`), or ``None``.
        backend_name: the backend rows are labelled with.
        report: where :meth:`report` puts the stage's facts for the manifest (``StageStats.report``).
        resources: the run-wide shared objects (:meth:`resource`); the runner closes them.
        annotators: per table, the annotating stages whose scores are final for this stage
            (those that run before it); they are joined when the table is read.
    """

    def __init__(self, stage_name: str, *, store: "RunStore", pipeline: Any, llm: Any, backend_name: str,
                 report: dict[str, Any], resources: dict[str, Any],
                 annotators: Mapping[str, Sequence[str]]) -> None:
        self.stage_name = stage_name
        self.store = store
        self.reported = report
        self.resources = resources
        self.annotators = annotators
        self.llm = llm
        self.seed = pipeline.seed
        self.filters = pipeline.filters
        self.run_dir = store.run_dir
        self.pipeline = pipeline
        self.backend_name = backend_name

    def where(self, gated: bool) -> Callable[[pl.LazyFrame], pl.LazyFrame] | None:
        """The read filter: the configured gates (``gated``) or nothing."""
        filters = self.filters
        return (lambda lf: gate_lazy(lf, filters)) if gated else None

    def iter_rows(self, stage_name: str, *, gated: bool = True, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
        """Rows of an upstream stage with the annotations that ran before this stage joined,
        streamed a bounded group of shards at a time (:meth:`RunStore.iter_frames`)."""
        frames = self.store.iter_frames(stage_name, self.annotators.get(stage_name, ()),
                                        where=self.where(gated), columns=columns)
        for frame in frames:
            yield from frame.iter_rows(named=True)

    def count_rows(self, stage_name: str, gated: bool = True) -> int:
        """How many rows :meth:`iter_rows` would yield (narrow columns only; for progress totals)."""
        return self.store.count_rows(stage_name, self.annotators.get(stage_name, ()), self.where(gated))


