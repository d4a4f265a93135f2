"""``if.multi.responses``, ``if.multi.samples``, ``if.multi.grpo``: answers to multi-constraint prompts.

Every answer is checked against every constraint of its prompt: library constraints with the
trusted verifier (strict and IFEval-style loose), LLM-written ones with their kept verifiers in
the sandbox (strict: all pass; loose: more than half pass). The per-constraint results are
stored (``constraint_results``), with ``if_multi_all_pass`` / ``if_multi_all_pass_loose`` and the
ids of the failing constraints (``failed_constraints``, ``failed_constraints_loose``). The
``if_multi`` gate keeps an answer only when every constraint passes (``mode: strict`` by
default); a dropped answer names the constraints it failed. ``if.multi.samples`` makes a
sample of every ok answer and carries the same columns, so the gate acts when the dataset is
materialised and ``fabrika refilter --set filters.if_multi.mode=loose`` switches it without an LLM call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

import fabrika.generators.instruct.prompts as prompts
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.generators.instruct.responses import TEACHER_COLUMNS
from fabrika.generators.instruct.verifiers import get_sandbox
from fabrika.llm.rejections import answer_problem
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas import Message, Sample, stable_id, to_row
from fabrika.schemas.instruct import IFConstraintRef, IFGroundTruth
from fabrika.schemas.rows import dumps
from fabrika.textutil.answers import parse_score
from fabrika.textutil.lang import check_russian
from fabrika.textutil.reasoning import answer_text as strip_reasoning

TAG_MULTI_RESPOND = "if.multi.respond"
PROMPT_COLS = ("slot_id", "query_id", "query", "placement", "lang", "messages", "constraints", "library_constraints",
               "n_constraints", "n_llm_constraints")
MULTI_SCORES = ("n_constraints", "n_llm_constraints", "n_passed", "n_passed_loose", "if_multi_all_pass",
                "if_multi_all_pass_loose", "failed_constraints", "failed_constraints_loose", "if_quality_score")


class MultiResponsesConfig(StageConfig):
    """Config of ``if.multi.responses``."""

    k: int = Field(default=2, ge=1, le=64, description="Responses sampled per prompt.")
    model: str | None = Field(default=None, description="Responder model (None: the engine default).")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(default=None, ge=1, description="Token limit per response (None: server default).")
    judge: bool = Field(default=False, description="Also ask the quality judge for a 0–10 score (teacher_rm_mean "
                        "of the GRPO rows).")
    judge_model: str | None = Field(default=None, description="Judge model (None: the engine default).")
    timeout_s: float = Field(default=1.0, gt=0, le=60, description="Sandbox budget per verifier call.")
    check_language: bool = Field(default=True, description="Reject answers that are not Russian (skipped when a "
                                 "library ru.language.* constraint sets the language).")


def library_verdicts(text: str, spec: dict[str, Any]) -> tuple[bool, bool]:
    """Strict and loose verdicts of a trusted library constraint."""
    from fabrika.constraints import get

    c = get(spec["library_id"])
    return bool(c.verify(text, spec["params"])), bool(c.verify_loose(text, spec["params"]))


@register_stage
class MultiResponsesStage(Stage[MultiResponsesConfig]):
    """Per multi-constraint prompt: K answers, each with a verdict per constraint."""

    kind = "if.multi.responses"
    #: the prompts it renders (their text is in its fingerprint: an edit redoes it)
    prompt_templates: ClassVar[tuple[Any, ...]] = (prompts.CATALOGUE.select("judge_quality"),)

    async def setup(self) -> None:
        self.pool = get_sandbox(self.ctx, self.config.timeout_s)

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        pid = str(row["id"])
        base = {"prompt_id": pid, **{k: row.get(k) for k in PROMPT_COLS}}
        specs = json.loads(row.get("constraints") or "[]")
        check_language = cfg.check_language and not any(str(s.get("library_id") or "").startswith("ru.language.")
                                                        for s in specs)
        reqs = [ChatRequest(messages=tuple(json.loads(row["messages"])), model=cfg.model, temperature=cfg.temperature,
                            max_tokens=cfg.max_tokens, sample_index=i, tag=TAG_MULTI_RESPOND,
                            meta={"library": json.loads(row.get("library_constraints") or "[]")})
                for i in range(cfg.k)]
        out: list[Row] = []
        good: list[tuple[int, str]] = []
        for i, resp in enumerate(await self.ctx.llm.complete(reqs)):
            rid = stable_id(pid, "response", i, prefix="ifmr-")
            text = strip_reasoning(resp.text) if resp.ok else ""
            empty = {"response": None, "sample_index": i, **base}
            if (problem := answer_problem(resp)) is not None:
                out.append(rejected(rid, problem, **empty))
            elif not text:
                out.append(rejected(rid, "empty_answer", **empty))
            elif check_language and (why := check_russian(text)):
                out.append(rejected(rid, why, **{**empty, "response": text}))
            else:
                good.append((i, text))
        if not good:
            return out
        texts = [t for _, t in good]
        per_text: list[list[dict[str, Any]]] = [[] for _ in texts]
        llm_specs = [s for s in specs if not s.get("library_id")]
        runs = await asyncio.gather(*(asyncio.gather(*(self.pool.run(code, texts) for code in s["verifier_code"]))
                                      for s in llm_specs))
        llm_runs = dict(zip((s["id"] for s in llm_specs), runs))
        for j, text in enumerate(texts):
            for s in specs:
                if s.get("library_id"):
                    strict, loose = library_verdicts(text, s)
                    share = 1.0 if strict else 0.0
                else:
                    passes = [run[j].passed for run in llm_runs[s["id"]]]
                    strict, loose = all(passes), sum(passes) * 2 > len(passes)
                    share = round(sum(passes) / len(passes), 4) if passes else 0.0
                per_text[j].append({"id": s["id"], "source": s.get("source"), "strict": strict, "loose": loose,
                                    "pass_share": share})
        scores = await self._judge(row, texts) if cfg.judge else [None] * len(texts)
        for j, (i, text) in enumerate(good):
            res = per_text[j]
            failed = [r["id"] for r in res if not r["strict"]]
            failed_loose = [r["id"] for r in res if not r["loose"]]
            out.append(ok(stable_id(pid, "response", i, prefix="ifmr-"), response=text, sample_index=i, **base,
                          constraint_results=dumps(res), n_passed=len(res) - len(failed),
                          n_passed_loose=len(res) - len(failed_loose), if_multi_all_pass=not failed,
                          if_multi_all_pass_loose=not failed_loose, failed_constraints=dumps(failed),
                          failed_constraints_loose=dumps(failed_loose), if_quality_score=scores[j]))
        return out

    async def _judge(self, row: Row, texts: list[str]) -> list[float | None]:
        instr = [c["text"] for c in json.loads(row.get("constraints") or "[]")]
        reqs = [prompts.judge_quality_request(row.get("query") or "", instr, t, model=self.config.judge_model)
                for t in texts]
        out: list[float | None] = []
        for resp in await self.ctx.llm.complete(reqs):
            s = parse_score(strip_reasoning(resp.text)) if resp.ok else None
            out.append(s if isinstance(s, float) else None)
        return out


class MultiParams(BaseModel):
    """``filters.if_multi``: which verdict every constraint must pass."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["strict", "loose"] = Field(default="strict", description="'strict': every constraint passes its "
                                             "strict check (library verify, all kept LLM verifiers); 'loose': the "
                                             "loose check (IFEval loose, a majority of the LLM verifiers).")


def multi_predicates(p: MultiParams) -> list[GatePredicate]:
    col = "if_multi_all_pass" if p.mode == "strict" else "if_multi_all_pass_loose"
    return [GatePredicate("if_multi_failed_constraint", pl.col(col), (col,))]


register_gate_group("if_multi", MultiParams, multi_predicates)


def _gt_constraint(c: dict[str, Any]) -> IFConstraintRef:
    return IFConstraintRef(id=c["id"], text=c["text"], library_id=c.get("library_id"), params=c.get("params") or {},
                           verifier_code=c.get("verifier_code") if not c.get("library_id") else None)


class MultiSamplesConfig(StageConfig):
    """Config of ``if.multi.samples`` (SFT rows from every ok answer; the ``if_multi`` gate decides which stay)."""


@register_stage
class MultiSamplesStage(Stage[MultiSamplesConfig]):
    """Per kept answer: one SFT Sample (expert 'if') with every constraint in its ground truth."""

    kind = "if.multi.samples"
    prompt_templates: ClassVar[tuple[Any, ...]] = ()  # renders no prompt
    calls_llm: ClassVar[bool] = False

    def input_rows(self):  # noqa: ANN201 - Iterator[Row]
        """Every ok answer, passing or not: the verdict columns travel with the sample, so the ``if_multi``
        gate (strict or loose) is applied when the dataset is materialised and a refilter can switch it."""
        inputs = [self.config.input] if isinstance(self.config.input, str) else list(self.config.input or [])
        for upstream in inputs:
            for row in self.ctx.iter_rows(upstream, gated=False):
                if row.get("status") == "ok":
                    yield row

    async def process(self, row: Row) -> list[Row]:
        specs = json.loads(row.get("constraints") or "[]")
        sample = Sample(id=stable_id(row["id"], prefix="ifms-"), expert="if", lang=row.get("lang") or "ru",
                        prompt=[Message(**m) for m in json.loads(row["messages"])],
                        completion=[Message(role="assistant", content=row["response"], train=True)],
                        target_type="text",
                        ground_truth=IFGroundTruth(constraints=[_gt_constraint(c) for c in specs]).model_dump(),
                        meta={"kind": "multi", "prompt_id": row.get("prompt_id"), "response_id": row["id"],
                              "query_id": row.get("query_id"), "placement": row.get("placement")})
        return [ok(**to_row(sample), placement=row.get("placement"), constraint_results=row.get("constraint_results"),
                   **{k: row.get(k) for k in MULTI_SCORES})]


class MultiGrpoConfig(StageConfig):
    """Config of ``if.multi.grpo``: ``input: <if.multi.prompts stage>``.

    α for the IF reward's RM correction comes, as for ``if.grpo``, from an
    ``rm.teacher_scores`` stage annotating the same prompts table (the mean score of
    the teacher's K answers under the training RM, with its ``rm_id``); this stage
    copies those columns. The quality judge's 0–10 score is not on the RM's scale.
    """


@register_stage
class MultiGrpoStage(Stage[MultiGrpoConfig]):
    """Per prompt: a GRPO row whose ground truth holds every constraint (library params or verifier code)."""

    kind = "if.multi.grpo"
    prompt_templates: ClassVar[tuple[Any, ...]] = ()  # renders no prompt
    calls_llm: ClassVar[bool] = False

    @classmethod
    def check_config(cls, config: MultiGrpoConfig, pipeline: Any) -> list[tuple[str, str]]:
        inputs = [config.input] if isinstance(config.input, str) else list(config.input or [])
        if len(inputs) != 1:
            return [("input", f"if.multi.grpo takes one input (the if.multi.prompts stage), got {inputs!r}; α comes "
                              "from an rm.teacher_scores stage on that table (the judge score is not on the RM's scale)")]
        return []

    async def process(self, row: Row) -> list[Row]:
        specs = json.loads(row.get("constraints") or "[]")
        sample = Sample(id=stable_id(row["id"], prefix="ifmg-"), expert="if", lang=row.get("lang") or "ru",
                        prompt=[Message(**m) for m in json.loads(row["messages"])], completion=[],
                        ground_truth=IFGroundTruth(constraints=[_gt_constraint(c) for c in specs]).model_dump(),
                        meta={"kind": "multi", "prompt_id": row["id"], "placement": row.get("placement")})
        return [ok(**to_row(sample), placement=row.get("placement"), n_constraints=row.get("n_constraints"),
                   n_llm_constraints=row.get("n_llm_constraints"), **{c: row.get(c) for c in TEACHER_COLUMNS})]


def _register_sim() -> None:
    from fabrika.generators.instruct.sim_multi import register_sim_responders

    register_sim_responders()


_register_sim()
