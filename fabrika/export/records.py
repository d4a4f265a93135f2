"""Stored sample rows → training records (SFT and GRPO).

The chat form of messages and tools, and the SFT record, are
:mod:`fabrika.schemas.chat` (scorers render rows exactly as the export does);
this module adds the GRPO record (``ground_truth``, ``constraints``, the optional
score columns and L0) and the per-kind field layout the writer uses.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from fabrika.schemas.chat import SCALAR_COLUMNS, json_field, messages_to_chat, sft_record, tools_to_chat

ExportKind = Literal["sft", "grpo"]

#: Optional numeric columns the GRPO record carries when the source has them: the IF RM correction's α
#: (``teacher_rm_mean``), the general expert's R (``rm_score``) and L0 (``ref_length``), and the stored
#: difficulty the trainer's dynamic sampling pre-filters on (``difficulty_pass_rate``); ``length_unit`` is the unit
#: of a stored L0 (``general.teacher``), which the trainer checks against its own ``length_unit``.
GRPO_OPTIONAL_COLUMNS: tuple[str, ...] = ("teacher_rm_mean", "teacher_rm_k", "rm_id", "rm_score", "ref_length",
                                          "difficulty_pass_rate", "length_unit", "ref_length_k")
#: Columns that exist for every GRPO row with a reference completion, because L0 is derived from it: ``ref_length``,
#: its ``length_unit`` and ``ref_length_k`` — how many answers L0 rests on (``general.teacher``'s ``teacher_usable``,
#: 1 for a single reference answer; the general trainer warns about those).
DERIVED_COLUMNS: frozenset[str] = frozenset({"ref_length", "length_unit", "ref_length_k"})
#: Unit of a derived ``ref_length``: the general reward's default ``length_unit`` (``fabrika.rewards.general``).
REF_LENGTH_UNIT: Final = "chars"


def grpo_record(row: dict[str, Any]) -> dict[str, Any]:
    """GRPO record: ``prompt``, ``tools``, ``ground_truth`` + scalars (+ ``constraints`` and optional scores).

    ``constraints`` is lifted out of ``ground_truth`` for IF rows because TRL passes
    extra dataset columns to reward functions as keyword arguments.
    """
    rec: dict[str, Any] = {c: row[c] for c in SCALAR_COLUMNS if c in row}
    rec["prompt"] = messages_to_chat(row.get("prompt"))
    rec["tools"] = tools_to_chat(row.get("tools"))
    gt = json_field(row.get("ground_truth"), None)
    rec["ground_truth"] = gt
    rec["constraints"] = gt.get("constraints") if isinstance(gt, dict) else None
    for col in GRPO_OPTIONAL_COLUMNS:
        if col in row:
            rec[col] = row[col]
    if "ref_length" in row or "completion" in row:
        rec.update(ref_length_columns(row.get("ref_length"), row.get("completion"), row.get("length_unit"),
                                      row.get("teacher_usable")))
    return rec


def ref_length_columns(stored: Any, completion: Any, unit: Any, usable: Any) -> dict[str, Any]:
    """``ref_length`` with its ``length_unit`` and ``ref_length_k`` (answers it rests on); all None without L0."""
    l0 = ref_length(stored, completion)
    if l0 is None:
        return {"ref_length": None, "length_unit": None, "ref_length_k": None}
    if stored is not None:
        return {"ref_length": l0, "length_unit": unit, "ref_length_k": int(usable) if usable is not None else None}
    return {"ref_length": l0, "length_unit": REF_LENGTH_UNIT, "ref_length_k": 1}


def ref_length(stored: Any, completion: Any) -> float | None:
    """L0 of the general reward: the stored value, else the reference completion's visible text length.

    A stored ``ref_length`` is taken as is (it must be in the trainer's
    ``length_unit``); a derived one is in :data:`REF_LENGTH_UNIT` (chars), measured
    exactly as :func:`fabrika.rewards.general.completion_length` measures L(y).
    ``None`` when there is no reference answer (the trainer rejects null L0 up front).
    """
    if stored is not None:
        return float(stored)
    from fabrika.rewards.general import completion_length

    messages = messages_to_chat(completion, role="assistant")
    length = completion_length(messages, REF_LENGTH_UNIT) if messages else 0
    return float(length) if length > 0 else None


def to_record(row: dict[str, Any], kind: ExportKind) -> dict[str, Any]:
    """Dispatch on the export kind."""
    if kind == "sft":
        return sft_record(row)
    if kind == "grpo":
        return grpo_record(row)
    raise ValueError(f"export kind must be 'sft' or 'grpo', got {kind!r}")


#: Nested (JSON-valued) fields of each kind's record.
NESTED_FIELDS: dict[str, tuple[str, ...]] = {
    "sft": ("prompt", "completion", "tools"),
    "grpo": ("prompt", "tools", "ground_truth", "constraints"),
}
#: Of those, the ones that are lists stored element-wise (``List(Json())``).
LIST_FIELDS: frozenset[str] = frozenset({"prompt", "completion", "tools"})
