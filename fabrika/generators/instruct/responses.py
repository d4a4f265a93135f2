"""``if.responses``, ``if.samples`` and ``if.grpo``: answers, their verification, and the outputs.

``if.responses`` samples K answers per prompt and scores each with every runnable
verifier of its constraint (sandbox; stored with the verifier's accuracy so the
``consistency`` gate can recompute "passes every surviving verifier" for any
threshold via ``max_failed_verifier_accuracy``) and, for library constraints, with
the trusted library verifier (``if_library_pass``). An optional LLM judge writes
``if_quality_score`` (0–10). ``if.samples`` turns kept responses into SFT
:class:`~fabrika.schemas.Sample` rows; ``if.grpo`` turns prompts into GRPO rows
whose ``ground_truth`` carries what the IF reward needs. Both carry the upstream
score columns, so ``fabrika refilter`` over the dataset changes the output.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

import fabrika.generators.instruct.prompts as prompts
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.generators.instruct.queries import CARRIED_SCORES
from fabrika.generators.instruct.verifiers import current_min_accuracy, get_sandbox
from fabrika.llm.rejections import answer_problem, llm_error_reason
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas import Message, Sample, stable_id, to_row
from fabrika.schemas.instruct import IFConstraintRef, IFGroundTruth, IFVerifierRef
from fabrika.schemas.rows import dumps
from fabrika.textutil.answers import parse_score
from fabrika.textutil.lang import check_russian
from fabrika.textutil.reasoning import split_reasoning

PROMPT_COLS = ("constraint_id", "query_id", "query", "placement", "messages", "constraints", "library_constraints")
LANGUAGE_FAMILY = "ru.language."
RESPONSE_SCORES = ("max_failed_verifier_accuracy", "n_verifiers_passed", "if_library_pass", "if_quality_score")


class ResponsesConfig(StageConfig):
    """Config of ``if.responses``."""

    k: int = Field(default=2, ge=1, le=64, description="Responses sampled per prompt.")
    model: str | None = Field(default=None, description="Responder model (None: the engine default).")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(default=None, ge=1, description="Token limit per response (None: server default).")
    judge: bool = Field(default=False, description="Also ask an LLM judge for a 0–10 quality score (gate: "
                        "filters.if_response.min_quality).")
    judge_model: str | None = Field(default=None, description="Judge model (None: the engine default).")
    timeout_s: float | None = Field(default=None, gt=0, le=60, description="Sandbox budget per verifier call "
                                    "(None: the pipeline's sandbox.timeout_s).")
    check_language: bool = Field(default=True, description="Reject responses that are not Russian (skipped when a "
                                 "library ru.language.* constraint sets the language).")


@register_stage
class ResponsesStage(Stage[ResponsesConfig]):
    """Per prompt: K responses, each verified (sandbox + trusted library) and optionally judged."""

    kind = "if.responses"
    #: the prompts it renders (their text is in its fingerprint: an edit redoes it)
    prompt_templates: ClassVar[tuple[Any, ...]] = (prompts.CATALOGUE.select("respond", "judge_quality"),)
    uses_sandbox: ClassVar[bool] = True  # runs LLM-written code: fail-closed isolation check

    async def setup(self) -> None:
        self.pool = get_sandbox(self.ctx, self.config.timeout_s)
        report = getattr(self.ctx, "report", None)
        if callable(report):
            report("sandbox_isolation", getattr(self.pool, "isolation", "unknown"))

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        pid = str(row["id"])
        base = {"prompt_id": pid, **{k: row.get(k) for k in PROMPT_COLS}, **{k: row.get(k) for k in CARRIED_SCORES}}
        messages = json.loads(row["messages"])
        reqs = [prompts.respond_request(messages, sample_index=i, model=cfg.model, temperature=cfg.temperature,
                                        max_tokens=cfg.max_tokens) for i in range(cfg.k)]
        out: list[Row] = []
        good: list[tuple[int, str]] = []
        library = [(cid, params) for cid, params in json.loads(row.get("library_constraints") or "[]")]
        # a library constraint may itself ask for another language (ru.language.*): then it decides
        check_language = cfg.check_language and not any(cid.startswith(LANGUAGE_FAMILY) for cid, _ in library)
        for i, resp in enumerate(await self.ctx.llm.complete(reqs)):
            rid = stable_id(pid, "response", i, prefix="ifr-")
            empty = {"response": None, "sample_index": i, **base}
            if (problem := answer_problem(resp)) is not None:
                out.append(rejected(rid, problem, **empty))
            elif not (split := split_reasoning(resp.text, resp.choices[0].reasoning)).complete:
                out.append(rejected(rid, "no_answer: reasoning never closed (cut off while thinking)", **empty))
            elif not split.answer:
                out.append(rejected(rid, "empty_answer" + (": reasoning only" if split.reasoning else ""), **empty))
            elif check_language and (why := check_russian(split.answer)):
                out.append(rejected(rid, why, **{**empty, "response": split.answer}))
            else:
                # verifiers, the library, the judge and the SFT target all see the answer, never the reasoning
                good.append((i, split.answer))
        if not good:
            return out
        verifiers = json.loads(row.get("verifiers") or "[]")
        texts = [t for _, t in good]
        verdicts = await asyncio.gather(*(self.pool.run(v["code"], texts) for v in verifiers))
        lib_results = [_library_verdicts(t, library) for t in texts]
        scores: list[float | None] = [None] * len(good)
        judge_notes: list[str | None] = [None] * len(good)
        if cfg.judge:
            instr = [c["text"] for c in json.loads(row.get("constraints") or "[]")]
            jreqs = [prompts.judge_quality_request(row.get("query") or "", instr, t, model=cfg.judge_model) for t in texts]
            for j, jr in enumerate(await self.ctx.llm.complete(jreqs)):
                if jr.error is not None:
                    judge_notes[j] = llm_error_reason(jr.error)
                    continue
                s = parse_score(jr.text)
                if isinstance(s, float):
                    scores[j] = s
                else:
                    judge_notes[j] = str(s)
        for j, (i, text) in enumerate(good):
            results = [{"sample_index": v["sample_index"], "accuracy": v["accuracy"], "status": vs[j].status,
                        "passed": vs[j].passed} for v, vs in zip(verifiers, verdicts)]
            failed = [r["accuracy"] for r in results if not r["passed"]]
            out.append(ok(stable_id(pid, "response", i, prefix="ifr-"), response=text, sample_index=i, **base,
                          verifier_results=dumps(results), library_results=dumps(lib_results[j]),
                          max_failed_verifier_accuracy=max(failed) if failed else -1.0,
                          n_verifiers_passed=sum(r["passed"] for r in results),
                          if_library_pass=all(lib_results[j]) if library else None,
                          if_quality_score=scores[j], judge_note=judge_notes[j]))
        return out


def _library_verdicts(text: str, library: list[tuple[str, dict[str, Any]]]) -> list[bool]:
    if not library:
        return []
    from fabrika.constraints import verify_all

    return verify_all(text, library)


class ResponseParams(BaseModel):
    """``filters.if_response`` (the verifier check is ``filters.consistency.min_function_accuracy``)."""

    model_config = ConfigDict(extra="forbid")

    require_library_pass: bool = Field(default=True, description="Drop responses the trusted library verifier "
                                       "rejects (library-derived constraints only).")
    min_quality: float = Field(default=0.0, ge=0, le=10, description="Minimum LLM-judge quality score; 0 disables "
                               "the gate (rows without a score are kept then).")


def response_predicates(p: ResponseParams) -> list[GatePredicate]:
    preds = [GatePredicate("if_response_low_quality", pl.col("if_quality_score") >= p.min_quality, ("if_quality_score",),
                           keep_null=p.min_quality <= 0)]
    if p.require_library_pass:
        preds.insert(0, GatePredicate("if_response_library_failed", pl.col("if_library_pass"), ("if_library_pass",),
                                      keep_null=True))
    return preds


register_gate_group("if_response", ResponseParams, response_predicates)


class SamplesConfig(StageConfig):
    """Config of ``if.samples`` (SFT rows from kept responses)."""


@register_stage
class SamplesStage(Stage[SamplesConfig]):
    """Per kept response: one SFT Sample (expert 'if') plus the re-filterable score columns."""

    kind = "if.samples"
    prompt_templates: ClassVar[tuple[Any, ...]] = ()  # renders no prompt
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        prompt = [Message(**m) for m in json.loads(row["messages"])]
        constraints = json.loads(row.get("constraints") or "[]")
        sample = Sample(
            id=stable_id(row["id"], prefix="ifs-"), expert="if", lang="ru", prompt=prompt,
            completion=[Message(role="assistant", content=row["response"], train=True)], target_type="text",
            ground_truth=IFGroundTruth(constraints=[_gt_constraint(c) for c in constraints]).model_dump(),
            meta={"constraint_id": row.get("constraint_id"), "prompt_id": row.get("prompt_id"),
                  "response_id": row["id"], "query_id": row.get("query_id"), "placement": row.get("placement")},
        )
        scores = {k: row.get(k) for k in (*CARRIED_SCORES, *RESPONSE_SCORES)}
        return [ok(**to_row(sample), placement=row.get("placement"), **scores)]


def _gt_constraint(c: dict[str, Any]) -> IFConstraintRef:
    return IFConstraintRef(id=c["id"], text=c["text"], library_id=c.get("library_id"), params=c.get("params") or {})


class GrpoConfig(StageConfig):
    """Config of ``if.grpo``: ``input: <if.queries stage>``.

    α for the IF reward's RM correction is not computed here: an ``rm.teacher_scores``
    stage annotating the same queries table writes ``teacher_rm_mean``, ``teacher_rm_k``
    and ``rm_id`` (the mean score of the teacher's K answers under the training RM),
    and this stage copies them into its rows. Without that stage the columns are null
    and GRPO with the RM correction refuses to start (the reward needs α on S's scale).
    """


TEACHER_COLUMNS = ("teacher_rm_mean", "teacher_rm_k", "rm_id")


@register_stage
class GrpoStage(Stage[GrpoConfig]):
    """Per prompt: a GRPO row; ``ground_truth`` = constraints (library ids + params) and surviving verifier code."""

    kind = "if.grpo"
    prompt_templates: ClassVar[tuple[Any, ...]] = ()  # renders no prompt
    calls_llm: ClassVar[bool] = False

    @classmethod
    def check_config(cls, config: GrpoConfig, pipeline: Any) -> list[tuple[str, str]]:
        inputs = [config.input] if isinstance(config.input, str) else list(config.input or [])
        if len(inputs) != 1:
            return [("input", f"if.grpo takes one input (the if.queries stage), got {inputs!r}; α comes from an "
                              "rm.teacher_scores stage on that table (the judge score is not on the RM's scale)")]
        return []

    async def setup(self) -> None:
        self.min_accuracy = current_min_accuracy(self.ctx)

    async def process(self, row: Row) -> list[Row]:
        verifiers = [v for v in json.loads(row.get("verifiers") or "[]") if v["accuracy"] >= self.min_accuracy]
        gt = IFGroundTruth(constraints=[_gt_constraint(c) for c in json.loads(row.get("constraints") or "[]")],
                           verifiers=[IFVerifierRef(code=v["code"], accuracy=v["accuracy"]) for v in verifiers],
                           min_function_accuracy=self.min_accuracy).model_dump()
        sample = Sample(id=stable_id(row["id"], prefix="ifg-"), expert="if", lang="ru",
                        prompt=[Message(**m) for m in json.loads(row["messages"])], completion=[],
                        ground_truth=gt, meta={"constraint_id": row.get("constraint_id"), "prompt_id": row["id"],
                                               "placement": row.get("placement")})
        teacher = {c: row.get(c) for c in TEACHER_COLUMNS}
        return [ok(**to_row(sample), placement=row.get("placement"), **teacher,
                   **{k: row.get(k) for k in CARRIED_SCORES})]
