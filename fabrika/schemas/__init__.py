"""Pydantic models of every record and their (de)serialisation to table rows.

Imports nothing else of fabrika (DESIGN: ``schemas`` is the leaf package).
"""

from fabrika.schemas.ids import canonical_json, derive_seed, stable_id
from fabrika.schemas.messages import Dialogue, Episode, Message
from fabrika.schemas.records import Constraint, Sample, TestCase, Verifier
from fabrika.schemas.rows import from_row, to_row
from fabrika.schemas.tools import FunctionSpec, Tool, ToolCall, check_parameters_schema, value_matches_type

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
