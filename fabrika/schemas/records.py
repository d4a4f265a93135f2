"""Record types shared by the pipelines and the export.

Pipeline-specific records live next to these (``schemas/fc.py``, ``schemas/instruct.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fabrika.schemas.messages import Message
from fabrika.schemas.tools import Tool

Expert = Literal["fc", "if", "general"]
TargetType = Literal["tool_call", "text", "clarification", "irrelevance"]


class Sample(BaseModel):
    """One training sample: prompt messages, the target completion, the visible tools.

    ``ground_truth`` carries what the expert's reward needs (expected calls for FC;
    constraint ids with params or verifier ids for IF). ``meta`` carries lineage
    (episode id, step, stage ids) and is copied into exports as is.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    expert: Expert
    lang: str
    prompt: list[Message]
    completion: list[Message]
    tools: list[Tool] = Field(default_factory=list)
    target_type: TargetType | None = None
    ground_truth: dict[str, Any] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class TestCase(BaseModel):
    """A labelled response for a constraint: ``label`` says whether it complies."""

    model_config = ConfigDict(extra="forbid")
    __test__ = False  # not a pytest class

    response: str
    label: bool


class Constraint(BaseModel):
    """An instruction-following constraint (library seed, LLM expansion or user seed)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    text: str
    lang: str = "ru"
    source: Literal["library", "llm", "user"] = "llm"
    parent_id: str | None = None
    family: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class Verifier(BaseModel):
    """An LLM-written ``evaluate(response) -> bool`` function with its test cases."""

    model_config = ConfigDict(extra="forbid")

    id: str
    constraint_id: str
    code: str
    test_cases: list[TestCase] = Field(default_factory=list)
