"""``if.backtranslation``: does the verifier check what the constraint says? (AutoIF back-translation)

An annotating scorer over ``if.verifiers`` (after ``if.consistency``): the LLM turns
up to ``max_functions`` surviving functions back into instructions, and the
configured similarity backend (:mod:`fabrika.filters.similarity`) scores each
against the original constraint. All values and min/mean are stored; the
``backtranslation`` gate group applies ``min_similarity`` at read time.
"""

from __future__ import annotations

import statistics
from typing import Any, ClassVar

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

import fabrika.generators.instruct.prompts as prompts
from fabrika.filters.similarity import SimilarityConfig, build_similarity
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.generators.instruct.verifiers import consistency_before, current_min_accuracy, surviving_functions
from fabrika.llm.rejections import TRUNCATED, llm_error_reason
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.rows import dumps
from fabrika.textutil.answers import is_failure, parse_instruction
from fabrika.textutil.lang import check_russian


class BacktranslationConfig(StageConfig):
    """Config of ``if.backtranslation`` (the threshold lives in ``filters.backtranslation``)."""

    max_functions: int = Field(default=3, ge=1, le=16, description="Surviving functions (best first) to back-translate.")
    similarity: SimilarityConfig = Field(default_factory=SimilarityConfig,
                                         description="Similarity backend and its calibration.")
    model: str | None = Field(default=None, description="Model name (None: the engine default).")


@register_stage
class BacktranslationStage(Stage[BacktranslationConfig]):
    """Per constraint: back-translate the best functions, store similarity to the original."""

    kind = "if.backtranslation"
    #: the prompts it renders (their text is in its fingerprint: an edit redoes it)
    prompt_templates: ClassVar[tuple[Any, ...]] = (prompts.CATALOGUE.select("backtranslate"),)
    annotates: ClassVar[bool] = True

    @classmethod
    def check_config(cls, config: BacktranslationConfig, pipeline: Any) -> list[tuple[str, str]]:
        return consistency_before(config, pipeline)

    async def setup(self) -> None:
        sim_cfg = self.config.similarity
        key = f"similarity:{sim_cfg.model_dump_json()}"
        self.similarity = self.ctx.resource(key, lambda: build_similarity(sim_cfg, self.ctx.llm))
        self.min_accuracy = current_min_accuracy(self.ctx)

    async def process(self, row: Row) -> list[Row]:
        rid = str(row["id"])
        funcs = surviving_functions(row.get("functions"), self.min_accuracy, self.config.max_functions)
        if not funcs:
            return [rejected(rid, "no_surviving_function: nothing to back-translate", bt_backend=self.similarity.name)]
        reqs = [prompts.backtranslate_request(f["code"], model=self.config.model) for f in funcs]
        instructions: list[dict] = []
        problems: list[dict] = []
        for f, resp in zip(funcs, await self.ctx.llm.complete(reqs)):
            if resp.error is not None:
                problems.append({"sample_index": f["sample_index"], "reason": llm_error_reason(resp.error)})
                continue
            text = parse_instruction(resp.text)
            reason = str(text) if is_failure(text) else check_russian(str(text))
            if reason is None and resp.choices and resp.choices[0].truncated:
                reason = TRUNCATED
            if reason is not None:
                problems.append({"sample_index": f["sample_index"], "reason": reason})
                continue
            instructions.append({"sample_index": f["sample_index"], "text": str(text)})
        sims = await self.similarity.pairs([(row["text"], i["text"]) for i in instructions])
        for i, s in zip(instructions, sims):
            i["similarity"] = s
        cols = {
            "bt_instructions": dumps(instructions),
            "bt_rejections": dumps(problems),
            "bt_similarities": dumps(sims),
            "bt_min_similarity": min(sims) if sims else None,
            "bt_mean_similarity": round(statistics.fmean(sims), 4) if sims else None,
            "bt_backend": self.similarity.name,
        }
        if not sims:
            return [rejected(rid, "no_backtranslation: " + "; ".join(p["reason"] for p in problems), **cols)]
        return [ok(rid, **cols)]


class BacktranslationParams(BaseModel):
    """``filters.backtranslation``."""

    model_config = ConfigDict(extra="forbid")

    min_similarity: float = Field(default=0.6, ge=0, le=1, description="Keep a constraint whose every "
                                  "back-translation scores at least this (calibrated for the e5 backend; see "
                                  "fabrika.filters.similarity).")


register_gate_group(
    "backtranslation", BacktranslationParams,
    # null = back-translation never ran on that id (an earlier gate dropped it): not this gate's drop
    lambda p: [GatePredicate("backtranslation_dissimilar", pl.col("bt_min_similarity") >= p.min_similarity,
                             ("bt_min_similarity",), keep_null=True)],
)
