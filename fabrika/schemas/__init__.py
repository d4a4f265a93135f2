"""Pydantic models of every record and their (de)serialisation to table rows.

Imports nothing else of fabrika (DESIGN: ``schemas`` is the leaf package).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabrika.schemas.ids import canonical_json, derive_seed, stable_id
    from fabrika.schemas.messages import Dialogue, Episode, Message
    from fabrika.schemas.records import Constraint, Sample, TestCase, Verifier
    from fabrika.schemas.rows import from_row, to_row
    from fabrika.schemas.tools import FunctionSpec, Tool, ToolCall, check_parameters_schema, value_matches_type

#: Where each public name lives, imported on first use: a module that needs only ``fabrika.schemas.ids``
#: (every shard writer) does not pay for pydantic models and jsonschema.
_WHERE = {
    "canonical_json": "ids", "derive_seed": "ids", "stable_id": "ids", "Dialogue": "messages", "Episode": "messages",
    "Message": "messages", "Constraint": "records", "Sample": "records", "TestCase": "records", "Verifier": "records",
    "from_row": "rows", "to_row": "rows", "FunctionSpec": "tools", "Tool": "tools", "ToolCall": "tools",
    "check_parameters_schema": "tools", "value_matches_type": "tools",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fabrika.schemas' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fabrika.schemas.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "Constraint",
    "Dialogue",
    "Episode",
    "FunctionSpec",
    "Message",
    "Sample",
    "TestCase",
    "Tool",
    "ToolCall",
    "Verifier",
    "canonical_json",
    "check_parameters_schema",
    "derive_seed",
    "from_row",
    "stable_id",
    "to_row",
    "value_matches_type",
]
