"""Row contract declarations: :class:`Column` and :class:`Contract`, and the shared column sets.

A stage declares ``reads`` / ``writes`` as tuples of :class:`Column` (see
:mod:`fabrika.pipeline.contracts` for how ``validate`` checks them). A column's
``type`` is a scalar (``str``, ``int``, ``float``, ``bool``) or, for the JSON-carrying
columns (messages, tools, ground truth, constraints, verifiers…), the pydantic type of
the value (``list[Message]``): the row holds it as a JSON string
(:mod:`fabrika.schemas.rows`) and :meth:`Column.read` parses and validates it.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from pydantic import BaseModel, TypeAdapter

import fabrika.schemas.fastjson as fastjson
from fabrika.schemas import Message, Sample, Tool

#: Columns every stored row has (the stage or the runner writes them): never declared, always there.
IMPLICIT_COLUMNS = frozenset({"id", "status", "reason", "input_id", "llm_backend", "raw_excerpt"})
_SCALARS = (str, int, float, bool)


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
        try:
            return _json_type(self.type)
        except TypeError:  # an unhashable type: not remembered
            return _shape(self.type) not in _PLAIN_SHAPES

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
            value = fastjson.loads(value)  # orjson; the stdlib for what orjson refuses (NaN, big integers)
            if value is None:
                return default
        if self.type is Any:
            return value
        return _adapter(self.type).validate_python(value)

    def value(self, row: Mapping[str, Any]) -> Any:
        """:meth:`read` of a column the reader needs: a missing or ``None`` value is a ``KeyError`` naming it
        (what ``row[name]`` raised; the runner reports it as a missing column)."""
        value = self.read(row)
        if value is None:
            raise KeyError(self.name)
        return value


@functools.cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


@functools.cache
def _json_type(tp: Any) -> bool:
    """:attr:`Column.json` of a column type (read on every row: worked out once per type)."""
    return _shape(tp) not in _PLAIN_SHAPES


_PLAIN_SHAPES = ("str", "int", "float", "bool", "any")


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
    """A JSON type that accepts any content of its container (``list``, ``dict[str, Any]``, ``list[Any]``,
    ``list[dict[str, Any]]``)."""
    tp = _strip_none(tp)
    if tp in (list, dict):
        return True
    if typing.get_origin(tp) not in (list, dict):
        return False
    last = typing.get_args(tp)[-1:]
    return last == (Any,) or (tp is not dict and last == (dict[str, Any],))  # list of free-form objects


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


def default_contract(cls: Any) -> Contract:
    """The contract of stage class ``cls`` under its config's defaults (``fabrika stages KIND``)."""
    try:
        return cls.contract(cls.Config.model_construct())
    except (AttributeError, TypeError, ValueError):  # a contract that needs a required config field
        return Contract(reads=cls.reads, writes=cls.writes)


__all__ = [
    "Column",
    "Contract",
    "IMPLICIT_COLUMNS",
    "SAMPLE_COLUMNS",
    "SAMPLE_READS",
    "columns",
    "compatible",
    "default_contract",
    "model_columns",
    "type_label",
]
