"""``general.samples`` (SFT) and ``general.grpo`` (GRPO prompts), both over ``general.teacher``.

``general.samples`` writes one SFT row per usable, scored teacher answer: prompt →
that answer, with ``teacher_rm_score``, ``teacher_rm_rank`` (0 = the prompt's best),
``answer_length``, ``ref_length`` and ``length_ratio``. Which of them a dataset keeps is
a gate, not a stage decision (contract 2): by default ``general.sft_top_k = 1`` (the
best-scored answer); ``sft_top_k: null`` with ``min_rm_score`` keeps all above a floor;
``min_length_ratio`` / ``max_length_ratio`` keep a length band around L0. These gates are
scoped to SFT exports (the version keeps every answer; ``fabrika export --kind sft``
leaves the unselected ones out and counts them), so scorers on this table see every
answer and widening the selection needs no re-run.

``general.grpo`` writes one prompt-only row per prompt with what
:func:`fabrika.rewards.general.make_general_reward` needs: ``ref_length`` (L0, in
``length_unit``), ``rm_id`` (which RM scored the teacher: train with the same one) and
``teacher_rm_mean``. It deliberately carries no ``rm_score``: a reward without an RM
would read that column as R, a constant per prompt that teaches nothing.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

import fabrika.generators.general.columns as cols
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.pipeline.columns import Column, Contract
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas import Message, Sample, to_row
from fabrika.schemas.general import GeneralTeacherRow
from fabrika.schemas.ids import stable_id

EXPERT: Literal["general"] = "general"
#: The answer-selection gates apply to SFT exports only: they never drop a row at run time, so the scorers of
#: general.samples (language, length) score every answer and a refilter can widen the selection offline.
SFT = ("sft",)




class GeneralSamplesConfig(StageConfig):
    """``general.samples``: SFT rows from scored teacher answers."""


@register_stage
class GeneralSamplesStage(Stage[GeneralSamplesConfig]):
    """One SFT row per usable, RM-scored teacher answer (ranked by score within its prompt)."""

    kind = "general.samples"
    writes = cols.SAMPLES
    reads = (cols.PROMPT, cols.ANSWERS, cols.RM_SCORES, cols.REF_LENGTH,
             *(c.optional() for c in cols.TEACHER if c.name not in ("prompt", "teacher_answers", "ref_length")))

    @classmethod
    def contract(cls, config: GeneralSamplesConfig) -> Contract:
        return Contract(cls.reads, cls.writes, hints={"answer_rm_scores": cols.RM_HINT})
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        r = GeneralTeacherRow.of(row)
        if r.answer_rm_scores is None:
            return [rejected(stable_id(r.id, prefix="gs-"), "unscored: no general.rm scores for this prompt; "
                             "add a general.rm stage with input: the general.teacher stage")]
        scored = [(a, s) for a, s in zip(r.teacher_answers, r.answer_rm_scores, strict=True)
                  if a.usable and s is not None]
        if not scored:
            return [rejected(stable_id(r.id, prefix="gs-"), "no_scored_answer: every RM score failed")]
        ranked = sorted(scored, key=lambda pair: (-pair[1], pair[0].index))
        l0 = r.l0()
        out = []
        for rank, (answer, score) in enumerate(ranked):
            sample = Sample(id=stable_id(r.id, answer.index, prefix="gs-"), expert=EXPERT,
                            lang=r.lang or "und", prompt=r.prompt, target_type="text",
                            completion=[Message(role="assistant", content=answer.text)],
                            meta={"prompt_id": r.prompt_id, "teacher_row": r.id, "answer_index": answer.index,
                                  "service": r.service, "task": r.task})
            length = answer.length
            out.append(ok(sample.id, **{k: v for k, v in to_row(sample).items() if k != "id"},
                          teacher_rm_score=float(score), teacher_rm_rank=rank, answer_length=length,
                          ref_length=l0, length_ratio=length / l0 if l0 and length is not None else None,
                          length_unit=r.length_unit, rm_id=r.rm_id,
                          template_id=r.template_id, template_rank=r.template_rank))
        return out


class GeneralGrpoConfig(StageConfig):
    """``general.grpo``: GRPO prompt rows with L0 and the RM id."""


@register_stage
class GeneralGrpoStage(Stage[GeneralGrpoConfig]):
    """One prompt-only GRPO row per prompt with a usable L0."""

    kind = "general.grpo"
    reads = (cols.PROMPT, cols.REF_LENGTH, *(c.optional() for c in cols.TEACHER if c.name not in ("prompt", "ref_length")),
             Column("rm_id", str, required=False), Column("teacher_rm_mean", float, required=False))
    writes = cols.GRPO
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        r = GeneralTeacherRow.of(row)
        sample = Sample(id=stable_id(r.id, prefix="gg-"), expert=EXPERT, lang=r.lang or "und",
                        prompt=r.prompt, completion=[], meta={"prompt_id": r.prompt_id, "teacher_row": r.id})
        return [ok(sample.id, **{k: v for k, v in to_row(sample).items() if k != "id"},
                   ref_length=r.l0(), length_unit=r.length_unit, rm_id=r.rm_id, teacher_rm_mean=r.teacher_rm_mean,
                   teacher_usable=r.teacher_usable, template_id=r.template_id, template_rank=r.template_rank)]



class GeneralGate(BaseModel):
    """``filters.general``: which general-chat rows a dataset keeps."""

    model_config = ConfigDict(extra="forbid")

    min_usable_answers: int = Field(default=1, ge=1, description="Teacher answers L0 must rest on (teacher rows "
                                    "and the GRPO rows built from them).")
    max_per_template: int | None = Field(default=None, ge=1, description="Prompts kept per template "
                                         "(general.prompts with templates: true); None = no cap.")
    min_rm_score: float | None = Field(default=None, description="RM score floor of an SFT answer; None = none.")
    sft_top_k: int | None = Field(default=1, ge=1, description="SFT answers kept per prompt, best first; "
                                  "None = every answer that passes the floor and the band.")
    min_length_ratio: float | None = Field(default=None, ge=0, description="Lowest answer length / L0 of an SFT row.")
    max_length_ratio: float | None = Field(default=None, gt=0, description="Highest answer length / L0 of an SFT row.")


def _general(p: GeneralGate) -> list[GatePredicate]:
    preds = [GatePredicate("general.min_usable_answers", pl.col("teacher_usable") >= p.min_usable_answers,
                           ("teacher_usable",))]
    if p.max_per_template is not None:
        preds.append(GatePredicate("general.max_per_template", pl.col("template_rank") < p.max_per_template,
                                   ("template_rank",), keep_null=True))
    if p.min_rm_score is not None:
        preds.append(GatePredicate("general.min_rm_score", pl.col("teacher_rm_score") >= p.min_rm_score,
                                   ("teacher_rm_score",), only_for=SFT))
    if p.sft_top_k is not None:
        preds.append(GatePredicate("general.sft_top_k", pl.col("teacher_rm_rank") < p.sft_top_k,
                                   ("teacher_rm_rank",), only_for=SFT))
    if p.min_length_ratio is not None:
        preds.append(GatePredicate("general.min_length_ratio", pl.col("length_ratio") >= p.min_length_ratio,
                                   ("length_ratio",), only_for=SFT))
    if p.max_length_ratio is not None:
        preds.append(GatePredicate("general.max_length_ratio", pl.col("length_ratio") <= p.max_length_ratio,
                                   ("length_ratio",), only_for=SFT))
    return preds


register_gate_group("general", GeneralGate, _general)
