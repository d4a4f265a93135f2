"""IF records: what a sample's ``ground_truth`` holds for the IF reward.

``Sample.ground_truth`` of an IF sample (SFT and GRPO alike) validates as
:class:`IFGroundTruth`. A reward checks each constraint with the trusted library
verifier when ``library_id`` is set (``fabrika.constraints.get(library_id).verify``)
and otherwise runs the LLM-written ``verifiers`` (in the sandbox) whose
``accuracy`` is at least ``min_function_accuracy``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fabrika.schemas.rows import RowModel


class IFConstraintRef(BaseModel):
    """One instruction in the prompt."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Constraint id (library ids look like 'ru.length.words_max@<hash>').")
    text: str = Field(description="The instruction as shown to the model.")
    library_id: str | None = Field(default=None, description="Library constraint id when a trusted verifier exists.")
    params: dict[str, Any] = Field(default_factory=dict, description="Library parameters for the trusted verifier.")
    verifier_code: list[str] | None = Field(default=None, description="Surviving LLM-written verifiers of this "
                                            "constraint (multi-constraint prompts; run only in the sandbox).")


class IFVerifierRef(BaseModel):
    """An LLM-written verifier that survived cross-validation."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Python source defining evaluate(response) -> bool; run it only in the sandbox.")
    accuracy: float = Field(ge=0, le=1, description="Accuracy on the constraint's supported test cases.")


class IFGroundTruth(BaseModel):
    """What the IF reward needs to score a completion."""

    model_config = ConfigDict(extra="forbid")

    constraints: list[IFConstraintRef] = Field(description="Every instruction in the prompt.")
    verifiers: list[IFVerifierRef] = Field(default_factory=list, description="Surviving verifiers of the main "
                                           "(first) constraint; empty in SFT samples.")
    min_function_accuracy: float | None = Field(default=None, ge=0, le=1, description="The consistency threshold "
                                                "the verifiers were selected with.")
    rubrics: list[str] | None = Field(default=None, description="Natural-language checks an LLM judge applies to "
                                      "the completion (multi-turn IF dialogues); every one must pass.")


# -- JSON-carrying columns of the IF stages' rows (the row contracts of fabrika.generators.instruct.columns)

class PromptConstraint(BaseModel):
    """One instruction of a prompt row (``constraints`` of ``if.queries`` / ``if.multi.prompts``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    text: str
    source: str | None = None
    family: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    library_id: str | None = None
    verifier_code: list[str] | None = None
    accuracy: list[float] | None = Field(default=None, description="Accuracy of each verifier_code entry.")


class VerifierAnswer(BaseModel):
    """One parsed ``if.verifiers`` answer: the function and the test cases it came with."""

    model_config = ConfigDict(extra="forbid")

    sample_index: int
    code: str
    cases: list[dict[str, Any]] = Field(default_factory=list, description="{'response': str, 'label': bool} each.")


class ScoredFunction(BaseModel):
    """One verifier after ``if.consistency``'s cross-validation (``functions``)."""

    model_config = ConfigDict(extra="forbid")

    sample_index: int
    code: str
    accuracy: float
    runnable: bool
    error: str | None = None


class RunnableVerifier(BaseModel):
    """A runnable verifier carried on a prompt row (``verifiers`` of ``if.queries``)."""

    model_config = ConfigDict(extra="forbid")

    sample_index: int
    code: str
    accuracy: float


class CaseSupport(BaseModel):
    """A cross-validated test case and how many runnable functions reproduce its label."""

    model_config = ConfigDict(extra="forbid")

    response: str
    label: bool
    support: int


# -- typed views of IF rows (fabrika.schemas.rows.RowModel): what the IF stages read

class IFPromptRow(RowModel):
    """A prompt row of ``if.queries`` / ``if.multi.prompts`` as its consumers read it."""

    id: str
    messages: list[dict[str, Any]] = Field(description="Chat messages as stored (the request is built from them).")
    constraints: list[PromptConstraint] = Field(default_factory=list)
    library_constraints: list[tuple[str, dict[str, Any]]] = Field(default_factory=list)
    verifiers: list[RunnableVerifier] = Field(default_factory=list)
    query: str | None = None
    query_id: str | None = None
    constraint_id: str | None = None
    prompt_id: str | None = None
    placement: str | None = None
    lang: str | None = None


class IFResponseRow(IFPromptRow):
    """A kept response (``if.responses`` / ``if.multi.responses``) as the sample stages read it."""

    response: str


class IFVerifierAnswersRow(RowModel):
    """What ``if.consistency`` reads from an ``if.verifiers`` row: the parsed answers."""

    id: str
    verifiers: list[VerifierAnswer] = Field(default_factory=list)


class IFConstraintRow(RowModel):
    """A constraint row (``if.expand`` … ``if.verifiers``, with ``if.consistency``'s scores joined) as read."""

    id: str
    text: str
    lang: str | None = None
    source: str | None = None
    parent_id: str | None = None
    family: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    verifiers: list[VerifierAnswer] = Field(default_factory=list, description="if.verifiers' parsed answers.")
    functions: list[ScoredFunction] = Field(default_factory=list, description="if.consistency's scored functions.")
    case_support: list[CaseSupport] = Field(default_factory=list, description="if.consistency's test cases.")
    sample_index: int | None = Field(default=None, description="Set on if.expand's per-answer rejection rows.")

    def surviving(self, min_accuracy: float, limit: int | None = None) -> list[ScoredFunction]:
        """Runnable functions at or above ``min_accuracy``, best first (if.consistency sorted them)."""
        funcs = [f for f in self.functions if f.runnable and f.accuracy >= min_accuracy]
        return funcs[:limit] if limit else funcs


class DialogueTurn(BaseModel):
    """One assistant turn of an ``if.dialogues`` row (``turns``): its tactic and verdicts."""

    model_config = ConfigDict(extra="allow")

    turn: int
    tactic: str
    message_index: int
    passed: bool | None = Field(default=None, description="None when the judge failed.")
    rubric_verdicts: list[Any] | None = None
    failed_rubrics: list[Any] = Field(default_factory=list)
    failed_rules: list[Any] = Field(default_factory=list)
    judge_error: str | None = None
    language_problem: str | None = None
    quality: float | None = None


class IFDialogueRow(RowModel):
    """An ``if.dialogues`` row as the dialogue sample stages read it."""

    id: str
    messages: list[dict[str, Any]]
    turns: list[DialogueTurn] = Field(default_factory=list)
    rules: list[IFConstraintRef] = Field(default_factory=list)
    rubrics: list[str] = Field(default_factory=list)
    lang: str | None = None
    n_rubrics: int | None = None
