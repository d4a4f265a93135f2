"""Records of the general-chat pipeline: the teacher's stored answers and the teacher row as read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from fabrika.schemas.messages import Message
from fabrika.schemas.rows import RowModel


class TeacherAnswer(BaseModel):
    """One of the teacher's K answers to a prompt (``teacher_answers`` of ``general.teacher``)."""

    model_config = ConfigDict(extra="allow")  # finish_reason, had_reasoning and what later versions add

    index: int
    text: str | None = None
    length: int | float | None = None
    usable: bool = False
    problem: str | None = None


class TeacherAnswersRow(RowModel):
    """The teacher's answers of a ``general.teacher`` row (what ``general.rm`` scores)."""

    id: str
    teacher_answers: list[TeacherAnswer] = []


class GeneralTeacherRow(TeacherAnswersRow):
    """A ``general.teacher`` row, with ``general.rm``'s scores joined, as the sample stages read it."""

    prompt: list[Message]
    answer_rm_scores: list[float | None] | None = None
    ref_length: float | None = None
    lang: str | None = None
    prompt_id: str | None = None
    service: str | None = None
    task: str | None = None
    length_unit: str | None = None
    rm_id: str | None = None
    teacher_rm_mean: float | None = None
    teacher_usable: int | None = None
    template_id: str | None = None
    template_rank: int | None = None

    def l0(self) -> float:
        """The reference length; a row without one never reaches the sample stages (the teacher rejects it)."""
        if self.ref_length is None:
            raise ValueError(f"teacher row {self.id!r} has no ref_length")
        return float(self.ref_length)


class GeneralPromptRow(RowModel):
    """A prompt-pool row (``general.prompts``, with ``filter.language`` joined) as ``general.teacher`` reads it."""

    id: str
    lang: str | None = None
    lang_detected: str | None = None
    service: str | None = None
    task: str | None = None
    template_id: str | None = None
    template_rank: int | None = None
