"""The stage contract every generator and scorer implements.

A pipeline is a YAML document whose ``stages:`` list holds stage configs
discriminated by ``kind`` (``fc.tools``, ``if.consistency``…). Each kind is a
:class:`Stage` subclass registered with :func:`register_stage`. The runner
(``fabrika.pipeline.runner``) owns everything that is not stage logic: streaming
input rows in chunks, skipping ids already written (resume), running
``process`` for many items concurrently, writing shards atomically, progress,
accounting and the manifest.

Output rows are plain dicts (use :func:`fabrika.schemas.to_row` for records).
Columns every output row carries (the runner fills the ones marked *):

``id``
    stable id of the output item (hash of its inputs; :func:`fabrika.schemas.stable_id`).
``input_id`` *
    id of the input row it came from; resume skips inputs whose ``input_id`` is written.
``status``
    ``"ok"`` or ``"rejected"``. Rejections are data (DESIGN contract 3), never dropped.
``reason``
    why it was rejected (``"invalid_json: ..."``, ``"unknown_tool: foo"``); ``None`` when ok.
``llm_backend`` *
    the LLM backend that produced the stage (``"sim"`` data is marked as such).

Score columns are added by scorers; thresholds are never applied in a stage,
only by gates (``fabrika.gates``) when a stage's input or a dataset is
materialised.

Annotating stages (scorers, ``annotates = True``) have exactly one ``input``
and emit, per scored row, a row whose ``id`` IS the scored row's id, plus score
columns (and ``status``/``reason`` of the scoring itself). They never copy the
data. Whenever a table is read (``ctx.iter_rows``, materialisation), every
annotating stage whose input is that table is LEFT-JOINED on ``id``, lazily:
scores live in their own tables and data rows are never rewritten. After the
join the scorer's ``status``/``reason`` are named ``status__<scorer>`` /
``reason__<scorer>``; a score column whose name is taken gets ``__<scorer>``.
A consumer of a table runs after all its annotators; an annotator sees the
scores of the annotators listed before it.

``process`` returns at least one row per item (an empty list is recorded as
``rejected("no_output")`` so resume does not redo the item forever); an exception
escaping it is recorded as ``internal_error: <type>: <msg>`` and counted loudly.
Output ids must be unique within a stage (the manifest counts duplicates).
Facts for the manifest (e.g. the sandbox isolation mode) go through ``ctx.report``.

Paths in a stage config should be typed ``Path``: the validate step checks they
exist (relative to the config file) and ``ctx.pipeline.resolve_path`` resolves them.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, AsyncIterator, ClassVar, Iterator

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from fabrika.pipeline.context import StageContext

Row = dict[str, Any]


class StageConfig(BaseModel):
    """Fields every stage config has. Subclasses add their own, documented field by field."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="Stage kind, e.g. 'fc.tools'; selects the Stage class.")
    name: str | None = Field(default=None, description="Unique stage name in the pipeline; defaults to the kind.")
    input: str | list[str] | None = Field(
        default=None,
        description="Name(s) of the upstream stage(s) whose gated 'ok' rows feed this stage; "
        "None for source stages that read seed files.",
    )
    chunk_size: int = Field(default=256, ge=1, description="Items per shard; a crash loses at most the items in flight.")
    max_items: int | None = Field(default=None, ge=0, description="Stop after this many input items (smoke runs).")
    max_in_flight: int | None = Field(
        default=None, ge=1, description="Items processed concurrently; default the pipeline's max_in_flight."
    )

    @property
    def stage_name(self) -> str:
        return self.name or self.kind


class Stage(abc.ABC):
    """One resumable step of a pipeline.

    Subclasses set ``kind`` and ``Config`` and implement :meth:`process`
    (per-item, concurrent) — or override :meth:`run_all` for stages that need the
    whole input at once (clustering, dedup), which must then still stream their output.
    """

    kind: ClassVar[str]
    Config: ClassVar[type[StageConfig]] = StageConfig
    #: True when the stage needs all inputs at once (``run_all``) instead of per-item ``process``.
    global_stage: ClassVar[bool] = False
    #: True for scorers: output rows carry the scored row's ``id`` + score columns (see module docs).
    annotates: ClassVar[bool] = False
    #: False for per-item stages whose ``process`` never calls ``ctx.llm`` (CPU work such as the sandbox):
    #: under ``executor: ray`` they run on worker actors (``fabrika.pipeline.executors``).
    calls_llm: ClassVar[bool] = True

    def __init__(self, config: StageConfig, ctx: "StageContext") -> None:
        self.config = config
        self.ctx = ctx

    @property
    def name(self) -> str:
        return self.config.stage_name

    @classmethod
    def check_config(cls, config: StageConfig, pipeline: Any) -> list[tuple[str, str]]:
        """Extra validation before any LLM call: ``(field, message)`` pairs. ``Path`` fields are checked already."""
        return []

    def input_rows(self) -> Iterator[Row]:
        """Rows this stage consumes. Default: the gated ``ok`` rows of ``config.input``.

        Source stages override it to read seed files (raise :class:`fabrika.errors.InputError`
        with the path when a file is missing or malformed).
        """
        if self.config.input is None:
            raise NotImplementedError(f"stage {self.name!r} has no input; override input_rows()")
        inputs = [self.config.input] if isinstance(self.config.input, str) else self.config.input
        for upstream in inputs:
            yield from self.ctx.iter_rows(upstream, gated=True)

    def item_id(self, row: Row) -> str:
        """Id used for resume; default the input row's ``id``."""
        return str(row["id"])

    async def setup(self) -> None:
        """Acquire resources once per run (sandbox pool, embedding model)."""

    async def teardown(self) -> None:
        """Release what :meth:`setup` acquired."""

    async def process(self, row: Row) -> list[Row]:
        """Turn one input row into output rows (possibly rejections). Must not raise on bad LLM output."""
        raise NotImplementedError

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:  # pragma: no cover - interface
        """Global stages: consume all rows, yield output rows in chunks."""
        raise NotImplementedError
        yield []


STAGES: dict[str, type[Stage]] = {}


def register_stage(cls: type[Stage]) -> type[Stage]:
    """Class decorator: make ``cls.kind`` usable in pipeline YAML."""
    kind = cls.kind
    if kind in STAGES and STAGES[kind] is not cls:
        raise ValueError(f"stage kind {kind!r} is registered twice ({STAGES[kind].__qualname__}, {cls.__qualname__})")
    STAGES[kind] = cls
    return cls


def ok(id: str, **columns: Any) -> Row:
    """An accepted output row."""
    return {"id": id, "status": "ok", "reason": None, **columns}


def rejected(id: str, reason: str, **columns: Any) -> Row:
    """A recorded rejection: kept in the store with its reason, excluded by materialisation."""
    return {"id": id, "status": "rejected", "reason": reason, **columns}


#: Reasons that pass an item over by design (a share was not drawn, the item does not apply), not a
#: verdict on quality: stored like rejections, but progress and reports do not count them as rejected.
PASSED_OVER_REASONS = frozenset({"not_sampled", "not_eligible"})
#: Longest excerpt of a raw model answer stored on a rejection row (``raw_excerpt``).
RAW_EXCERPT_CHARS = 2000


def is_rejection(reason: str | None) -> bool:
    """True unless ``reason``'s key (the part before ``:``) is in :data:`PASSED_OVER_REASONS`."""
    return (reason or "").split(":", 1)[0].strip() not in PASSED_OVER_REASONS
