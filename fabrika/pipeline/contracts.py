"""Row contracts: the columns a stage reads and writes, checked along the pipeline graph once.

Every stage class declares :attr:`~fabrika.pipeline.stage.Stage.reads` (the input
columns it needs) and :attr:`~fabrika.pipeline.stage.Stage.writes` (the columns of its
output rows) as :class:`Column` tuples; a stage whose columns depend on its config
overrides :meth:`~fabrika.pipeline.stage.Stage.contract`. A column's ``type`` is a
scalar (``str``, ``int``, ``float``, ``bool``) or, for the JSON-carrying columns
(messages, tools, ground truth, constraints, verifiers…), the pydantic model of the
value (``list[Message]``): the row holds it as a JSON string (:mod:`fabrika.schemas.rows`)
and :meth:`Column.read` parses and validates it.

:func:`check_contracts` walks the stages in execution order and builds, per table,
the columns a reader of that table sees: the stage's own ``writes`` (plus its input's
columns when it ``carries`` them), then every annotating stage (scorer) of the table
joined on ``id`` the way the store joins them (:meth:`fabrika.store.run.RunStore.scan`:
a scorer's ``status``/``reason``, and a score whose name is taken, get ``__<scorer>``).
An annotating stage reads the table it scores with the scorers listed before it. A
required column missing from an input, or a column whose declared type differs from the
writer's, is ONE line naming the stage, the column and the stage kinds that write it.
Stages that declare nothing (``reads``/``writes`` left ``None``, e.g. a plugin's) are
not checked and make their output table unknown, so nothing downstream is checked against it.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from pydantic import BaseModel, TypeAdapter

from fabrika.schemas import Message, Sample, Tool

if TYPE_CHECKING:
    from fabrika.pipeline.stage import StageConfig

#: Columns every stored row has (the stage or the runner writes them): never declared, always there.
IMPLICIT_COLUMNS = frozenset({"id", "status", "reason", "input_id", "llm_backend", "raw_excerpt"})
_SCALARS = (str, int, float, bool)
#: Columns an annotation join never brings (the store drops them: ``fabrika.store.run.JOIN_DROP``).
_JOIN_DROP = frozenset({"input_id", "llm_backend"})


@dataclass(frozen=True)
class Column:
    """One column of a stage's input or output rows.

    Attributes:
        name: the column name.
        type: ``str``/``int``/``float``/``bool`` for scalar columns; for JSON-carrying columns the
            pydantic type of the decoded value (``list[Message]``, ``dict[str, Any]``, ``IFGroundTruth``).
            ``Any`` accepts every writer.
        required: a reader needs it (a missing column is a validate error); False for ``row.get`` reads
            and for output columns that are only sometimes filled (``None`` on some rows is always allowed).
        doc: one line on what it holds (``fabrika stages KIND`` shows it).
        alternatives: other names that satisfy a read (``messages`` or ``prompt``).
    """

    name: str
    type: Any = str
    required: bool = True
    doc: str = ""
    alternatives: tuple[str, ...] = ()

    @property
    def json(self) -> bool:
        """True when the row stores the value as a JSON string."""
        return _shape(self.type) not in ("str", "int", "float", "bool", "any")

    @property
    def type_label(self) -> str:
        return type_label(self.type)

    def optional(self) -> "Column":
        """The same column, not required."""
        return Column(self.name, self.type, False, self.doc, self.alternatives)

    def read(self, row: Mapping[str, Any], default: Any = None) -> Any:
        """The decoded value of this column in ``row`` (JSON parsed, validated against ``type``).

        A missing or ``None`` value gives ``default``; a value that does not match is a
        :class:`pydantic.ValidationError` (upstream wrote something its contract did not promise).
        """
        value = row.get(self.name)
        if value is None:
            return default
        if self.json and isinstance(value, (str, bytes, bytearray)):
            if not value:
                return default
            value = json.loads(value)
            if value is None:
                return default
        if self.type is Any:
            return value
        return _adapter(self.type).validate_python(value)


@functools.cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


@dataclass(frozen=True)
class Contract:
    """What one configured stage reads from its input(s) and writes into its table."""

    reads: tuple[Column, ...] | None = None
    writes: tuple[Column, ...] | None = None
    #: output rows carry every column of the input row (pass-through stages)
    carries: bool = False
    #: output rows may hold columns besides ``writes`` that depend on the data (a user's seed file)
    open: bool = False
    #: per read column name: the stage kinds to name when it is missing (default: every kind writing it)
    hints: Mapping[str, str] = field(default_factory=dict)

    @property
    def declared(self) -> bool:
        return self.reads is not None and self.writes is not None


def model_columns(model: type[BaseModel], *, required: Iterable[str] | None = None,
                  exclude: Iterable[str] = ("id",)) -> tuple[Column, ...]:
    """The columns :func:`fabrika.schemas.to_row` writes for ``model`` (its fields, JSON ones with their type).

    ``required`` names the columns a reader needs (default: the model's required fields).
    """
    skip = set(exclude)
    need = set(required) if required is not None else {n for n, f in model.model_fields.items() if f.is_required()}
    out = []
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        out.append(Column(name, _strip_none(info.annotation), name in need, info.description or ""))
    return tuple(out)


def _strip_none(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


#: The columns of a :class:`fabrika.schemas.Sample` row (every ``*.samples`` / ``*.grpo`` output).
SAMPLE_COLUMNS: tuple[Column, ...] = model_columns(Sample)
#: What sample scorers read: the prompt and the completion messages, the visible tools.
SAMPLE_READS: tuple[Column, ...] = (
    Column("prompt", list[Message] | str, doc="prompt messages of a Sample row (or a plain prompt text)"),
    Column("completion", list[Message] | str, required=False, doc="target messages (empty in GRPO rows) or text"),
    Column("tools", list[Tool], required=False, doc="tools visible to the assistant"),
    Column("lang", str, required=False),
    Column("target_type", str, required=False),
)


def columns(*specs: Column | Sequence[Column]) -> tuple[Column, ...]:
    """Concatenate column tuples; a later column replaces an earlier one of the same name."""
    out: dict[str, Column] = {}
    for spec in specs:
        for col in ([spec] if isinstance(spec, Column) else spec):
            out[col.name] = col
    return tuple(out.values())


# -- types ------------------------------------------------------------------------------------

def type_label(tp: Any) -> str:
    """``list[Message]``, ``str``, ``dict[str, Any]`` (no module prefixes)."""
    if tp is Any:
        return "Any"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_label(a) for a in args)
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    name = getattr(origin, "__name__", str(origin))
    return f"{name}[{', '.join(type_label(a) for a in args)}]" if args else name


def _shape(tp: Any) -> str:
    """What a type check compares: scalar name, ``any``, or the label of a JSON type."""
    if tp is Any:
        return "any"
    tp = _strip_none(tp)
    if tp in _SCALARS:
        return tp.__name__
    if typing.get_origin(tp) is typing.Literal:
        return "str" if all(isinstance(a, str) for a in typing.get_args(tp)) else "any"
    return type_label(tp)


def _generic(tp: Any) -> bool:
    """A JSON type that accepts any content of its container (``list``, ``dict[str, Any]``, ``list[Any]``)."""
    tp = _strip_none(tp)
    if tp in (list, dict):
        return True
    return typing.get_origin(tp) in (list, dict) and typing.get_args(tp)[-1:] == (Any,)


def compatible(reader: Any, writer: Any) -> bool:
    """Whether a column written as ``writer`` can be read as ``reader`` (a union reads what any member reads)."""
    if typing.get_origin(reader) in (typing.Union, types.UnionType):
        return any(compatible(a, writer) for a in typing.get_args(reader) if a is not type(None))
    if typing.get_origin(writer) in (typing.Union, types.UnionType):
        return all(compatible(reader, a) for a in typing.get_args(writer) if a is not type(None))
    r, w = _shape(reader), _shape(writer)
    if "any" in (r, w) or r == w:
        return True
    if r == "float" and w == "int":
        return True
    scalar = ("str", "int", "float", "bool")
    if r in scalar or w in scalar:
        return False
    base = typing.get_origin(_strip_none(reader)) or _strip_none(reader)
    wbase = typing.get_origin(_strip_none(writer)) or _strip_none(writer)
    if _generic(reader) and base == wbase:  # list[Any] reads any list, dict[str, Any] any object
        return True
    return _generic(writer) and base == wbase  # a loosely declared writer is not contradicted


# -- the check ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Source:
    column: Column
    stage: str  # stage name that wrote it


Table = dict[str, _Source]


def default_contract(cls: Any) -> Contract:
    """The contract of stage class ``cls`` under its config's defaults (``fabrika stages KIND``)."""
    try:
        return cls.contract(cls.Config.model_construct())
    except (AttributeError, TypeError, ValueError):  # a contract that needs a required config field
        return Contract(reads=cls.reads, writes=cls.writes)


def contract_of(config: "StageConfig") -> Contract | None:
    """The contract of a configured stage (``None`` for an unknown kind)."""
    from fabrika.pipeline.stage import STAGES

    cls = STAGES.get(config.kind)
    return None if cls is None else cls.contract(config)


def writers_of(column: str) -> list[str]:
    """Stage kinds whose declared ``writes`` include ``column`` (scorers marked), sorted."""
    from fabrika.pipeline.stage import STAGES

    out = []
    for kind, cls in sorted(STAGES.items()):
        names = {c.name for c in (default_contract(cls).writes or ())}
        if column in names:
            out.append(f"{kind} (scorer)" if cls.annotates else kind)
    return out


def _joined(base: Table | None, annotators: Sequence[str], own: Mapping[str, Table | None]) -> Table | None:
    """``base`` with ``annotators``' columns joined the way the store joins them."""
    if base is None:
        return None
    view = dict(base)
    taken = set(view) | IMPLICIT_COLUMNS
    for scorer in annotators:
        cols = own.get(scorer)
        if cols is None:
            return None  # an undeclared scorer: what the table holds is unknown
        for name, src in cols.items():
            if name in _JOIN_DROP or name == "id":
                continue
            key = f"{name}__{scorer}" if name in ("status", "reason") or name in taken else name
            view[key] = _Source(Column(key, src.column.type, src.column.required, src.column.doc), scorer)
            taken.add(key)
    return view


def check_contracts(config: Any) -> list[tuple[str, str, str]]:
    """``(stage name, field, message)`` per contract violation of a validated pipeline (see module docs).

    ``config`` must be free of other errors (known kinds and inputs, no cycle).
    """
    from fabrika.pipeline.config import execution_order, inputs_of
    from fabrika.pipeline.stage import STAGES

    stages = {s.stage_name: s for s in config.stages}
    annotators: dict[str, list[str]] = {}
    for s in config.stages:
        if STAGES[s.kind].annotates:
            annotators.setdefault(inputs_of(s)[0], []).append(s.stage_name)
    own: dict[str, Table | None] = {}
    opened: set[str] = set()
    problems: list[tuple[str, str, str]] = []
    for s in execution_order(config):
        name, cls = s.stage_name, STAGES[s.kind]
        contract = cls.contract(s)
        inputs = inputs_of(s)
        views: dict[str, Table | None] = {}
        for src in inputs:
            peers = annotators.get(src, [])
            before = peers[: peers.index(name)] if cls.annotates else peers
            views[src] = _joined(own.get(src), before, own)
        if contract.reads is not None:
            for src, view in views.items():
                if view is None:
                    continue
                problem = _check_reads(s, contract, src, stages[src].kind, view, src in opened)
                if problem is not None:
                    problems.append((name, "input", problem))
        if contract.writes is None:
            own[name] = None
            continue
        table: Table | None = {}
        if contract.carries:
            for view in views.values():
                if view is None:
                    table = None
                    break
                for col, src in view.items():
                    table.setdefault(col, src)
        if table is None:
            own[name] = None
            continue
        if contract.open or (contract.carries and any(src in opened for src in inputs)):
            opened.add(name)  # holds columns nobody declared: a missing read is not reported
        for col in contract.writes:
            table[col.name] = _Source(col, name)
        own[name] = table
    return problems


def _check_reads(stage: Any, contract: Contract, src: str, src_kind: str, view: Table, open_view: bool) -> str | None:
    """The first broken read of ``stage`` against input ``src`` as one message, or None."""
    for col in contract.reads or ():
        names = (col.name, *col.alternatives)
        found = next((n for n in names if n in view or n in IMPLICIT_COLUMNS), None)
        if found is None:
            if not col.required or open_view:
                continue
            wanted = " or ".join(repr(n) for n in names)
            hint = contract.hints.get(col.name) or ", ".join(writers_of(col.name)) or "no known stage kind"
            return (f"{stage.kind} {stage.stage_name!r} reads column {wanted} ({col.type_label}) but its input "
                    f"{src!r} ({src_kind}) does not provide it; written by: {hint}")
        if found in IMPLICIT_COLUMNS or found not in view:
            continue
        written = view[found]
        if not compatible(col.type, written.column.type):
            return (f"{stage.kind} {stage.stage_name!r} reads column {found!r} as {col.type_label} but "
                    f"{written.stage!r} writes it as {written.column.type_label} (input {src!r}, {src_kind})")
    return None


__all__ = [
    "Column",
    "Contract",
    "IMPLICIT_COLUMNS",
    "SAMPLE_COLUMNS",
    "SAMPLE_READS",
    "check_contracts",
    "columns",
    "compatible",
    "contract_of",
    "default_contract",
    "model_columns",
    "type_label",
    "writers_of",
]
