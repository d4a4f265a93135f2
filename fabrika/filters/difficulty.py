"""Difficulty scorer: pass rate of a policy model over k samples.

For each row the prompt (chat form, with its tools) goes to the engine ``k``
times (``sample_index`` 0..k-1, ``tag="filter.difficulty"``, so each sample has
its own cache entry); every answer is scored with the expert's reward and
counted as a pass when the reward reaches ``pass_threshold``. Rows every sample
solves teach nothing to GRPO; rows none solves give no signal — the gates
``difficulty.min_pass_rate_exclusive`` / ``difficulty.max_pass_rate`` drop both.

Rewards are TRL-style functions ``f(prompts, completions, **columns) -> list[float]``
resolved lazily per expert from :data:`DEFAULT_REWARDS` (``"module:function"``),
overridable in the config. Prompts go out in the OpenAI wire format
(:meth:`fabrika.schemas.Message.to_chat`: tool-call ``arguments`` as JSON strings),
and rewards grade the visible answer (reasoning removed, ``reasoning_content``
passed along). A failed request is not a failed sample: the network says
nothing about the policy, so any failed request leaves the row's pass rate
null (unmeasured) with ``difficulty_errors`` counting the failures; the gates
keep unmeasured rows and the funnel reports them (``kept_null_difficulty.*``).

The difficulty gates apply to GRPO exports only by default
(``filters.difficulty.apply_to``): a too-easy prompt is useless for RL but a
fine SFT example.

Scores: ``difficulty_pass_rate``, ``difficulty_k``, ``difficulty_errors``.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Callable, ClassVar, Literal, Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fabrika.filters.text import SampleRow
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.columns import SAMPLE_READS, Column
from fabrika.pipeline.llm_stage import LLMStage
from fabrika.pipeline.stage import Row, StageConfig, ok, register_stage
from fabrika.schemas import Message
from fabrika.schemas.chat import messages_to_chat, tools_to_chat

TAG = "filter.difficulty"
SCORE_COLUMNS = ("difficulty_pass_rate", "difficulty_k", "difficulty_errors")
DEFAULT_REWARDS: dict[str, str] = {
    "fc": "fabrika.rewards.fc:fc_reward",
    "if": "fabrika.filters.difficulty:if_verifier_reward",
}
RewardFn = Callable[..., list[float]]
_IF_REWARD: list[RewardFn] = []
#: The running pipeline's ``sandbox:`` block and backend (set by the stage's setup).
_SANDBOX: list[tuple[Any, str]] = []


def if_verifier_reward(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
    """IF pass signal: the verifier score V of ``fabrika.rewards.instruct`` (all constraints, no RM term).

    Difficulty asks "did the policy satisfy the instruction", so the RM correction
    (which needs the teacher's α) is off and V is all-or-nothing.
    """
    if not _IF_REWARD:
        from fabrika.rewards.instruct import IFRewardConfig, make_if_reward

        settings, backend = _SANDBOX[0] if _SANDBOX else (None, "model")
        extra = {"sandbox": settings} if settings is not None else {}
        _IF_REWARD.append(make_if_reward(IFRewardConfig(aggregation="all", rm_correction=False, **extra),
                                         sandbox_backend=backend))
    return _IF_REWARD[0](prompts=prompts, completions=completions, **columns)


def resolve_reward(spec: str) -> RewardFn:
    """Import ``"package.module:function"`` (lazily: rewards may pull heavy deps)."""
    module, sep, attr = spec.partition(":")
    if not sep:
        raise ValueError(f"reward {spec!r} must look like 'package.module:function'")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"reward {spec!r} cannot be imported ({exc}); fix `rewards` in the filter.difficulty config") from exc
    return fn


def wire_messages(value: Any) -> list[dict[str, Any]]:
    """Stored messages → OpenAI wire messages (``Message.to_chat``: arguments as JSON strings)."""
    out = []
    for m in messages_to_chat(value):
        try:
            out.append(Message.model_validate(m).to_chat())
        except ValueError:  # not a fabrika message (plain dicts of generic stages): encode arguments by hand
            calls = [{**c, "function": {**c["function"], "arguments": c["function"]["arguments"]
                                        if isinstance(c["function"].get("arguments"), str)
                                        else json.dumps(c["function"].get("arguments") or {}, ensure_ascii=False)}}
                     for c in m.get("tool_calls") or []]
            out.append({**m, "tool_calls": calls} if calls else m)
    return out


def build_requests(row: Row, k: int, model: str | None, temperature: float, max_tokens: int | None) -> list[ChatRequest]:
    """``k`` sampling requests for one row's prompt, in the OpenAI wire format."""
    sample = SampleRow.of(row)
    messages = tuple(wire_messages(sample.prompt))
    tools = tools_to_chat(sample.tools)
    return [
        ChatRequest(messages=messages, tools=tuple(tools) or None, model=model, temperature=temperature,
                    max_tokens=max_tokens, sample_index=i, tag=TAG, meta={"id": sample.id})
        for i in range(k)
    ]


def response_completion(resp: ChatResponse) -> list[dict[str, Any]]:
    """A response's first choice as a TRL conversational completion."""
    choice = resp.choices[0]
    msg: dict[str, Any] = {"role": "assistant", "content": choice.content or ""}
    if choice.reasoning:
        msg["reasoning_content"] = choice.reasoning
    if choice.tool_calls:
        msg["tool_calls"] = [dict(c) for c in choice.tool_calls]
    return [msg]


def pass_rate(row: Row, responses: Sequence[ChatResponse], reward: RewardFn,
              pass_threshold: float = 1.0) -> dict[str, Any]:
    """Score ``responses`` for ``row`` with ``reward``; any failed request leaves the pass rate null."""
    good = [r for r in responses if r.ok and r.choices]
    errors = len(responses) - len(good)
    k = len(responses)
    if errors or not k:
        return {"difficulty_pass_rate": None, "difficulty_k": k, "difficulty_errors": errors}
    passes = 0
    if good:
        sample = SampleRow.of(row)
        prompt = messages_to_chat(sample.prompt)
        n = len(good)
        gt = sample.ground_truth
        gt = json.loads(gt) if isinstance(gt, str) and gt else gt
        constraints = gt.get("constraints") if isinstance(gt, dict) else None
        columns = {
            "ground_truth": [gt] * n,
            "constraints": [constraints] * n,
            "target_type": [sample.target_type] * n,
            "tools": [tools_to_chat(sample.tools)] * n,
            "lang": [sample.lang] * n,
        }
        rewards = reward(prompts=[prompt] * n, completions=[response_completion(r) for r in good], **columns)
        passes = sum(1 for x in rewards if x is not None and x >= pass_threshold)
    return {"difficulty_pass_rate": passes / k, "difficulty_k": k, "difficulty_errors": errors}


class DifficultyConfig(StageConfig):
    """``filter.difficulty``: policy sampling and reward settings."""

    k: int = Field(default=8, ge=1, le=64, description="Samples per prompt.")
    model: str | None = Field(default=None, description="Policy model name at the backend; None = backend default.")
    temperature: float = Field(default=1.0, ge=0, le=2, description="Sampling temperature of the policy.")
    max_tokens: int | None = Field(default=1024, ge=1, description="Max tokens per sample.")
    pass_threshold: float = Field(default=1.0, description="A sample passes when its reward is >= this.")
    rewards: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_REWARDS),
                                    description="Expert → reward function 'module:function' (TRL signature).")


@register_stage
class DifficultyScorer(LLMStage[DifficultyConfig]):
    """Annotating stage: ``k`` policy samples per row, scored by the expert's reward."""

    per_answer = True  # a failed sample leaves the pass rate null (difficulty_errors), it rejects nothing
    kind = "filter.difficulty"
    reads = (*SAMPLE_READS, Column("ground_truth", dict[str, Any], required=False))
    writes = (Column("difficulty_pass_rate", float, required=False), Column("difficulty_k", int),
              Column("difficulty_errors", int))
    annotates: ClassVar[bool] = True
    uses_sandbox: ClassVar[bool] = True  # the IF reward runs LLM-written verifiers: fail-closed check

    async def setup(self) -> None:
        settings = getattr(getattr(self.ctx, "pipeline", None), "sandbox", None)
        if settings is None:
            return
        current = (settings, str(getattr(self.ctx, "backend_name", "model")))
        if _SANDBOX and _SANDBOX[0] != current:  # another pipeline in this process: its pool does not apply
            for reward in _IF_REWARD:
                getattr(reward, "close", lambda: None)()
            _IF_REWARD.clear()
        _SANDBOX[:] = [current]

    def requests(self, row: Row) -> list[ChatRequest]:
        cfg = self.config
        if str(SampleRow.of(row).expert or "") not in cfg.rewards:  # no reward for this expert: nothing to measure
            return []
        return build_requests(row, cfg.k, cfg.model, cfg.temperature, cfg.max_tokens)

    def parse(self, row: Row, responses: list[ChatResponse]) -> list[Row]:
        spec = self.config.rewards.get(str(SampleRow.of(row).expert or ""))
        rid = self.item_id(row)  # an annotation: one score row per input row, keyed by its id
        if spec is None:
            return [ok(rid, difficulty_pass_rate=None, difficulty_k=0, difficulty_errors=0)]
        return [ok(rid, **pass_rate(row, responses, resolve_reward(spec), self.config.pass_threshold))]


# gate group ``filters.difficulty``: thresholds on the columns above (scores are data, thresholds are config)


class DifficultyGate(BaseModel):
    """``filters.difficulty``: the pass-rate band (min, max] and the exports it applies to.

    A null pass rate (expert without a reward, or a request failed) is kept and
    counted as ``kept_null_difficulty.*`` in the funnel.
    """

    model_config = ConfigDict(extra="forbid")

    min_pass_rate_exclusive: float = Field(default=0.0, ge=0, le=1,
                                           description="Keep rows whose pass rate is > this (0: drop never-solved).")
    max_pass_rate: float = Field(default=0.8, ge=0, le=1,
                                 description="Keep rows whose pass rate is <= this (drop the too easy).")
    apply_to: list[Literal["sft", "grpo"]] = Field(
        default_factory=lambda: list[Literal["sft", "grpo"]](["grpo"]),
        description="Export kinds the band applies to: GRPO only by default (an easy prompt is a fine SFT "
        "example); [sft, grpo] applies it to the whole version; [] disables it.")

    @model_validator(mode="after")
    def _band_not_empty(self) -> "DifficultyGate":
        if self.min_pass_rate_exclusive >= self.max_pass_rate:
            raise ValueError(f"the band (min_pass_rate_exclusive, max_pass_rate] = ({self.min_pass_rate_exclusive}, "
                             f"{self.max_pass_rate}] is empty or inverted; need min_pass_rate_exclusive < max_pass_rate")
        return self


def _difficulty(p: DifficultyGate) -> list[GatePredicate]:
    col = pl.col("difficulty_pass_rate")
    kinds = set(p.apply_to)
    if not kinds:
        return []
    scope: tuple[str, ...] = () if kinds == {"sft", "grpo"} else tuple(sorted(kinds))
    return [
        GatePredicate("difficulty.min_pass_rate_exclusive", col > p.min_pass_rate_exclusive,
                      ("difficulty_pass_rate",), keep_null=True, only_for=scope),
        GatePredicate("difficulty.max_pass_rate", col <= p.max_pass_rate, ("difficulty_pass_rate",), keep_null=True,
                      only_for=scope),
    ]


register_gate_group("difficulty", DifficultyGate, _difficulty)
