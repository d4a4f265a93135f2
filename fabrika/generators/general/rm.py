"""``general.rm``: RM scores of the stored teacher answers (annotates ``general.teacher``).

The same machinery as ``rm.teacher_scores`` (:mod:`fabrika.filters.teacher_rm`): the
same config fields (exactly one of ``rm``, ``endpoint``, ``sim``), the same process-wide
reward model (:func:`fabrika.rewards.rm_service.get_reward_model`: one instance, loaded
once under a lock, whichever stage or thread asks first), the same input (prompt as chat
+ the visible answer), the same id (``rm_id``) and the same summary columns
(``teacher_rm_mean``, ``teacher_rm_k``, ``teacher_rm_failed``, ``rm_id``,
``teacher_rm_scores``). It adds ``answer_rm_scores``: one score per stored answer (null
for an unusable one), which ``general.samples`` ranks.

Scorers (exactly one):

* ``rm``: a local sequence-classification model directory (never downloaded);
* ``endpoint``: a served reward model behind vLLM's ``/pooling`` API (or TEI-style
  ``/rerank``/``/predict``); ``rm_id`` is ``<model>@<base_url>`` because remote weights
  cannot be hashed — train with the same served model;
* ``sim: true``: a deterministic offline stand-in (a hash of prompt and answer mapped to
  [-2, 2]), ``rm_id`` ``sim@v1``. Like the ``sim`` LLM backend it only exercises the
  pipeline; never train a real model on its scores.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import ClassVar

import fabrika.generators.general.columns as cols
from fabrika.filters.teacher_rm import RM_DIR, RMChoiceConfig, stage_reward_model, summarise
from fabrika.pipeline.stage import Row, Stage, ok, register_stage, rejected
from fabrika.rewards.rm_service import SIM_RM_ID, RMEndpoint, sim_scores
from fabrika.schemas.general import TeacherAnswersRow

__all__ = ["SIM_RM_ID", "GeneralRMConfig", "GeneralRMStage", "RMEndpoint", "sim_scores"]


class GeneralRMConfig(RMChoiceConfig):
    """``general.rm``: which RM scores the teacher answers."""


@register_stage
class GeneralRMStage(Stage[GeneralRMConfig]):
    """Annotating stage over ``general.teacher``: one RM score per usable teacher answer."""

    kind = "general.rm"
    reads = (cols.PROMPT, cols.ANSWERS)
    writes = cols.RM
    input_files = (RM_DIR,)
    calls_llm: ClassVar[bool] = False
    annotates: ClassVar[bool] = True

    async def setup(self) -> None:
        self.rm = stage_reward_model(self.config, self.ctx)
        self.rm_id = await asyncio.to_thread(lambda: self.rm.rm_id)

    async def process(self, row: Row) -> list[Row]:
        from fabrika.filters.difficulty import wire_messages
        from fabrika.filters.text import SampleRow

        prompt = wire_messages(SampleRow.of(row).prompt)
        t = TeacherAnswersRow.of(row)
        answers = t.teacher_answers
        usable = [a for a in answers if a.usable]
        if not usable:
            return [rejected(t.id, "no_usable_teacher_answer", rm_id=self.rm_id)]
        scores = await asyncio.to_thread(self.rm, [prompt] * len(usable),
                                         [[{"role": "assistant", "content": a.text}] for a in usable])
        by_index = {a.index: float(s) for a, s in zip(usable, scores, strict=True)}
        aligned = [None if a.index not in by_index or math.isnan(by_index[a.index]) else by_index[a.index]
                   for a in answers]
        summary = summarise(list(scores), len(answers) - len(usable), self.rm_id)
        return [ok(t.id, **summary, answer_rm_scores=json.dumps(aligned))]
