"""Rubric reward: an LLM judge checks every rubric of a prompt; the positive reward needs all of them.

    P = 1 if the judge passes every rubric of the row, else 0      (no partial credit:
                                                                    optional rubrics caused a length bias)
    V = P × V_if   when the row also has verifiable constraints (``score_if``, no RM term)
        P          otherwise
    R = rm_corrected(V, S, α)  when an RM score S and the teacher mean α exist, else V

A completion with no visible answer — empty, whitespace only, reasoning only (``<think>…</think>``
and nothing after it) or cut off while reasoning — scores 0 whatever a judge would say (rubrics
such as "does not break character" hold trivially for an empty reply); the judge is not asked.
A judge failure (transport error, invalid or incomplete JSON, a truncated answer) makes the
row's reward ``None`` — TRL treats it as unscorable — and is never a pass. A missing or NaN α
or S raises, exactly as in the IF reward (:func:`fabrika.rewards.instruct.rm_terms`).

The judge goes through fabrika's LLM engine (cache, retries, batching): one request per
completion with every rubric of its row, ``n`` samples when ``judge_samples > 1`` (their
verdicts are combined by ``vote``). Requests use structured output (``response_format`` with
:data:`VERDICT_SCHEMA`); answers are still parsed as untrusted text (prose, ``<think>`` blocks).

Pure functions plus a small sync bridge (:func:`make_rubric_reward`); no torch at import.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fabrika.errors import ConfigError
from fabrika.llm.rejections import TRUNCATED, llm_error_reason
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.rewards.instruct import (
    IFRewardConfig,
    batch_column,
    completion_text,
    parse_constraints,
    rm_corrected,
    rm_terms,
    score_if,
)
from fabrika.rewards.reward_fn import RewardFunction
from fabrika.textutil.answers import ParseFailure, answer_int, extract_json, is_failure
from fabrika.textutil.reasoning import split_reasoning

__all__ = [
    "TAG_RUBRIC_JUDGE",
    "VERDICT_SCHEMA",
    "RubricRewardConfig",
    "RubricScore",
    "combine_votes",
    "judge_request",
    "make_rubric_reward",
    "parse_verdicts",
    "render_transcript",
    "row_rubrics",
    "score_rubrics",
    "strip_reasoning",
]

TAG_RUBRIC_JUDGE = "if.rubric.judge"

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdicts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"index": {"type": "integer", "minimum": 1}, "reason": {"type": "string"},
                               "pass": {"type": "boolean"}},
                "required": ["index", "reason", "pass"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["verdicts"],
    "additionalProperties": False,
}

Client = Any  # anything with ``async complete(requests) -> list[ChatResponse]`` (fabrika.llm.LLMEngine)
RMScorer = Callable[[Sequence[Any], Sequence[Any]], Sequence[float]]
SandboxRunner = Callable[[str, list[str]], Sequence[Any]]


class RubricRewardConfig(BaseModel):
    """How the rubric reward is computed (one config, documented per field)."""

    model_config = ConfigDict(extra="forbid")

    judge_model: str | None = Field(default=None, description="Judge model (None: the engine's default model).")
    judge_samples: int = Field(default=1, ge=1, le=16, description="Verdict samples per completion (request `n`); "
                               "combined per rubric by `vote`.")
    vote: Literal["majority", "all"] = Field(default="majority", description="With several samples: a rubric passes "
                                             "when more than half ('majority') or every ('all') parsed sample passes it.")
    temperature: float = Field(default=0.0, ge=0, le=2, description="Judge temperature (raise it with judge_samples>1).")
    max_tokens: int | None = Field(default=None, ge=1, description="Judge token limit (None: the engine default).")
    rubrics_column: str = Field(default="rubrics", description="Column with the row's rubrics; when absent, "
                                "ground_truth['rubrics'] is read.")
    ground_truth_column: str = Field(default="ground_truth", description="Column whose 'rubrics' (and 'constraints') "
                                     "the reward reads.")
    lang_column: str = Field(default="lang", description="Column naming the row language (ru/en) of the judge prompt.")
    use_constraints: bool = Field(default=True, description="Multiply by the verifier score V_if when the row has "
                                  "constraints (fabrika.rewards.instruct.score_if).")
    if_reward: dict[str, Any] = Field(default_factory=dict, description="IFRewardConfig fields for V_if and the RM "
                                      "correction (aggregation, bonus, penalty, rm_correction, column names).")


@dataclass(frozen=True)
class RubricScore:
    """One completion's reward with its parts; ``reward`` is ``None`` when the judge failed."""

    verdicts: tuple[bool, ...] | None
    rubric_pass: bool | None
    v_if: float | None
    v: float | None
    s: float | None
    alpha: float | None
    reward: float | None
    error: str | None = None


# ----------------------------------------------------------------------------- prompts and parsing

@lru_cache(maxsize=1)
def _prompts() -> dict[str, Any]:
    import yaml

    from fabrika.inputs import DATA_DIR

    with open(DATA_DIR / "instruct" / "prompts_rubric.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def render_prompt(role: str, lang: str, **variables: Any) -> tuple[dict[str, str], ...]:
    """System + user messages of a rubric role (``judge``, ``writer``, ``decidable``) in ``lang`` (ru/en)."""
    import jinja2

    spec = _prompts()[role]
    spec = spec.get(lang) or spec["ru"]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    return ({"role": "system", "content": env.from_string(spec["system"]).render(**variables).strip()},
            {"role": "user", "content": env.from_string(spec["user"]).render(**variables).strip()})


_SPEAKERS = {"ru": {"system": "Системная инструкция", "user": "Пользователь", "assistant": "Ассистент",
                    "tool": "Инструмент"},
             "en": {"system": "System instruction", "user": "User", "assistant": "Assistant", "tool": "Tool"}}


def fence(text: str) -> str:
    """``text`` with the judge prompt's delimiters (``<<<``, ``>>>``) defused, so a reply cannot close its block."""
    return text.replace("<<<", "<\u200b<<").replace(">>>", ">\u200b>>")


def render_transcript(messages: Sequence[Mapping[str, Any]], lang: str = "ru") -> str:
    """The visible conversation as ``Speaker: text`` blocks (hidden reasoning is never shown to the judge)."""
    names = _SPEAKERS.get(lang, _SPEAKERS["ru"])
    return "\n\n".join(f"{names.get(str(m.get('role')), str(m.get('role')))}: "
                       f"{fence(strip_reasoning(str(m.get('content') or '')))}" for m in messages)


def judge_request(messages: Sequence[Mapping[str, Any]], reply: str, rubrics: Sequence[str], *, lang: str = "ru",
                  model: str | None = None, n: int = 1, temperature: float = 0.0,
                  max_tokens: int | None = None) -> ChatRequest:
    """One judge request for ``reply`` (the last assistant turn) after ``messages``, all ``rubrics`` at once."""
    prompt = render_prompt("judge", lang, transcript=render_transcript(messages, lang), reply=fence(strip_reasoning(reply)),
                           rubrics=list(rubrics))
    return ChatRequest(messages=prompt, model=model, temperature=temperature, max_tokens=max_tokens, n=n,
                       response_format={"type": "json_schema",
                                        "json_schema": {"name": "rubric_verdicts", "schema": VERDICT_SCHEMA,
                                                        "strict": True}},
                       tag=TAG_RUBRIC_JUDGE)


def strip_reasoning(text: str | None) -> str:
    """``text`` as the user sees it: reasoning removed; an unclosed ``<think>`` (truncated reasoning) leaves nothing."""
    return split_reasoning(text).answer


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "да", "нет", "yes", "no"):
        return value.strip().lower() in ("true", "да", "yes")
    return None


def parse_verdicts(text: str | None, n_rubrics: int, *, key: str = "pass") -> list[bool] | ParseFailure:
    """One bool per rubric from a judge answer, or the reason it is unusable.

    Every index 1..n must appear exactly once with a boolean ``key`` (``"2"`` and ``"да"`` are
    read as 2 and true; a list of exactly n items without any ``index`` is read in order).
    Anything else — missing, repeated or out-of-range indices, a non-boolean verdict — is a
    failure, never a pass.
    """
    value = extract_json(strip_reasoning(text), expect=dict)
    if is_failure(value):
        return value
    items = value.get("verdicts")
    if isinstance(items, Mapping):  # {"1": true, "2": {"pass": false}} — a common variation
        items = [{"index": k, **(v if isinstance(v, Mapping) else {key: v})} for k, v in items.items()]
    if not isinstance(items, list):
        return ParseFailure("bad_verdicts: answer has no 'verdicts' list")
    positional = len(items) == n_rubrics and all(isinstance(i, Mapping) and "index" not in i for i in items)
    found: dict[int, bool] = {}
    for pos, item in enumerate(items):
        if not isinstance(item, Mapping):
            return ParseFailure(f"bad_verdicts: item {pos} is not an object")
        index = pos + 1 if positional else answer_int(item.get("index"))
        if index is None or not 1 <= index <= n_rubrics:
            return ParseFailure(f"bad_verdicts: item {pos} has index {item.get('index')!r}, need 1..{n_rubrics}")
        verdict = _as_bool(item.get(key))
        if verdict is None:
            return ParseFailure(f"bad_verdicts: rubric {index} has no boolean {key!r}")
        if index in found:
            return ParseFailure(f"bad_verdicts: rubric {index} judged twice")
        found[index] = verdict
    missing = [i for i in range(1, n_rubrics + 1) if i not in found]
    if missing:
        return ParseFailure(f"missing_verdict: rubric(s) {missing} not judged")
    return [found[i] for i in range(1, n_rubrics + 1)]


def response_verdicts(resp: ChatResponse, n_rubrics: int, vote: str = "majority",
                      key: str = "pass") -> list[bool] | ParseFailure:
    """Verdicts from every choice of a judge response, combined by ``vote``; failures say why."""
    if resp.error is not None:
        return ParseFailure(llm_error_reason(resp.error))
    samples: list[list[bool]] = []
    reasons: list[str] = []
    for choice in resp.choices:
        if choice.truncated:
            reasons.append(TRUNCATED)
            continue
        parsed = parse_verdicts(choice.content, n_rubrics, key=key)
        if is_failure(parsed):
            reasons.append(str(parsed))
        else:
            samples.append(parsed)
    return combine_votes(samples, len(resp.choices), vote, reasons)


def combine_votes(samples: list[list[bool]], n_choices: int, vote: str = "majority",
                  reasons: Sequence[str] = ()) -> list[bool] | ParseFailure:
    """Per-rubric verdict over parsed samples; fewer than half of the choices parsed is a failure."""
    if not samples or len(samples) * 2 < n_choices:
        why = reasons[0] if reasons else "no_choices"
        return ParseFailure(f"judge_failed: {len(samples)} of {n_choices} answers usable ({why})")
    per_rubric = list(zip(*samples))
    if vote == "all":
        return [all(v) for v in per_rubric]
    return [sum(v) * 2 > len(v) for v in per_rubric]


# ----------------------------------------------------------------------------- reward

def row_rubrics(ground_truth: Any, column_value: Any = None) -> list[str]:
    """The rubrics of one row: the rubrics column if set, else ``ground_truth['rubrics']``."""
    import json

    value = column_value
    if value is None:
        gt = ground_truth
        if isinstance(gt, str):
            try:
                gt = json.loads(gt)
            except ValueError as exc:
                raise ConfigError(f"ground_truth holds invalid JSON {gt[:80]!r}") from exc
        value = gt.get("rubrics") if isinstance(gt, Mapping) else None
    if isinstance(value, str):
        value = json.loads(value)
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(r, str) and r.strip() for r in value):
        raise ConfigError(f"rubrics must be a list of non-empty strings, got {value!r}")
    return [r.strip() for r in value]


def _has_constraints(value: Any) -> bool:
    if value is None:
        return False
    try:
        return bool(parse_constraints(value))
    except ConfigError:
        raise
    except Exception:  # noqa: BLE001 - an unreadable spec is reported by score_if itself
        return True


async def score_rubrics(prompts: Sequence[Any], completions: Sequence[Any], config: RubricRewardConfig | None = None,
                        *, llm: Client, sandbox_runner: SandboxRunner | None = None,
                        rm_scorer: RMScorer | None = None, **columns: Any) -> list[RubricScore]:
    """Score a batch: one judge request per completion that has rubrics, sent as one engine call."""
    cfg = config or RubricRewardConfig()
    if_cfg = IFRewardConfig(**cfg.if_reward)
    n = len(completions)
    gts = batch_column(columns, cfg.ground_truth_column, n) or [None] * n
    rub_col = batch_column(columns, cfg.rubrics_column, n) or [None] * n
    langs = batch_column(columns, cfg.lang_column, n) or ["ru"] * n
    rubrics = [row_rubrics(g, r) for g, r in zip(gts, rub_col)]
    cons = batch_column(columns, if_cfg.constraints_column, n) or [None] * n
    with_cons = [cfg.use_constraints and _has_constraints(c) for c in cons]
    for i in range(n):
        if not rubrics[i] and not with_cons[i]:
            raise ConfigError(f"row {i} has neither rubrics nor constraints; the rubric reward cannot score it "
                              f"(set {cfg.rubrics_column!r} or ground_truth['rubrics'])")
    terms = rm_terms(prompts, completions, if_cfg, rm_scorer, columns)  # raises before any judge call
    texts = [completion_text(c) for c in completions]
    answered = [bool(t.strip()) for t in texts]
    slots = [i for i in range(n) if rubrics[i] and answered[i]]  # no answer: 0 below, the judge is not asked
    requests = [judge_request(_as_messages(prompts[i]), texts[i], rubrics[i],
                              lang=str(langs[i] or "ru"), model=cfg.judge_model, n=cfg.judge_samples,
                              temperature=cfg.temperature, max_tokens=cfg.max_tokens) for i in slots]
    responses = list(await llm.complete(requests)) if requests else []
    verdicts: list[list[bool] | ParseFailure | None] = [None] * n
    for i, resp in zip(slots, responses):
        verdicts[i] = response_verdicts(resp, len(rubrics[i]), cfg.vote)

    v_if: list[float | None] = [None] * n
    idx = [i for i in range(n) if with_cons[i]]
    if idx:
        sub: dict[str, Any] = {k: [v[i] for i in idx] for k, v in columns.items()
                               if isinstance(v, (list, tuple)) and len(v) == n}
        plain = if_cfg.model_copy(update={"rm_correction": False})
        for i, scored in zip(idx, score_if([prompts[i] for i in idx], [completions[i] for i in idx], plain,
                                           sandbox_runner=sandbox_runner, **sub)):
            v_if[i] = scored.v

    out: list[RubricScore] = []
    for i in range(n):
        s_i, alpha_i = terms[i] if terms is not None else (None, None)
        if not answered[i]:
            out.append(RubricScore(None, False, v_if[i], 0.0, s_i, alpha_i, 0.0))
            continue
        vd = verdicts[i]
        if is_failure(vd):
            out.append(RubricScore(None, None, v_if[i], None, None, None, None, error=str(vd)))
            continue
        passed = all(vd) if vd is not None else True  # no rubrics: only the constraints decide
        vi = v_if[i]
        v = (1.0 if passed else 0.0) * (vi if vi is not None else 1.0)
        reward = v
        if s_i is not None and alpha_i is not None:
            reward = rm_corrected(v, s_i, alpha_i, bonus_only_when_all_pass=if_cfg.bonus_only_when_all_pass,
                                  bonus=if_cfg.bonus, penalty=if_cfg.penalty)
        out.append(RubricScore(tuple(vd) if vd is not None else (), passed, v_if[i], v, s_i, alpha_i, reward))
    return out


def _as_messages(prompt: Any) -> list[Mapping[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, Mapping):
        return [prompt]
    return list(prompt)


class _LoopThread:
    """A private event loop on a daemon thread: the sync TRL call drives an async engine safely."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rubric-judge", daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


def make_rubric_reward(config: RubricRewardConfig | None = None, *, llm: Client | None = None,
                       llm_config: Mapping[str, Any] | Any | None = None,
                       sandbox_runner: SandboxRunner | None = None,
                       rm_scorer: RMScorer | None = None) -> RewardFunction[float | None]:
    """A TRL reward function: ``reward(prompts=..., completions=..., **columns) -> list[float | None]``.

    The judge is ``llm`` (an engine or any object with ``async complete``), or an engine built
    lazily from ``llm_config`` (a :class:`fabrika.llm.config.LLMConfig` or its dict; set
    ``cache.path`` to cache verdicts across runs). LLM-written verifiers of rows with constraints
    run through ``sandbox_runner`` (default: a lazily started sandbox pool, as the IF reward does).
    Logs ``rubric/all_pass`` and ``rubric/judge_failed`` through TRL's ``log_metric``.
    Call ``reward.close()`` when done.
    """
    cfg = config or RubricRewardConfig()
    if llm is None and llm_config is None:
        raise ConfigError("the rubric reward needs a judge: pass llm= (an engine) or llm_config= (fabrika llm settings)")
    state: dict[str, Any] = {"llm": llm, "own": llm is None, "loop": None, "sandbox": None}
    runner = sandbox_runner

    def _sandbox(code: str, responses: list[str]) -> Sequence[Any]:
        if state["sandbox"] is None:
            from fabrika.sandbox import SandboxConfig, SandboxPool

            state["sandbox"] = SandboxPool(SandboxConfig())
        return state["sandbox"].run_sync(code, responses)

    async def _engine() -> Client:
        if state["llm"] is None:
            from fabrika.llm.config import LLMConfig
            from fabrika.llm.factory import build_engine

            conf = llm_config if isinstance(llm_config, LLMConfig) else LLMConfig.model_validate(dict(llm_config or {}))
            state["llm"] = build_engine(conf, run_dir=None)
        return state["llm"]

    async def _score(prompts: Any, completions: Any, kwargs: dict[str, Any]) -> list[RubricScore]:
        return await score_rubrics(prompts, completions, cfg, llm=await _engine(),
                                   sandbox_runner=runner or _sandbox, rm_scorer=rm_scorer, **kwargs)

    def rubric_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        for key in ("completion_ids", "trainer_state", "environments"):
            kwargs.pop(key, None)
        log_metric, log_extra = kwargs.pop("log_metric", None), kwargs.pop("log_extra", None)
        if state["loop"] is None:
            state["loop"] = _LoopThread()
        scores = state["loop"].run(_score(prompts, completions, kwargs))
        if scores and callable(log_metric):
            log_metric("rubric/all_pass", sum(bool(s.rubric_pass) for s in scores) / len(scores))
            log_metric("rubric/judge_failed", sum(s.error is not None for s in scores) / len(scores))
        if callable(log_extra):
            log_extra("rubric_pass", [s.rubric_pass for s in scores])
        return [s.reward for s in scores]

    def close() -> None:
        loop = state["loop"]
        if loop is not None:
            if state["own"] and state["llm"] is not None and hasattr(state["llm"], "aclose"):
                loop.run(state["llm"].aclose())
            loop.close()
            state["loop"] = None
        if state["sandbox"] is not None:
            state["sandbox"].close()
            state["sandbox"] = None

    return RewardFunction("rubric_reward", rubric_reward, close, config=cfg)
