"""Instruction-following reward: verifier score V with a reward-model correction.

    V = share of the prompt's constraints that pass  (or 1/0 all-or-nothing)
    R = V + 1     if V > 0 and S > α
        V − 0.5   if V > 0 and S ≤ α
        V         if V ≤ 0

S is the RM score of the completion, α the per-prompt mean RM score of the
teacher's completions (the ``teacher_rm_mean`` column). **Scale**: both are the raw
logit (label 0) of the *same* local sequence-classification RM on (prompt as chat,
visible answer), rendered by that RM's chat template — S by
:class:`fabrika.rewards.general.SequenceClassifierRM` during GRPO, α by the
``rm.teacher_scores`` stage over the teacher's K answers (default 8), stored with
the RM's ``rm_id``. The GRPO trainer refuses data whose α is missing, NaN or from
another ``rm_id``; a missing or NaN α or S here is an error, never a silent 0.5. The RM term keeps a
policy from satisfying the letter of the constraints with a worse answer than
the teacher's; it only ever applies once some constraint is met.

``bonus_only_when_all_pass``: with fractional V a partly compliant answer with
a high RM score (V=0.5, S>α → 1.5) outscores a fully compliant one with a low
RM score (V=1, S≤α → 0.5), so the policy can learn to trade constraints for
style. With the option the +1 is granted only at V = 1 (0.5 and 0.5 above:
no longer ahead).

Pure functions; no torch. Library constraints run in-process (trusted code);
LLM-written ``verifier_code`` runs only through an injected sandbox runner
(``fabrika.sandbox.SandboxPool.run_sync`` by default, created lazily).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fabrika.errors import ConfigError
from fabrika.rewards.reward_fn import RewardFunction
from fabrika.sandbox.policy import SandboxSettings
from fabrika.textutil.reasoning import answer_text

__all__ = [
    "IFRewardConfig",
    "IFScore",
    "completion_text",
    "make_if_reward",
    "parse_constraints",
    "rm_corrected",
    "rm_terms",
    "score_if",
    "verifier_score",
]

SandboxRunner = Callable[[str, list[str]], Sequence[Any]]
RMScorer = Callable[[Sequence[Any], Sequence[Any]], Sequence[float]]


class IFRewardConfig(BaseModel):
    """How the IF reward is computed (one config, documented per field)."""

    model_config = ConfigDict(extra="forbid")

    aggregation: Literal["fraction", "all"] = Field(
        default="fraction",
        description="V: 'fraction' = share of constraints that pass; 'all' = 1 only if every constraint passes, else 0.",
    )
    loose: bool = Field(
        default=False,
        description="Use the IFEval-style loose verdict for library constraints (first/last line and markdown forgiven).",
    )
    rm_correction: bool = Field(
        default=True,
        description="Apply R = V+1 / V-0.5 / V with the RM score S and the teacher mean α; False returns V.",
    )
    bonus_only_when_all_pass: bool = Field(
        default=False,
        description="Grant the +1 RM bonus only when V = 1, so a partly compliant answer cannot outscore a compliant one.",
    )
    bonus: float = Field(default=1.0, description="The RM bonus added when V > 0 and S > α.")
    penalty: float = Field(default=0.5, description="Subtracted when V > 0 and S ≤ α.")
    llm_vote: Literal["majority", "all", "any"] = Field(
        default="majority",
        description="How several LLM-written verifiers of one constraint combine: more than half, all, or any must pass.",
    )
    constraints_column: str = Field(default="constraints", description="Dataset column with the prompt's constraint specs.")
    sandbox: SandboxSettings = Field(
        default_factory=SandboxSettings,
        description="How LLM-written verifiers run (the pipeline's `sandbox:` block): 'auto' requires bubblewrap "
        "(the verifiers were written by a real model); 'rlimits' accepts weaker isolation.",
    )
    ground_truth_column: str = Field(
        default="ground_truth",
        description="Column whose 'verifiers' list ({'code', ...}) verifies the row's LLM-written constraint.",
    )
    rm_score_column: str = Field(
        default="rm_score",
        description="Column with S when no rm_scorer callable is given (the project-wide name, as the general reward "
        "and GRPO use; under TRL a column is per prompt, so use it for offline checks, a rm_scorer for training).",
    )
    teacher_rm_column: str = Field(default="teacher_rm_mean", description="Column with α, the teacher's mean RM score.")


def verifier_score(verdicts: Sequence[bool], aggregation: str = "fraction") -> float:
    """V from per-constraint verdicts; an empty list scores 0 (nothing to reward)."""
    if not verdicts:
        return 0.0
    if aggregation == "fraction":
        return sum(bool(v) for v in verdicts) / len(verdicts)
    if aggregation == "all":
        return float(all(verdicts))
    raise ConfigError(f"aggregation must be 'fraction' or 'all', got {aggregation!r}")


def rm_corrected(
    v: float,
    s: float,
    alpha: float,
    *,
    bonus_only_when_all_pass: bool = False,
    bonus: float = 1.0,
    penalty: float = 0.5,
) -> float:
    """R from V, the completion's RM score S and the teacher mean α (see module doc)."""
    if v <= 0:
        return v
    if s > alpha:
        return v + bonus if (v >= 1 or not bonus_only_when_all_pass) else v
    return v - penalty


def completion_text(completion: Any) -> str:
    """What the user sees of a completion (string, message or TRL message list): reasoning removed.

    Constraints grade the answer, never the chain of thought: ``<think>…</think>``
    (closed, or pre-filled by the template), harmony channels and ``reasoning_content``
    are dropped; a completion cut off while reasoning has no answer (empty text).
    """
    return answer_text(completion)


def parse_constraints(value: Any) -> list[dict[str, Any]]:
    """The constraint specs of one row: a list of dicts, or its JSON string (as rows store it).

    A spec is ``{"verifier_code": ...}`` (LLM-written, sandboxed), a library
    constraint named by ``library_id``, ``parent_id`` or ``id`` (``id@hash`` record
    ids work) with ``params``, or an LLM-written constraint without code, verified
    by the row's ``ground_truth["verifiers"]``; other keys (``text`` …) are ignored.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"constraints column holds invalid JSON {value[:80]!r}; write a JSON list of specs") from exc
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"constraints must be a list of {{'id', 'params'}} or {{'verifier_code'}} dicts, got {value!r}")
    specs = [dict(s) for s in value]
    for s in specs:
        if not any(s.get(k) for k in ("verifier_code", "library_id", "parent_id", "id")):
            raise ConfigError(f"constraint spec {s!r} has neither 'id' (library) nor 'verifier_code' (LLM-written)")
    return specs


@dataclass(frozen=True)
class IFScore:
    """One completion's reward with its parts (for logging and offline evaluation)."""

    verdicts: tuple[bool, ...]
    v: float
    s: float | None
    alpha: float | None
    reward: float
    #: the RM that gave S (``rm_scorer.rm_id``; None when S came from a column or no correction applied)
    rm_id: str | None = None


def _library_id(spec: Mapping[str, Any]) -> str | None:
    """The library constraint a spec names, or None for an LLM-written constraint."""
    from fabrika.constraints import REGISTRY  # loads pymorphy3 lazily; keep it off module import

    for key in ("library_id", "parent_id"):
        if spec.get(key):
            return str(spec[key])
    cid = str(spec.get("id") or "")
    return cid if cid.split("@", 1)[0] in REGISTRY else None


def _library_verdict(cid: str, spec: Mapping[str, Any], text: str, loose: bool) -> bool:
    from fabrika.constraints import get

    c = get(cid)
    params = spec.get("params") or {}
    return c.verify_loose(text, params) if loose else c.verify(text, params)


def _passed(verdict: Any) -> bool:
    """A sandbox verdict (``.passed``) or a plain bool; anything else fails."""
    if isinstance(verdict, bool):
        return verdict
    return bool(getattr(verdict, "passed", False))


def _vote(passes: list[bool], mode: str) -> bool:
    if mode == "all":
        return all(passes)
    if mode == "any":
        return any(passes)
    return sum(passes) * 2 > len(passes)


def _row_verifier_codes(ground_truth: Any) -> list[str]:
    """Verifier code kept for the row's LLM-written constraint (``ground_truth["verifiers"][*]["code"]``)."""
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except ValueError:
            return []
    if not isinstance(ground_truth, Mapping):
        return []
    return [str(v["code"]) for v in ground_truth.get("verifiers") or [] if isinstance(v, Mapping) and v.get("code")]


def _verdicts(
    specs_per_row: list[list[dict[str, Any]]],
    texts: list[str],
    row_codes: list[list[str]],
    cfg: IFRewardConfig,
    runner: SandboxRunner | None,
) -> list[list[bool]]:
    """Per-row verdicts. Library constraints run in-process; LLM-written ones through the sandbox,
    batched as one call per distinct code, several verifiers of one constraint combined by ``cfg.llm_vote``."""
    out: list[list[bool]] = [[False] * len(specs) for specs in specs_per_row]
    by_code: dict[str, list[tuple[int, int]]] = {}
    votes: dict[tuple[int, int], list[bool]] = {}
    for i, specs in enumerate(specs_per_row):
        for j, spec in enumerate(specs):
            code = spec.get("verifier_code")
            lib = None if code else _library_id(spec)
            if lib is not None:
                out[i][j] = _library_verdict(lib, spec, texts[i], cfg.loose)
                continue
            codes = ([code] if isinstance(code, str) else list(code)) if code else row_codes[i]
            if not codes:
                raise ConfigError(
                    f"constraint {spec.get('id')!r} is neither a library constraint nor has verifier code "
                    "(spec 'verifier_code' or ground_truth['verifiers']); fix the export"
                )
            votes[(i, j)] = []
            for c in codes:
                by_code.setdefault(str(c), []).append((i, j))
    if by_code and runner is None:
        raise ConfigError("constraints need LLM-written verifiers but no sandbox runner was given; pass sandbox_runner=")
    for code, slots in by_code.items():
        assert runner is not None  # checked above: by_code is not empty
        verdicts = list(runner(code, [texts[i] for i, _ in slots]))
        if len(verdicts) != len(slots):
            raise ConfigError(f"sandbox runner returned {len(verdicts)} verdicts for {len(slots)} responses")
        for slot, verdict in zip(slots, verdicts):
            votes[slot].append(_passed(verdict))
    for (i, j), passes in votes.items():
        out[i][j] = _vote(passes, cfg.llm_vote)
    return out


def batch_column(kwargs: Mapping[str, Any], name: str, n: int) -> list[Any] | None:
    """A dataset column TRL passed with the batch (one value per completion), or None when absent."""
    col = kwargs.get(name)
    if col is None:
        return None
    col = list(col)
    if len(col) != n:
        raise ConfigError(f"column {name!r} has {len(col)} values for {n} completions")
    return col


def score_if(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    config: IFRewardConfig | None = None,
    *,
    sandbox_runner: SandboxRunner | None = None,
    rm_scorer: RMScorer | None = None,
    **columns: Any,
) -> list[IFScore]:
    """Score a batch; ``columns`` are the dataset columns TRL passes (one value per completion)."""
    cfg = config or IFRewardConfig()
    n = len(completions)
    raw = batch_column(columns, cfg.constraints_column, n)
    if raw is None:
        raise ConfigError(f"the dataset has no {cfg.constraints_column!r} column; set constraints_column")
    texts = [completion_text(c) for c in completions]
    gt = batch_column(columns, cfg.ground_truth_column, n) or [None] * n
    row_codes = [_row_verifier_codes(g) for g in gt]
    verdicts = _verdicts([parse_constraints(r) for r in raw], texts, row_codes, cfg, sandbox_runner)
    # no visible answer (empty, reasoning only, cut off while reasoning) satisfies no constraint,
    # not even the vacuous ones ("no commas" holds for an empty string)
    verdicts = [v if texts[i].strip() else [False] * len(v) for i, v in enumerate(verdicts)]
    vs = [verifier_score(v, cfg.aggregation) for v in verdicts]

    terms = rm_terms(prompts, completions, cfg, rm_scorer, columns)
    rm_id = getattr(rm_scorer, "rm_id", None) if terms is not None else None
    out = []
    for i in range(n):
        v = vs[i]
        if terms is None:
            out.append(IFScore(tuple(verdicts[i]), v, None, None, v))
            continue
        s, alpha = terms[i]
        r = rm_corrected(v, s, alpha, bonus_only_when_all_pass=cfg.bonus_only_when_all_pass, bonus=cfg.bonus, penalty=cfg.penalty)
        out.append(IFScore(tuple(verdicts[i]), v, s, alpha, r, rm_id))
    return out


def rm_terms(prompts: Sequence[Any], completions: Sequence[Any], cfg: IFRewardConfig, rm_scorer: RMScorer | None,
             columns: Mapping[str, Any]) -> list[tuple[float, float]] | None:
    """(S, α) per completion for the RM correction, or None when it does not apply — the ONE missing-α policy.

    ``None`` when ``cfg.rm_correction`` is off or there is no S (no ``rm_scorer``, no
    ``rm_score_column``). Otherwise every row needs both: a missing column, a missing
    (None) or NaN S or α on any row raises :class:`ConfigError` — never a silent skip of the
    correction, never a made-up number. The IF and the rubric reward both call this.
    """
    if not cfg.rm_correction:
        return None
    n = len(completions)
    s_col = list(rm_scorer(prompts, completions)) if rm_scorer is not None else batch_column(columns, cfg.rm_score_column, n)
    if s_col is None:
        return None
    if len(s_col) != n:
        raise ConfigError(f"rm_scorer returned {len(s_col)} scores for {n} completions")
    alpha_col = batch_column(columns, cfg.teacher_rm_column, n)
    if alpha_col is None:
        raise ConfigError(f"RM correction needs the {cfg.teacher_rm_column!r} column (α); add it or set rm_correction=False")
    out = []
    for i in range(n):
        if alpha_col[i] is None or s_col[i] is None:
            raise ConfigError(f"row {i}: {'α (' + cfg.teacher_rm_column + ')' if alpha_col[i] is None else 'S'} "
                              "is missing; the RM correction needs both on every row (see rm.teacher_scores)")
        s, alpha = float(s_col[i]), float(alpha_col[i])
        if math.isnan(alpha):
            raise ConfigError(f"row {i}: α is NaN; the RM correction cannot compare it")
        if not math.isfinite(s):  # a served RM refused this completion (4xx) or gave a non-finite score
            raise ConfigError(f"row {i}: the RM gave no score S for this completion (it refused the request or "
                              "answered a non-finite number); the RM correction cannot compare it — raise the RM "
                              "server's max model length to the policy's prompt + completion length")
        out.append((s, alpha))
    return out


class _LazySandbox:
    """A ``SandboxPool`` of ``settings`` started on the first LLM-written verifier, closed by ``close()``."""

    def __init__(self, settings: SandboxSettings, backend: str) -> None:
        self._pool: Any = None
        self._settings = settings
        self._backend = backend

    def __call__(self, code: str, responses: list[str]) -> Sequence[Any]:
        if self._pool is None:
            from fabrika.sandbox import SandboxPool

            self._pool = SandboxPool(self._settings.pool_config(self._backend))
        return self._pool.run_sync(code, responses)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def make_if_reward(
    config: IFRewardConfig | None = None,
    *,
    sandbox_runner: SandboxRunner | None = None,
    rm_scorer: RMScorer | None = None,
    sandbox_backend: str = "model",
) -> RewardFunction[float]:
    """A TRL reward function: ``reward(prompts=..., completions=..., **columns) -> list[float]``.

    ``sandbox_runner(code, responses) -> verdicts`` runs LLM-written verifiers
    (default: a lazily started ``fabrika.sandbox.SandboxPool``); ``rm_scorer``
    gives S, else the ``rm_score`` column does, else no RM correction is applied.
    Under TRL, the mean V and the all-pass share are logged through ``log_metric``
    (``if/verifier_score``, ``if/all_pass``) and V per completion through ``log_extra``.
    Call ``reward.close()`` when done to stop a default sandbox pool. ``sandbox_backend``
    names who wrote the verifiers: only ``"sim"`` lets ``config.sandbox.isolation: auto``
    fall back to rlimits; anything else requires bubblewrap (fail closed).
    """
    cfg = config or IFRewardConfig()
    lazy = _LazySandbox(cfg.sandbox, sandbox_backend) if sandbox_runner is None else None
    runner = sandbox_runner or lazy

    def if_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        for key in ("completion_ids", "trainer_state", "environments"):
            kwargs.pop(key, None)
        log_metric, log_extra = kwargs.pop("log_metric", None), kwargs.pop("log_extra", None)
        scores = score_if(prompts, completions, cfg, sandbox_runner=runner, rm_scorer=rm_scorer, **kwargs)
        if scores and callable(log_metric):
            log_metric("if/verifier_score", sum(s.v for s in scores) / len(scores))
            log_metric("if/all_pass", sum(s.v >= 1 for s in scores) / len(scores))
        if callable(log_extra):
            log_extra("if_verifier_score", [s.v for s in scores])
        return [s.reward for s in scores]

    return RewardFunction("if_reward", if_reward, lazy.close if lazy is not None else None, config=cfg)
