"""Records of the function-calling (FC) pipeline.

``ToolSpec`` is a tool with four description tiers (terse → detailed): a sample
shows the assistant one tier, so the model learns to call tools whose
descriptions range from a few words to a paragraph. ``Plan`` is the reference
trajectory the three agents replay; ``GoalCard`` is the slice of one plan step
the user agent may see (never tool names, calls or results).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from fabrika.schemas.tools import FunctionSpec, Tool, ToolCall

SampleType = Literal["single", "parallel", "multi_step", "multi_turn", "clarification", "error_recovery", "text",
                     "irrelevance"]
StepKind = Literal["tool_call", "text", "clarification", "irrelevance"]
N_TIERS = 4


class ToolSpec(BaseModel):
    """A generated tool with its description tiers and lineage."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Stable id: hash of topic id and tool name.")
    topic_id: str = Field(description="Id of the topic row the tool was written for.")
    lang: str = Field(description="Language of every description ('ru' or 'en').")
    tool: Tool = Field(description="The tool in OpenAI function format (description = the most detailed tier).")
    tiers: list[str] = Field(description="Four function descriptions from terse (0) to detailed (3).")

    @model_validator(mode="after")
    def _check_tiers(self) -> "ToolSpec":
        if len(self.tiers) != N_TIERS:
            raise ValueError(f"tiers must hold {N_TIERS} descriptions, got {len(self.tiers)}")
        if any(not t.strip() for t in self.tiers):
            raise ValueError("every description tier must be non-empty")
        return self

    @property
    def name(self) -> str:
        return self.tool.name

    def at_tier(self, tier: int) -> Tool:
        """The tool as the assistant sees it at description tier ``tier`` (0..3)."""
        if not 0 <= tier < N_TIERS:
            raise ValueError(f"tier must be in [0, {N_TIERS - 1}], got {tier}")
        fn = self.tool.function
        return Tool(function=FunctionSpec(name=fn.name, description=self.tiers[tier], parameters=fn.parameters))


class Persona(BaseModel):
    """Who the simulated user is; only the user agent sees it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Stable persona id.")
    lang: str = Field(description="Language the persona speaks ('ru' or 'en').")
    name: str = Field(description="A first name.")
    description: str = Field(description="One or two sentences: age, occupation, situation.")
    style: str = Field(default="", description="How the persona writes (short, polite, with typos…).")


class ExpectedCall(BaseModel):
    """One reference call with the result the tool agent should return."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: Any = Field(default=None, description="The plan's expected tool output (JSON value).")

    def to_call(self) -> ToolCall:
        return ToolCall(name=self.name, arguments=self.arguments)


class SlotValue(BaseModel):
    """One argument value the user conveys: the canonical value the call carries and how the user says it.

    ``value`` is exactly what goes into the call (nominative case, ISO dates, enum
    literal); ``say`` is the surface form in the user's words («в Казань», «на 14
    марта»). Enum literals, identifiers, numbers, dates and e-mails are said
    verbatim (:func:`is_verbatim`), so an exact-match check can hold.
    """

    model_config = ConfigDict(extra="forbid")

    value: Any = Field(description="Canonical argument value, exactly as the call carries it.")
    say: str = Field(default="", description="How the user may say it; empty = the value itself.")


class PlanStep(BaseModel):
    """One user turn of the reference trajectory.

    ``rounds`` are the assistant's call rounds in this turn: one round with one
    call (single), one round with several (parallel), several rounds (multi-step,
    later rounds use earlier results). ``slots`` map each argument the user
    supplies to its canonical value and surface form. ``withheld`` names
    arguments the user leaves out on purpose (clarification): the assistant must
    ask instead of calling; their values go in ``slots`` of the step where the
    user gives them.
    """

    model_config = ConfigDict(extra="forbid")

    kind: StepKind = "tool_call"
    intent: str = Field(description="What the user wants in this turn, in the sample's language.")
    user_message: str = Field(default="", description="A reference wording of the user's message.")
    slots: dict[str, SlotValue] = Field(default_factory=dict)
    enum_phrases: dict[str, str] = Field(default_factory=dict, description="Deprecated: enum literals are said verbatim.")
    withheld: list[str] = Field(default_factory=list)
    rounds: list[list[ExpectedCall]] = Field(default_factory=list)
    final_answer: str = Field(default="", description="The assistant's reference text reply ending the turn.")

    @model_validator(mode="before")
    @classmethod
    def _legacy_slots(cls, data: Any) -> Any:
        """Older plans gave ``slots`` as argument → words; the value is then the call's argument."""
        if not isinstance(data, dict) or not isinstance(data.get("slots"), dict):
            return data
        args: dict[str, Any] = {}
        for rnd in data.get("rounds") or []:
            for call in rnd if isinstance(rnd, list) else []:
                arguments = call.get("arguments") if isinstance(call, dict) else getattr(call, "arguments", None)
                for k, v in (arguments if isinstance(arguments, dict) else {}).items():
                    args.setdefault(k, v)
        slots = {k: ({"value": args.get(k, v), "say": v} if isinstance(v, str) else v)
                 for k, v in data["slots"].items()}
        return {**data, "slots": slots}

    @model_validator(mode="after")
    def _check_kind(self) -> "PlanStep":
        if self.kind == "tool_call" and not any(self.rounds):
            raise ValueError("a 'tool_call' step needs at least one round with a call")
        if self.kind != "tool_call" and any(self.rounds):
            raise ValueError(f"a {self.kind!r} step must not have calls (the assistant answers in text)")
        if any(len(r) == 0 for r in self.rounds):
            raise ValueError("empty call round; drop it or add a call")
        return self

    def calls(self) -> list[ExpectedCall]:
        return [c for r in self.rounds for c in r]


class JudgeVerdict(BaseModel):
    """The judge's review of a plan (or of an irrelevance sample)."""

    model_config = ConfigDict(extra="forbid")

    approved: bool
    issues: list[str] = Field(default_factory=list)


class PlanRound(BaseModel):
    """One planner → judge round, kept for audit."""

    model_config = ConfigDict(extra="forbid")

    round: int
    plan: dict[str, Any] | None = Field(default=None, description="The parsed plan steps, None if unparsable.")
    problems: list[str] = Field(default_factory=list, description="Rule violations found before the judge.")
    verdict: JudgeVerdict | None = None


class Plan(BaseModel):
    """A reference trajectory for one episode, with the tools and persona it uses."""

    model_config = ConfigDict(extra="forbid")

    id: str
    topic_id: str
    lang: str
    sample_type: SampleType
    persona: Persona
    tools: list[ToolSpec] = Field(description="The tool group visible to the assistant (topic tools + distractors).")
    tier: int = Field(ge=0, le=N_TIERS - 1, description="Description tier shown to the assistant.")
    steps: list[PlanStep]
    rounds: list[PlanRound] = Field(default_factory=list)
    _tier_tools: list[Tool] | None = PrivateAttr(default=None)

    def tools_at_tier(self) -> list[Tool]:
        """The group at the plan's tier (built once per Plan object; Tool is frozen)."""
        if self._tier_tools is None:
            self._tier_tools = [t.at_tier(self.tier) for t in self.tools]
        return list(self._tier_tools)

    def spec(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


class Fact(BaseModel):
    """One value the user must convey this turn (never an argument name)."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(description="The value as the call carries it (canonical form).")
    say: str = Field(default="", description="A natural way to say it (may inflect a free-text value).")
    verbatim: bool = Field(default=False, description="Say `value` exactly as written (enum literal, identifier, "
                           "number, date, e-mail).")


class GoalCard(BaseModel):
    """What the user agent knows about its current turn: no tool names, calls or results."""

    model_config = ConfigDict(extra="forbid")

    turn: int
    intent: str
    say: str = Field(default="", description="Reference wording; the user may rephrase it.")
    facts: list[Fact] = Field(default_factory=list, description="Values to convey (see Fact.verbatim).")


_IDENTIFIER = re.compile(r"\d|@|^[A-Za-z0-9_.:/+-]+$")


def is_verbatim(value: Any, schema: dict[str, Any] | None) -> bool:
    """Must the user say ``value`` exactly? Enum literals, formats, numbers and identifiers: yes.

    Free text (a city, a name, a description) may be inflected in the sentence and
    the assistant puts it back into its canonical form.
    """
    schema = schema or {}
    if schema.get("enum") or schema.get("format") or schema.get("pattern"):
        return True
    if isinstance(value, (bool, int, float)) or not isinstance(value, str):
        return True
    return bool(_IDENTIFIER.search(value))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def step_arg_schemas(step: PlanStep, tools: list["ToolSpec"]) -> dict[str, dict[str, Any]]:
    """argument name → its property schema, over the step's calls (first call naming it wins)."""
    by_name = {t.name: t for t in tools}
    out: dict[str, dict[str, Any]] = {}
    for call in step.calls():
        spec = by_name.get(call.name)
        props = (spec.tool.function.parameters.get("properties") or {}) if spec else {}
        for k in call.arguments:
            if isinstance(props.get(k), dict):
                out.setdefault(k, props[k])
    return out


def goal_card(plan: "Plan", turn: int) -> GoalCard:
    """Cut the user-visible part out of step ``turn`` of ``plan``.

    Only values travel, never argument names; withheld slots are left out. (What a
    step's texts may not say is checked by :mod:`fabrika.agents.leaks`, before the
    user view is rendered.)
    """
    step = plan.steps[turn]
    schemas = step_arg_schemas(step, plan.tools)
    facts = [Fact(value=_text(slot.value), say=slot.say or _text(slot.value),
                  verbatim=is_verbatim(slot.value, schemas.get(k)))
             for k, slot in step.slots.items() if k not in step.withheld]
    return GoalCard(turn=turn, intent=step.intent, say=step.user_message, facts=facts)
