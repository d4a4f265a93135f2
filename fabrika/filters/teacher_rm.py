"""``rm.teacher_scores``: α, the mean RM score of the teacher's K answers, per prompt.

The IF reward's RM correction (``fabrika.rewards.instruct``) compares S — the RM
score of a policy completion during GRPO — with α, the mean RM score of the
teacher's completions for the same prompt. The two are only comparable on one
scale: the *same* RM, scoring the same thing (the prompt as chat plus the visible
answer, reasoning removed, rendered by the RM's own chat template; the raw logit
of label 0, unbounded). This stage computes α that way and stores, per prompt:

* ``teacher_rm_mean`` — α, the mean over the scored answers (null when none scored);
* ``teacher_rm_k`` — how many answers were scored (of ``k`` requested; failed,
  truncated, empty or reasoning-only answers are not scored, and counted in
  ``teacher_rm_failed``);
* ``rm_id`` — the RM's id (:attr:`fabrika.rewards.rm_service.RewardModel.rm_id`; the IF
  trainer refuses data whose ``rm_id`` differs from its own RM's);
* ``teacher_rm_scores`` — the individual scores (JSON list).

It annotates any prompt table whose rows hold chat ``messages`` (``if.queries``)
or a ``prompt`` (message list or text), so a general-chat stage can reuse it for
its own baseline. The teacher answers come from the pipeline's engine (``model``,
``temperature``; cached like every request). The RM is exactly one of ``rm`` (a local
sequence-classification model directory, never downloaded), ``endpoint`` (a served RM:
vLLM ``/pooling`` or TEI-style ``/rerank``/``/predict``) or ``sim: true`` (the offline
stand-in the demo uses — never train a real model on it): the process's one
:func:`fabrika.rewards.rm_service.get_reward_model` instance, loaded once under a lock
whichever stage or thread asks first, scored in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, model_validator

from fabrika.filters.text import SampleRow
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.columns import Column
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage
from fabrika.rewards.rm_service import RewardModel, RMEndpoint, RMSpec, get_reward_model
from fabrika.schemas import Message
from fabrika.textutil.reasoning import split_reasoning

TAG = "rm.teacher"
SCORE_COLUMNS = ("teacher_rm_mean", "teacher_rm_k", "teacher_rm_failed", "rm_id", "teacher_rm_scores")
TEACHER_SCORES = (Column("teacher_rm_mean", float, required=False), Column("teacher_rm_k", int),
                  Column("teacher_rm_failed", int), Column("rm_id", str), Column("teacher_rm_scores", list[float]))


class RMChoiceConfig(StageConfig):
    """A stage that scores with a reward model: exactly one of ``rm``, ``endpoint``, ``sim``."""

    rm: Path | None = Field(default=None, description="Local sequence-classification RM directory (relative to the "
                            "config file): the SAME RM the GRPO trainer's rm_path points at.")
    endpoint: RMEndpoint | None = Field(default=None, description="A served RM instead of a local one (vLLM /pooling "
                                        "or TEI-style /rerank, /predict); train with the same served model.")
    sim: bool = Field(default=False, description="The offline deterministic stand-in RM (rm_id sim@v1; demo and tests "
                      "only, train with rm_path: sim — never a real model).")
    batch_size: int = Field(default=8, ge=1, description="RM batch size (local RM).")

    @model_validator(mode="after")
    def _one_scorer(self) -> "RMChoiceConfig":
        chosen = [n for n, v in (("rm", self.rm), ("endpoint", self.endpoint), ("sim", self.sim or None)) if v]
        if len(chosen) != 1:
            raise ValueError(f"{self.kind} needs exactly one of rm, endpoint, sim: true; got {chosen or 'none'}")
        return self

    def rm_spec(self, pipeline: Any = None) -> RMSpec:
        """The RM to ask :func:`get_reward_model` for (a local path resolved against the config file)."""
        path = self.rm
        if path is not None and pipeline is not None:
            path = pipeline.resolve_path(path)
        return RMSpec(path=path, endpoint=self.endpoint, sim=self.sim, batch_size=self.batch_size)


def stage_reward_model(config: RMChoiceConfig, ctx: Any) -> RewardModel:
    """The process's one RM for a stage's config (shared by every stage and thread that names it)."""
    return get_reward_model(config.rm_spec(getattr(ctx, "pipeline", None)))


#: A local RM directory (``rm``) is an input file of every stage that scores with it (its config and weights).
RM_DIR = InputFile("rm", "reward model directory", format="directory")


class TeacherScoresConfig(RMChoiceConfig):
    """``rm.teacher_scores``: the teacher's K answers per prompt, scored by the training RM."""

    k: int = Field(default=8, ge=1, le=64, description="Teacher answers per prompt (the reference recipe: 8).")
    model: str | None = Field(default=None, description="Teacher model at the backend; None = the engine default.")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Teacher sampling temperature.")
    max_tokens: int | None = Field(default=None, ge=1, description="Token limit per answer (None: server default).")


def prompt_messages(row: Row) -> list[dict[str, Any]]:
    """The prompt as wire chat messages: ``messages`` (if.queries) or ``prompt`` (samples, generic prompts)."""
    from fabrika.filters.difficulty import wire_messages

    sample = SampleRow.of(row)
    return wire_messages(sample.messages if sample.messages is not None else sample.prompt)


def teacher_answers(responses: list[Any]) -> tuple[list[str], int]:
    """The visible answers of the usable responses, and how many were unusable."""
    answers = []
    for resp in responses:
        choice = resp.choices[0] if resp.ok and resp.choices else None
        if choice is None or choice.truncated:
            continue
        split = split_reasoning(choice.content, choice.reasoning)
        if split.complete and split.answer:
            answers.append(split.answer)
    return answers, len(responses) - len(answers)


def summarise(scores: list[float], failed: int, rm_id: str) -> dict[str, Any]:
    """The stored columns for one prompt (α null when nothing was scored; a NaN score is a failure)."""
    good = [float(s) for s in scores if not math.isnan(float(s))]
    failed += len(scores) - len(good)
    return {"teacher_rm_mean": sum(good) / len(good) if good else None, "teacher_rm_k": len(good),
            "teacher_rm_failed": failed, "rm_id": rm_id, "teacher_rm_scores": json.dumps(good)}


@register_stage
class TeacherScoresStage(Stage[TeacherScoresConfig]):
    """Annotating stage over a prompt table: α per prompt under the training RM."""

    kind = "rm.teacher_scores"
    reads = (Column("messages", list[Message], alternatives=("prompt",), doc="the prompt (if.queries) or a Sample's"),)
    writes = TEACHER_SCORES
    input_files = (RM_DIR,)
    annotates: ClassVar[bool] = True

    async def setup(self) -> None:
        self.rm = stage_reward_model(self.config, self.ctx)
        self.rm_id = await asyncio.to_thread(lambda: self.rm.rm_id)  # hashes a local model's weights once

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        messages = prompt_messages(row)
        reqs = [ChatRequest(messages=tuple(messages), model=cfg.model, temperature=cfg.temperature,
                            max_tokens=cfg.max_tokens, sample_index=i, tag=TAG, meta={"id": SampleRow.of(row).id})
                for i in range(cfg.k)]
        answers, failed = teacher_answers(list(await self.ctx.llm.complete(reqs)))
        scores: list[float] = []
        if answers:
            completions = [[{"role": "assistant", "content": a}] for a in answers]
            scores = await asyncio.to_thread(self.rm, [messages] * len(answers), completions)
        return [ok(self.item_id(row), **summarise(list(scores), failed, self.rm_id))]
