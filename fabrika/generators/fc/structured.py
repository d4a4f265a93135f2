"""``response_format`` for every FC stage that wants JSON back (DESIGN contract 3, belt and braces).

The JSON schema comes from the pydantic model the stage parses into, so the
constraint a server enforces (OpenAI ``json_schema``, vLLM structured outputs —
``fabrika.llm.vllm_local`` maps it to guided decoding) and the parser can never
disagree. Servers that ignore ``response_format`` still get the shape in the
prompt, and :func:`fabrika.textutil.answers.extract_json` stays the fallback:
a constrained answer is still untrusted input.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fabrika.schemas.fc import JudgeVerdict, PlanStep

__all__ = ["IrrelevanceVerdict", "PlanAnswer", "ToolDraft", "ToolsAnswer", "response_format"]


class ToolDraft(BaseModel):
    """One tool as the writer returns it (validated further by ``parse_tool``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="snake_case function name")
    parameters: dict[str, Any] = Field(description="JSON Schema of the arguments (type: object)")
    tiers: list[str] = Field(min_length=4, max_length=4, description="four descriptions, terse to detailed")


class ToolsAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tools: list[ToolDraft] = Field(min_length=1)


class PlanAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: list[PlanStep] = Field(min_length=1)


class IrrelevanceVerdict(BaseModel):
    """Can a remaining tool serve the request? ``any_tool_fits=false`` is what makes the sample true."""

    model_config = ConfigDict(extra="forbid")

    any_tool_fits: bool
    fitting_tools: list[str] = Field(default_factory=list)
    issues: list[str] = Field(default_factory=list)


def _drop_deprecated(schema: Any) -> Any:
    if isinstance(schema, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            props.pop("enum_phrases", None)
        for v in schema.values():
            _drop_deprecated(v)
    elif isinstance(schema, list):
        for v in schema:
            _drop_deprecated(v)
    return schema


@cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return _drop_deprecated(model.model_json_schema())


MODELS: dict[str, type[BaseModel]] = {
    "fc_tools": ToolsAnswer, "fc_plan": PlanAnswer, "fc_judge": JudgeVerdict,
    "fc_irrelevance_judge": IrrelevanceVerdict,
}  # LLMStage stages declare their answer model themselves (``answer_model``, e.g. fc.answer_judge)


def response_format(name: str) -> dict[str, Any]:
    """The OpenAI ``response_format`` (json_schema) of answer ``name`` (a key of :data:`MODELS`)."""
    try:
        model = MODELS[name]
    except KeyError:
        raise KeyError(f"no structured answer {name!r}; known: {sorted(MODELS)}") from None
    return {"type": "json_schema", "json_schema": {"name": name, "schema": _schema(model)}}
