"""Lossless record ↔ table row conversion.

A row is flat: scalar fields (str, int, float, bool, None) stay columns of their
own type; every nested field (lists, dicts, sub-models) becomes one JSON string
column written with ``ensure_ascii=False``. JSON strings, not Arrow structs,
because Arrow's struct unification merges keys across rows and fills ``null``s
(tool arguments with different keys would be corrupted). Python's ``json``
keeps ``1`` and ``1.0`` apart, so ints and floats survive the trip.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator

import fabrika.schemas.fastjson as fastjson
from fabrika.textutil.jsontext import dumps_compact

M = TypeVar("M", bound=BaseModel)

_SCALARS = (str, int, float, bool, type(None))


def _is_scalar_annotation(ann: Any) -> bool:
    origin = typing.get_origin(ann)
    if ann in _SCALARS:
        return True
    if origin is typing.Literal:
        return all(isinstance(a, _SCALARS) for a in typing.get_args(ann))
    if origin in (typing.Union, types.UnionType):
        return all(_is_scalar_annotation(a) for a in typing.get_args(ann))
    return False


@functools.cache
def nested_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    """Names of the fields stored as JSON strings (computed once per class)."""
    return tuple(n for n, f in cls.model_fields.items() if not _is_scalar_annotation(f.annotation))


def dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``, through orjson where that is the same text."""
    return dumps_compact(value, default_str=False)


def to_row(record: BaseModel) -> dict[str, Any]:
    """Flatten ``record`` into a row (nested fields as JSON strings)."""
    data = record.model_dump(mode="json")
    for name in nested_fields(type(record)):
        data[name] = dumps(data[name])
    return data


def from_row(cls: type[M], row: dict[str, Any]) -> M:
    """Inverse of :func:`to_row`; extra columns (scores added by filters) are ignored."""
    data = {}
    nested = nested_fields(cls)
    for name in cls.model_fields:
        if name not in row:
            continue
        value = row[name]
        if name in nested and isinstance(value, str):
            value = fastjson.loads(value)
        data[name] = value
    return cls.model_validate(data)


R = TypeVar("R", bound="RowModel")


class RowModel(BaseModel):
    """A typed view of a stored row: the columns one stage reads, JSON columns decoded and validated.

    ``Model.of(row)`` replaces ``json.loads(row["messages"])`` and ``row.get("x")`` reads: the
    row's other columns are ignored, a ``None`` (or empty) value of a field with a default
    takes the default, and a value that breaks the field's type is a ``ValidationError``
    (the upstream stage wrote what its contract did not promise).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _decode(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        nested = nested_fields(cls)
        out = {}
        for name, info in cls.model_fields.items():
            if name not in data:
                continue
            value = data[name]
            if name in nested and isinstance(value, (str, bytes, bytearray)):
                value = fastjson.loads(value) if value else None
            if value is None and not info.is_required():
                continue
            out[name] = value
        return out

    @classmethod
    def of(cls: type[R], row: dict[str, Any]) -> R:
        return cls.model_validate(row)

