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
import json
import types
import typing
from typing import Any, TypeVar

from pydantic import BaseModel

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
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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
            value = json.loads(value)
        data[name] = value
    return cls.model_validate(data)
