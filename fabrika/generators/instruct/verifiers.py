"""``if.verifiers`` and ``if.consistency``: K LLM-written verifiers per constraint, cross-checked.

``if.verifiers`` asks K times (``sample_index`` 0..K-1) for an ``evaluate(response)``
function with 3 labelled cases. One ``ok`` row per constraint carries the parsed
answers (``verifiers`` JSON); every unusable answer is its own ``rejected`` row
with the reason (``invalid_json``, ``syntax_error``, ``llm_error`` …).

``if.consistency`` (annotating scorer) runs every function on every case of its
constraint in the sandbox (AutoIF cross-validation) and stores, per constraint:
unique functions (normalised source), unique cases, each case's support (how many
runnable functions reproduce its label), each function's accuracy on the
supported cases (``function_accuracies``, aligned with ``functions`` JSON), and
summaries. ``function_accuracies`` is a JSON list (a scalar-typed column keeps
shards with no runnable function schema-compatible); ``max_function_accuracy``
is what the gate reads. The ``consistency`` gate group applies AutoIF's thresholds at read time.
"""

from __future__ import annotations

import ast
import asyncio
import json
from typing import Any, ClassVar

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

import fabrika.generators.instruct.columns as cols
import fabrika.generators.instruct.prompts as prompts
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.columns import Column
from fabrika.pipeline.llm_stage import LLMStage
from fabrika.pipeline.stage import Row, Stage, StageConfig, carry, ok, register_stage, rejected
from fabrika.sandbox.verdict_text import clean_verdict_error
from fabrika.schemas import stable_id
from fabrika.schemas.instruct import IFConstraintRow, IFVerifierAnswersRow
from fabrika.schemas.rows import dumps
from fabrika.textutil.answers import is_failure, parse_verifier_answer

_FATAL = frozenset({"precheck", "syntax", "no_function", "memory", "crash"})
CONSTRAINT_COLS = ("text", "lang", "source", "parent_id", "family", "params")


_SOURCE, _FAMILY = Column("source", str, required=False), Column("family", str, required=False)

class VerifiersConfig(StageConfig):
    """Config of ``if.verifiers``."""

    k: int = Field(default=8, ge=1, le=64, description="Verifier answers per constraint (AutoIF default 8).")
    model: str | None = Field(default=None, description="Model name (None: the engine default).")
    temperature: float = Field(default=0.8, ge=0, le=2, description="Sampling temperature (diversity across K).")


@register_stage
class VerifiersStage(LLMStage[VerifiersConfig]):
    """Per constraint: K verifier answers → one ok row + one rejected row per bad answer."""

    kind = "if.verifiers"
    #: the prompts it renders (their text is in its fingerprint: an edit redoes it)
    prompt_templates: ClassVar[tuple[Any, ...]] = (prompts.CATALOGUE.select("verifiers"),)
    reads = cols.CONSTRAINT_READS
    writes = (Column("constraint_id", str), *cols.CONSTRAINT, Column("sample_index", int, required=False),
              cols.VERIFIER_ANSWERS, Column("n_verifiers", int))
    per_answer = True  # K independent samples: one bad answer rejects itself, not the constraint

    def pilot_stratum(self, row: Row) -> str:
        """The constraint's source and family: a library seed and an LLM-written one of another family yield
        very different shares of usable verifiers, and ``if.queries`` adds extra constraints to library ones only
        (``fabrika estimate`` samples each kind in proportion; a pilot too small for every family, by source)."""
        return f"{_SOURCE.read(row)}/{_FAMILY.read(row)}"

    def requests(self, row: Row) -> list[ChatRequest]:
        cfg = self.config
        c = IFConstraintRow.of(row)
        lang = "en" if c.lang == "en" else "ru"
        return [prompts.verifier_request(c.text, sample_index=i, model=cfg.model, temperature=cfg.temperature,
                                         meta={"constraint_id": c.id}, lang=lang) for i in range(cfg.k)]

    def parse(self, row: Row, responses: list[ChatResponse]) -> list[Row]:
        cid = str(row["id"])
        base = {"constraint_id": cid, **carry(row, CONSTRAINT_COLS)}
        parsed: list[dict[str, Any]] = []
        out: list[Row] = []
        for i, resp in enumerate(responses):
            rid = stable_id(cid, "verifier", i, prefix="ifv-")
            if (problem := self.answer_problem(resp)) is not None:
                out.append(rejected(rid, problem, **base, sample_index=i, verifiers="[]", n_verifiers=0))
                continue
            v = parse_verifier_answer(resp.text)
            if is_failure(v):
                out.append(rejected(rid, str(v), **base, sample_index=i, verifiers="[]", n_verifiers=0))
                continue
            parsed.append({"sample_index": i, "code": v.code, "cases": [c.model_dump() for c in v.test_cases]})
        cols = {**base, "sample_index": None, "verifiers": dumps(parsed), "n_verifiers": len(parsed)}
        if parsed:
            out.append(ok(cid, **cols))
        else:
            out.append(rejected(cid, f"no_valid_verifiers: 0 of {len(responses)} answers parsed", **cols))
        return out


def normalise_code(code: str) -> str:
    """Source with comments/formatting removed (``ast.unparse``): the identity of a function."""
    try:
        return ast.unparse(ast.parse(code))
    except (SyntaxError, ValueError):
        return code.strip()


def cross_validate(functions: list[str], cases: list[tuple[str, bool]],
                   verdicts: list[list[Any]]) -> dict[str, Any]:
    """AutoIF cross-validation over ``verdicts[f][c]`` (sandbox Verdicts of function f on case c).

    A function is *runnable* when every case gives a bool. A case is *supported* when at
    least one runnable function reproduces its label. A function's accuracy is its share
    of supported cases it gets right — but only if it reproduces at least one supported
    case of *each* label; otherwise it scores 0. Without that rule a constant (``return
    True``) is perfect on a constraint where only the true cases are supported: three
    such functions support the five true cases and no false one, and each scores 1.0.
    Pure: easy to test without a sandbox.
    """
    runnable = [all(v.status in ("true", "false") for v in row) for row in verdicts]
    support = [sum(1 for f, row in enumerate(verdicts) if runnable[f] and row[c].passed is label)
               for c, (_, label) in enumerate(cases)]
    supported = [c for c, s in enumerate(support) if s > 0]
    accuracies = []
    for f, row in enumerate(verdicts):
        if not runnable[f] or not supported:
            accuracies.append(0.0)
            continue
        right = [c for c in supported if row[c].passed is cases[c][1]]
        labels = {cases[c][1] for c in right}
        accuracies.append(round(len(right) / len(supported), 4) if labels == {True, False} else 0.0)
    return {"runnable": runnable, "support": support, "accuracies": accuracies, "n_supported": len(supported),
            "n_supported_true": sum(1 for c in supported if cases[c][1]),
            "n_supported_false": sum(1 for c in supported if not cases[c][1])}


def _first_error(row: list[Any]) -> str | None:
    for v in row:
        if v.status == "timeout":
            return "timeout"
        if v.status == "error":
            return clean_verdict_error(v.error_kind, v.message, 160)  # stored: no host data, paths or control chars
    return None


class ConsistencyConfig(StageConfig):
    """Config of ``if.consistency`` (sandbox settings; thresholds live in ``filters.consistency``)."""

    timeout_s: float | None = Field(default=None, gt=0, le=60, description="Sandbox wall-clock budget per response "
                                    "(None: the pipeline's sandbox.timeout_s).")
    workers: int | None = Field(default=None, ge=1, description="Sandbox worker processes (None: sandbox.workers).")


def get_sandbox(ctx: Any, timeout_s: float | None = None, workers: int | None = None) -> Any:
    """The run-wide sandbox pool of the pipeline's ``sandbox:`` block (``ctx.resource("sandbox")``;
    a stage that overrides timeout_s/workers gets a pool of its own), wrapped so that an
    infrastructure failure (``SandboxInfrastructureError``) propagates: the runner's failure taxonomy
    (:mod:`fabrika.pipeline.taxonomy`) treats it as transient — retried within the run, then pending. With a real
    model ``auto`` means bubblewrap: the rlimits fallback is for the offline ``sim`` backend only."""
    from fabrika.sandbox import SandboxPool
    from fabrika.sandbox.policy import SandboxSettings

    settings = getattr(getattr(ctx, "pipeline", None), "sandbox", None) or SandboxSettings()
    backend = str(getattr(ctx, "backend_name", "") or "unknown")
    config = settings.pool_config(backend, timeout_s=timeout_s, workers=workers)
    key = "sandbox" if (timeout_s, workers) == (None, None) else f"sandbox:{config.model_dump_json()}"
    # an executor may run the code elsewhere (``executor: ray``: on the worker actors, docs/RAY.md)
    factory = getattr(ctx, "sandbox_factory", None) or SandboxPool
    return ctx.resource(key, lambda: factory(config))


@register_stage
class ConsistencyStage(Stage[ConsistencyConfig]):
    """Annotating scorer over ``if.verifiers``: one row per constraint with the cross-validation scores."""

    kind = "if.consistency"
    prompt_templates: ClassVar[tuple[Any, ...]] = ()  # renders no prompt
    reads = (cols.VERIFIER_ANSWERS,)
    writes = cols.CONSISTENCY
    uses_sandbox: ClassVar[bool] = True  # runs LLM-written code: fail-closed isolation check
    calls_llm: ClassVar[bool] = False  # pure CPU: runs on worker actors under executor: ray
    annotates: ClassVar[bool] = True

    async def setup(self) -> None:
        self.pool = get_sandbox(self.ctx, self.config.timeout_s, self.config.workers)
        report = getattr(self.ctx, "report", None)
        if callable(report):
            report("sandbox_isolation", getattr(self.pool, "isolation", "unknown"))

    async def _run(self, code: str, responses: list[str]) -> list[Any]:
        """Probe one case first: code that hangs or cannot load fails every case without costing a timeout each.

        ``run_probed`` does it in one isolated batch (the probe and the rest each with a fresh module
        state: the same verdicts as the two calls below); a pool without it (a remote one) gets two calls."""
        probed = getattr(self.pool, "run_probed", None)
        if probed is not None:
            return list(await probed(code, responses))
        first = await self.pool.run(code, responses[:1])
        fatal = first[0].status == "timeout" or (first[0].status == "error" and first[0].error_kind in _FATAL)
        if fatal or len(responses) == 1:
            return list(first) * len(responses)
        return list(first) + list(await self.pool.run(code, responses[1:]))

    async def process(self, row: Row) -> list[Row]:
        constraint = IFVerifierAnswersRow.of(row)
        answers = constraint.verifiers
        funcs: dict[str, tuple[str, int]] = {}  # normalised → (code, sample_index)
        for a in answers:
            funcs.setdefault(normalise_code(a.code), (a.code, a.sample_index))
        cases: dict[str, bool] = {}
        conflicting: set[str] = set()
        for a in answers:
            for c in a.cases:
                if c["response"] in cases and cases[c["response"]] != c["label"]:
                    conflicting.add(c["response"])
                cases.setdefault(c["response"], c["label"])
        # a response labelled both ways by different answers cannot be a test case
        case_list = [(r, lab) for r, lab in cases.items() if r not in conflicting]
        codes = list(funcs.values())
        responses = [r for r, _ in case_list]
        verdicts = await asyncio.gather(*(self._run(code, responses) for code, _ in codes)) if responses else \
            [[] for _ in codes]
        cv = cross_validate([c for c, _ in codes], case_list, [list(v) for v in verdicts])
        functions = [{"sample_index": idx, "code": code, "accuracy": acc, "runnable": run,
                      "error": None if run else _first_error(list(vs))}
                     for (code, idx), acc, run, vs in zip(codes, cv["accuracies"], cv["runnable"], verdicts)]
        order = sorted(range(len(functions)), key=lambda i: (-functions[i]["accuracy"], functions[i]["sample_index"]))
        functions = [functions[i] for i in order]
        runnable = [f for f in functions if f["runnable"]]
        cols = {
            "functions": dumps(functions),
            "function_accuracies": dumps([f["accuracy"] for f in runnable]),
            "case_support": dumps([{"response": r, "label": lab, "support": s}
                                   for (r, lab), s in zip(case_list, cv["support"])]),
            "n_functions": len(answers),
            "n_unique_functions": len(runnable),
            "n_broken_functions": len(functions) - len(runnable),
            "n_unique_cases": len(case_list),
            "n_conflicting_cases": len(conflicting),
            "n_supported_cases": cv["n_supported"],
            "n_supported_true": cv["n_supported_true"],
            "n_supported_false": cv["n_supported_false"],
            "max_function_accuracy": max((f["accuracy"] for f in runnable), default=0.0),
        }
        return [ok(constraint.id, **cols)]


class ConsistencyParams(BaseModel):
    """``filters.consistency``: AutoIF's cross-validation thresholds, plus what a constant cannot pass.

    AutoIF keeps a verification function whose accuracy on the cross-validated test
    cases reaches a threshold (0.8 here, as in its recipe) and an instruction that has
    such functions and enough cases (3 functions, 10 cases here). It has no notion of
    *which* cases are supported, so a constant function passes when only one label's
    cases are reproduced. fabrika adds two gates (defaults not in AutoIF): at least
    ``min_supported_per_label`` supported cases of each label, and at least
    ``min_supported_cases`` supported cases in all (and :func:`cross_validate` gives a
    function that never separates a true case from a false one accuracy 0).
    """

    model_config = ConfigDict(extra="forbid")

    min_unique_functions: int = Field(default=3, ge=1, description="Keep a constraint with at least this many "
                                      "distinct runnable verifier functions.")
    min_unique_cases: int = Field(default=10, ge=1, description="Keep a constraint with at least this many distinct, "
                                  "consistently labelled test cases.")
    min_function_accuracy: float = Field(default=0.8, ge=0, le=1, description="A function survives with at least "
                                         "this accuracy on the supported cases; a constraint needs one survivor; a "
                                         "response must pass every survivor.")
    min_supported_cases: int = Field(default=4, ge=1, description="Keep a constraint with at least this many test "
                                     "cases some runnable function reproduces (not in AutoIF).")
    min_supported_per_label: int = Field(default=1, ge=1, description="...and at least this many of EACH label "
                                         "(true and false), so a constant function cannot pass (not in AutoIF).")


def consistency_predicates(p: ConsistencyParams) -> list[GatePredicate]:
    t = p.min_function_accuracy
    return [
        GatePredicate("consistency_few_functions", pl.col("n_unique_functions") >= p.min_unique_functions,
                      ("n_unique_functions",)),
        GatePredicate("consistency_few_cases", pl.col("n_unique_cases") >= p.min_unique_cases, ("n_unique_cases",)),
        GatePredicate("consistency_few_supported_cases", pl.col("n_supported_cases") >= p.min_supported_cases,
                      ("n_supported_cases",)),
        GatePredicate("consistency_one_label_supported",
                      pl.min_horizontal("n_supported_true", "n_supported_false") >= p.min_supported_per_label,
                      ("n_supported_true", "n_supported_false")),
        # max over the stored per-function accuracies: "at least one function survives t"
        GatePredicate("consistency_no_accurate_function", pl.col("max_function_accuracy") >= t,
                      ("max_function_accuracy",)),
        # responses: the best accuracy among verifiers that FAILED the response must stay below t
        # (-1.0 when none failed), i.e. the response passes every surviving verifier.
        GatePredicate("if_response_failed_verifier", pl.col("max_failed_verifier_accuracy") < t,
                      ("max_failed_verifier_accuracy",)),
    ]


register_gate_group("consistency", ConsistencyParams, consistency_predicates)


def surviving_functions(functions_json: str | None, min_accuracy: float, limit: int | None = None) -> list[dict]:
    """Runnable functions at or above ``min_accuracy``, best first."""
    funcs = [f for f in json.loads(functions_json or "[]") if f["runnable"] and f["accuracy"] >= min_accuracy]
    return funcs[:limit] if limit else funcs


def current_min_accuracy(ctx: Any) -> float:
    """``filters.consistency.min_function_accuracy`` of the running pipeline (default 0.8)."""
    filters = getattr(getattr(ctx, "pipeline", None), "filters", None) or {}
    return float(ConsistencyParams.model_validate(filters.get("consistency") or {}).min_function_accuracy)


def consistency_before(config: StageConfig, pipeline: Any) -> list[tuple[str, str]]:
    """Validation: an ``if.consistency`` stage must score this stage's input, listed earlier in the document.

    Annotators run in document order, so a stage reading ``functions`` placed before the
    scorer would see none and reject everything.
    """
    src = config.input if isinstance(config.input, str) else next(iter(config.input or []), None)
    for s in getattr(pipeline, "stages", []):
        if s is config:
            break
        if s.kind == "if.consistency" and s.input == src:
            return []
    return [("input", f"{config.kind} needs an if.consistency stage with input {src!r} listed before it "
                      "(it reads the per-function accuracies)")]
