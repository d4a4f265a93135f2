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
``rejected("no_output")`` so resume does not redo the item forever). Bad data and bad
answers are verdicts: return :func:`rejected` rows. An exception escaping ``process`` is
never a row (:mod:`fabrika.pipeline.taxonomy`): an infrastructure fault
(:class:`fabrika.errors.TransientError`, a sandbox failure, a timeout, a full disk) leaves
the item pending and is retried; anything else stops the stage with one line naming the
item and the fix — raise :class:`fabrika.errors.StageConfigError` (``message, fix=...``)
when the configuration is what is wrong (exit 2), and let a bug be a bug (exit 4).
Output ids must be unique within a stage (the manifest counts duplicates).
Facts for the manifest (e.g. the sandbox isolation mode) go through ``ctx.report``.

Each stage declares the columns it reads and writes (``reads`` / ``writes``, tuples of
:class:`fabrika.pipeline.columns.Column`); ``validate`` checks them along the pipeline graph
(:func:`fabrika.pipeline.contracts.check_contracts`) and ``fabrika stages KIND`` shows them.

Paths in a stage config should be typed ``Path``: the validate step checks they
exist (relative to the config file) and ``ctx.pipeline.resolve_path`` resolves them.

A stage names its config once, as the type argument (``class ToolsStage(Stage[ToolsConfig])``),
and its kind once, as ``kind = "fc.tools"``: :func:`register_stage` makes that kind the config's
``kind`` field (``Literal["fc.tools"]``, default ``"fc.tools"``), so ``ToolsConfig()`` needs no
kind and ``self.config`` is a typed ``ToolsConfig``. Stages that call the LLM once per item
usually subclass :class:`fabrika.pipeline.llm_stage.LLMStage` instead (``requests`` / ``parse``).
See ``docs/STAGES.md``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, AsyncIterator, ClassVar, Generic, Iterable, Iterator, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from fabrika.pipeline.columns import Column, Contract
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.reasons import PASSED_OVER_REASONS, is_rejection  # noqa: F401 - re-exported (their home before)

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


ConfigT = TypeVar("ConfigT", bound=StageConfig)


class Stage(abc.ABC, Generic[ConfigT]):
    """One resumable step of a pipeline.

    Subclasses name their config as the type argument (``Stage[ToolsConfig]``), set
    ``kind`` and implement :meth:`process` (per-item, concurrent) — or override
    :meth:`run_all` for stages that need the whole input at once (clustering, dedup),
    which must then still stream their output. ``Config`` is taken from the type
    argument (set it explicitly only when it differs); a stage without one gets an
    empty config of its own.
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
    #: Config fields that are a share of the inputs the stage draws by ``ctx.rng`` (``fc.irrelevance``'s
    #: ``share``): ``fabrika estimate`` raises them in its pilot and weighs the figures back.
    pilot_draw_shares: ClassVar[tuple[str, ...]] = ()
    #: Input columns this stage reads (``fabrika.pipeline.contracts``); ``None``: undeclared, not checked.
    #: Source stages read files, not rows: ``()``.
    reads: ClassVar[tuple[Column, ...] | None] = None
    #: Columns of its output rows besides ``id``/``status``/``reason`` (for a scorer: the score columns
    #: joined onto the table it scores); ``None``: undeclared, readers of its table are not checked.
    writes: ClassVar[tuple[Column, ...] | None] = None
    #: Files its config names (``fabrika.pipeline.preflight``): opened and their head parsed at validate.
    input_files: ClassVar[tuple[InputFile, ...]] = ()

    @classmethod
    def contract(cls, config: ConfigT) -> Contract:
        """What this configured stage reads and writes; override when columns depend on the config."""
        return Contract(reads=cls.reads, writes=cls.writes)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Config" in cls.__dict__:
            return
        for base in getattr(cls, "__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Stage):
                args = get_args(base)
                if args and isinstance(args[0], type) and issubclass(args[0], StageConfig):
                    cls.Config = args[0]
                    return

    def __init__(self, config: ConfigT, ctx: "StageContext") -> None:
        self.config: ConfigT = config
        self.ctx = ctx

    @property
    def name(self) -> str:
        return self.config.stage_name

    @classmethod
    def check_config(cls, config: ConfigT, pipeline: Any) -> list[tuple[str, str]]:
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

    def pilot_stratum(self, row: Row) -> str | None:
        """The kind of input item ``row`` is, for ``fabrika estimate``'s pilot (``None``: all alike, the default).

        Override it where kinds of items fan out differently (a plan's sample type, a constraint's source and
        family): the pilot then samples each kind in proportion to its share of the input and weighs its
        figures back by kind (:func:`fabrika.pipeline.estimate.stratified_sample`). It must be pure: what it
        says of an item is what the stage will do with it, known before the stage runs."""
        return None

    async def setup(self) -> None:
        """Acquire resources once per run (sandbox pool, embedding model)."""

    async def teardown(self) -> None:
        """Release what :meth:`setup` acquired."""

    async def process(self, row: Row) -> list[Row]:
        """Turn one input row into output rows (possibly rejections). Must not raise on bad LLM output:
        an exception stops the stage (see the module docs), a rejection is data."""
        raise NotImplementedError

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:  # pragma: no cover - interface
        """Global stages: consume all rows, yield output rows in chunks."""
        raise NotImplementedError
        yield []


STAGES: dict[str, type[Stage[Any]]] = {}
#: The kind each config class was bound to by :func:`register_stage` (one kind per config class).
_CONFIG_KINDS: dict[type[StageConfig], str] = {}

StageT = TypeVar("StageT", bound="type[Stage[Any]]")


def _bind_kind(stage: type[Stage[Any]]) -> None:
    """Make ``stage.kind`` the ``kind`` field of its config: ``Literal[kind]`` with that default."""
    kind, config = stage.kind, stage.Config
    if config is StageConfig:  # a stage without options still gets a config class of its own
        config = create_model(f"{stage.__name__}Config", __base__=StageConfig, __module__=stage.__module__,
                              __doc__=f"Config of ``{kind}`` (only the fields every stage has).")
        config.__qualname__ = f"{stage.__qualname__}.Config"  # so pickle finds it (Ray workers, process pools)
        stage.Config = config
    bound = _CONFIG_KINDS.get(config)
    if bound is not None and bound != kind:
        raise TypeError(f"{config.__qualname__} is already the config of stage kind {bound!r}; "
                        f"give {stage.__qualname__} ({kind!r}) a subclass of it")
    own = config.__dict__.get("__annotations__", {})
    declared = config.__pydantic_fields__["kind"].default if "kind" in own else None
    if declared not in (None, kind):
        raise TypeError(f"{config.__qualname__}.kind defaults to {declared!r} but {stage.__qualname__}.kind "
                        f"is {kind!r}; declare the kind once, on the stage")
    literal: Any = Literal[kind]  # built at run time: the kind is a value here, not a type known to a checker
    config.__pydantic_fields__["kind"] = FieldInfo.from_annotated_attribute(
        literal, Field(default=kind, description=f"Stage kind: always {kind!r} (selects the stage class)."))
    config.model_rebuild(force=True)
    _CONFIG_KINDS[config] = kind


def register_stage(cls: StageT) -> StageT:
    """Class decorator: make ``cls.kind`` usable in pipeline YAML (and the kind of its config)."""
    kind = cls.kind
    if kind in STAGES and STAGES[kind] is not cls:
        raise ValueError(f"stage kind {kind!r} is registered twice ({STAGES[kind].__qualname__}, {cls.__qualname__})")
    if STAGES.get(kind) is not cls:
        _bind_kind(cls)
    STAGES[kind] = cls
    return cls


def carry(row: Row, names: Iterable[str]) -> dict[str, Any]:
    """The columns ``names`` of an input row (``None`` where absent), to copy onto an output row."""
    return {n: row.get(n) for n in names}


def ok(id: str, **columns: Any) -> Row:
    """An accepted output row."""
    return {"id": id, "status": "ok", "reason": None, **columns}


def rejected(id: str, reason: str, **columns: Any) -> Row:
    """A recorded rejection: kept in the store with its reason, excluded by materialisation."""
    return {"id": id, "status": "rejected", "reason": reason, **columns}


#: Longest excerpt of a raw model answer stored on a rejection row (``raw_excerpt``).
RAW_EXCERPT_CHARS = 2000
