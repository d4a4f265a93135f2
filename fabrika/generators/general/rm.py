"""``general.rm``: RM scores of the stored teacher answers (annotates ``general.teacher``).

The same machinery as ``rm.teacher_scores`` (:mod:`fabrika.filters.teacher_rm`): the
same scorer class (:class:`fabrika.rewards.general.SequenceClassifierRM`, one instance
per run shared through the ``rm:<path>`` resource), the same input (prompt as chat +
the visible answer, rendered by the RM's chat template), the same id
(:func:`~fabrika.rewards.general.rm_identity`) and the same summary columns
(``teacher_rm_mean``, ``teacher_rm_k``, ``teacher_rm_failed``, ``rm_id``,
``teacher_rm_scores``). It adds ``answer_rm_scores``: one score per stored answer
(null for an unusable one), which ``general.samples`` ranks.

Scorers (exactly one):

* ``rm``: a local sequence-classification model directory (never downloaded);
* ``endpoint``: a served reward model behind vLLM's ``/pooling`` API
  (``{model, messages}`` → the first pooled value); ``rm_id`` is ``<model>@<base_url>``
  because remote weights cannot be hashed — train with the same served model;
* ``sim: true``: a deterministic offline stand-in (a hash of prompt and answer mapped to
  [-2, 2]), ``rm_id`` ``sim@v1``. Like the ``sim`` LLM backend it only exercises the
  pipeline; never train on its scores.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from pathlib import Path
from typing import Any, ClassVar, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

import fabrika.generators.general.columns as cols
from fabrika.filters.teacher_rm import summarise
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.general import TeacherAnswersRow

SIM_RM_ID = "sim@v1"


class RMEndpoint(BaseModel):
    """A served reward model (vLLM ``--task reward``/``classify``; the ``/pooling`` API)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="Server root, e.g. http://127.0.0.1:8001 (without /v1).")
    model: str = Field(description="Served model name.")
    api_key: str | None = Field(default=None, description="Bearer token, if the server needs one.", repr=False)
    timeout_s: float = Field(default=60.0, gt=0, description="Per-request timeout.")


class GeneralRMConfig(StageConfig):
    """``general.rm``: which RM scores the teacher answers."""

    rm: Path | None = Field(default=None, description="Local sequence-classification RM directory: the SAME RM the "
                            "GRPO trainer's rm_path points at.")
    endpoint: RMEndpoint | None = Field(default=None, description="A served RM instead of a local one.")
    sim: bool = Field(default=False, description="Offline deterministic stand-in (demo/tests only).")
    batch_size: int = Field(default=8, ge=1, description="RM batch size (local RM).")

    @model_validator(mode="after")
    def _one_scorer(self) -> "GeneralRMConfig":
        chosen = [n for n, v in (("rm", self.rm), ("endpoint", self.endpoint), ("sim", self.sim or None)) if v]
        if len(chosen) != 1:
            raise ValueError(f"general.rm needs exactly one of rm, endpoint, sim: true; got {chosen or 'none'}")
        return self


def sim_scores(prompts: Sequence[Any], completions: Sequence[Any]) -> list[float]:
    """Deterministic pseudo-scores in [-2, 2] from the text (offline stand-in for an RM)."""
    from fabrika.textutil.reasoning import answer_text

    out = []
    for p, c in zip(prompts, completions, strict=True):
        digest = hashlib.sha256(json.dumps([p, answer_text(c)], ensure_ascii=False).encode()).digest()
        out.append(round(int.from_bytes(digest[:8], "big") / 2**64 * 4 - 2, 6))
    return out


class EndpointRM:
    """``(prompts, completions) -> scores`` over vLLM's ``/pooling`` API; a failed request scores NaN."""

    def __init__(self, endpoint: RMEndpoint) -> None:
        self.endpoint = endpoint
        self.rm_id = f"{endpoint.model}@{endpoint.base_url.rstrip('/')}"

    async def score(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[float]:
        import aiohttp

        from fabrika.textutil.reasoning import answer_text

        ep = self.endpoint
        headers = {"Authorization": f"Bearer {ep.api_key}"} if ep.api_key else {}
        timeout = aiohttp.ClientTimeout(total=ep.timeout_s)
        async def one(session: aiohttp.ClientSession, prompt: Any, completion: Any) -> float:
            body = {"model": ep.model, "messages": list(prompt) + [
                {"role": "assistant", "content": answer_text(completion)}]}
            try:
                async with session.post(f"{ep.base_url.rstrip('/')}/pooling", json=body) as resp:
                    data = await resp.json(content_type=None) if resp.status == 200 else None
                value: Any = data["data"][0]["data"] if data else math.nan
                while isinstance(value, list):
                    value = value[0] if value else math.nan
                return float(value)
            except (TimeoutError, aiohttp.ClientError, KeyError, IndexError, TypeError, ValueError):
                return math.nan  # counted in teacher_rm_failed, never a made-up score

        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            return list(await asyncio.gather(*(one(session, p, c)
                                               for p, c in zip(prompts, completions, strict=True))))


@register_stage
class GeneralRMStage(Stage[GeneralRMConfig]):
    """Annotating stage over ``general.teacher``: one RM score per usable teacher answer."""

    kind = "general.rm"
    reads = (cols.PROMPT, cols.ANSWERS)
    writes = cols.RM
    calls_llm: ClassVar[bool] = False
    annotates: ClassVar[bool] = True

    async def setup(self) -> None:
        cfg = self.config
        self.endpoint_rm: EndpointRM | None = None
        self.local_rm: Any = None
        if cfg.sim:
            self.rm_id = SIM_RM_ID
        elif cfg.endpoint is not None:
            self.endpoint_rm = EndpointRM(cfg.endpoint)
            self.rm_id = self.endpoint_rm.rm_id
        else:
            from fabrika.rewards.general import SequenceClassifierRM, rm_identity

            pipeline = getattr(self.ctx, "pipeline", None)
            assert cfg.rm is not None
            path = pipeline.resolve_path(cfg.rm) if pipeline is not None else cfg.rm
            self.rm_id = rm_identity(path)
            # the same resource key as rm.teacher_scores: one loaded RM per run
            self.local_rm = self.ctx.resource(f"rm:{path}", lambda: SequenceClassifierRM(path, batch_size=cfg.batch_size))

    async def _score(self, prompts: list[Any], completions: list[Any]) -> list[float]:
        if self.config.sim:
            return sim_scores(prompts, completions)
        if self.endpoint_rm is not None:
            return await self.endpoint_rm.score(prompts, completions)
        return list(await asyncio.to_thread(self.local_rm, prompts, completions))

    async def process(self, row: Row) -> list[Row]:
        from fabrika.filters.difficulty import wire_messages

        prompt = wire_messages(row.get("prompt"))
        t = TeacherAnswersRow.of(row)
        answers = t.teacher_answers
        usable = [a for a in answers if a.usable]
        if not usable:
            return [rejected(t.id, "no_usable_teacher_answer", rm_id=self.rm_id)]
        scores = await self._score([prompt] * len(usable), [[{"role": "assistant", "content": a.text}]
                                                             for a in usable])
        by_index = {a.index: float(s) for a, s in zip(usable, scores, strict=True)}
        aligned = [None if a.index not in by_index or math.isnan(by_index[a.index]) else by_index[a.index]
                   for a in answers]
        summary = summarise(list(scores), len(answers) - len(usable), self.rm_id)
        return [ok(t.id, **summary, answer_rm_scores=json.dumps(aligned))]
