"""Records of the function-calling (FC) pipeline.

``ToolSpec`` is a tool with four description tiers (terse → detailed): a sample
shows the assistant one tier, so the model learns to call tools whose
descriptions range from a few words to a paragraph. ``Plan`` is the reference
trajectory the three agents replay; ``GoalCard`` is the slice of one plan step
the user agent may see (never tool names, calls or results).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from fabrika.schemas.tools import FunctionSpec, Tool, ToolCall

SampleType = Literal["single", "parallel", "multi_step", "multi_turn", "clarification", "text", "irrelevance"]
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


class PlanStep(BaseModel):
    """One user turn of the reference trajectory.

    ``rounds`` are the assistant's call rounds in this turn: one round with one
    call (single), one round with several (parallel), several rounds (multi-step,
    later rounds use earlier results). ``slots`` map each argument to the exact
    words the user will say, ``enum_phrases`` each enum literal to how a person
    says it. ``withheld`` names arguments the user leaves out on purpose
    (clarification): the assistant must ask instead of calling.
    """

    model_config = ConfigDict(extra="forbid")

    kind: StepKind = "tool_call"
    intent: str = Field(description="What the user wants in this turn, in the sample's language.")
    user_message: str = Field(default="", description="A reference wording of the user's message.")
    slots: dict[str, str] = Field(default_factory=dict)
    enum_phrases: dict[str, str] = Field(default_factory=dict)
    withheld: list[str] = Field(default_factory=list)
    rounds: list[list[ExpectedCall]] = Field(default_factory=list)
    final_answer: str = Field(default="", description="The assistant's reference text reply ending the turn.")

    @model_validator(mode="after")
    def _check_kind(self) -> "PlanStep":
        if self.kind == "tool_call" and not any(self.rounds):
            raise ValueError("a 'tool_call' step needs at least one round with a call")
        if self.kind != "tool_call" and any(self.rounds):
            raise ValueError(f"a {self.kind!r} step must not have calls (the assistant answers in text)")
        if any(len(r) == 0 for r in self.rounds):
            raise ValueError("empty call round; drop it or add a call")
        return self


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


class GoalCard(BaseModel):
    """What the user agent knows about its current turn: no tool names, calls or results."""

    model_config = ConfigDict(extra="forbid")

    turn: int
    intent: str
    say: str = Field(default="", description="Reference wording; the user may rephrase it.")
    facts: list[str] = Field(default_factory=list, description="Details to mention, in the user's own words.")


def goal_card(step: PlanStep, turn: int) -> GoalCard:
    """Cut the user-visible part out of a plan step.

    Only the user's phrases travel (never argument names or enum literals);
    withheld slots are left out so the user cannot mention them.
    """
    facts = [v for k, v in step.slots.items() if k not in step.withheld]
    facts += [v for k, v in step.enum_phrases.items() if v not in facts and k not in step.withheld]
    return GoalCard(turn=turn, intent=step.intent, say=step.user_message, facts=facts)
