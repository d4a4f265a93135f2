"""Row contracts of the general-chat stages (``fabrika.pipeline.columns``)."""

from __future__ import annotations

from typing import Any

from fabrika.filters.teacher_rm import TEACHER_SCORES
from fabrika.pipeline.columns import SAMPLE_COLUMNS, Column, columns
from fabrika.pipeline.preflight import InputFile
from fabrika.schemas import Message
from fabrika.schemas.rows import RowModel

PROMPT = Column("prompt", list[Message], doc="the prompt as chat messages")
TEMPLATE = (Column("template_id", str, required=False), Column("template_rank", int, required=False))
POOL = (
    PROMPT,
    Column("lang", str, required=False),
    Column("service", str, required=False),
    Column("task", str, required=False),
    Column("source_row", int, doc="record number in the pool file"),
    *TEMPLATE,
)
POOL_FILE = InputFile("path", "prompt pool", format="any",
                      fix="give a jsonl/parquet of prompts or chats, or a save_to_disk directory")
ANSWERS = Column("teacher_answers", list[dict[str, Any]], doc="the teacher's K answers: index, text, length, usable")
REF_LENGTH = Column("ref_length", float, doc="L0, the reference length of the usable answers")
TEACHER = (
    PROMPT,
    Column("lang", str, required=False),
    Column("service", str, required=False),
    Column("task", str, required=False),
    Column("prompt_id", str),
    *TEMPLATE,
    ANSWERS,
    Column("teacher_k", int),
    Column("teacher_usable", int),
    Column("teacher_truncated", int),
    Column("ref_length", float, required=False),
    Column("length_unit", str),
    Column("ref_length_stat", str),
)
TEACHER_READS = (Column("prompt", list[Message], alternatives=("messages",)),
                 *(c.optional() for c in POOL if c.name not in ("prompt", "source_row")),
                 Column("lang_detected", str, required=False, doc="filter.language on the pool"))
RM = (*TEACHER_SCORES, Column("answer_rm_scores", list[Any], doc="RM score per teacher answer (None: unusable)"))
RM_SCORES = Column("answer_rm_scores", list[Any])
SAMPLES = columns(SAMPLE_COLUMNS, Column("teacher_rm_score", float), Column("teacher_rm_rank", int),
                  Column("answer_length", int), REF_LENGTH, Column("length_ratio", float, required=False),
                  Column("length_unit", str), Column("rm_id", str, required=False), *TEMPLATE)
GRPO = columns(SAMPLE_COLUMNS, REF_LENGTH, Column("length_unit", str), Column("rm_id", str, required=False),
               Column("teacher_rm_mean", float, required=False), Column("teacher_usable", int), *TEMPLATE)
RM_HINT = "a general.rm stage (scorer) on the same general.teacher table"


class PoolRow(RowModel):
    """What ``general.prompts`` reads of its own normalised pool rows to cluster templates (POOL)."""

    id: str
    prompt: list[dict[str, Any]]
    service: str | None = None
    task: str | None = None
