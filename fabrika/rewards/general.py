"""General-chat reward: a reward-model score with a length penalty.

    reward = R · (1 − α),   α = sgn(R) · clip(L(y) / L0(x), lo, hi)   (lo=0.1, hi=0.3)

R is the RM score of the completion y, L(y) its length and L0(x) the prompt's
reference length (the ``ref_length`` column the export writes). Only the visible
answer is scored (:func:`fabrika.textutil.reasoning.answer_text`): the RM never
sees the reasoning, and a completion with no answer (empty, reasoning only, cut
off while reasoning) gets 1 below the lowest answered completion of the batch
(0 when none answered), so within a GRPO group it is always the worst. A positive
score shrinks by 10–30 % as the answer grows relative to the reference; a
negative score grows more negative by the same factor, so padding never pays.
R = 0 stays 0.

The RM is an input, chosen by the caller:

* a local directory of a sequence-classification model, or ``"sim"`` (the offline
  stand-in): the process's one :class:`fabrika.rewards.rm_service.RewardModel` of it
  (loaded lazily with ``transformers``, ``local_files_only=True`` — never downloaded;
  torch is imported only when the first batch is scored),
* a callable ``rm(prompts, completions) -> list[float]``,
* or ``None``: R is read from a dataset column (``rm_score``). That column is a
  per-prompt number, so inside a GRPO group only the length term varies — use
  it for offline checks and tests, not as a real reward model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from fabrika.rewards.rm_local import SequenceClassifierRM, rm_identity
from fabrika.textutil.reasoning import answer_text

__all__ = ["LengthUnit", "SequenceClassifierRM", "completion_length", "general_reward", "length_alpha",
           "length_penalized", "make_general_reward", "rm_identity"]

LengthUnit = Literal["chars", "words", "tokens"]
RMCallable = Callable[[Sequence[Any], Sequence[Any]], Sequence[float]]


def _sign(x: float) -> float:
    return (x > 0) - (x < 0)


def length_alpha(r: float, length: float, ref_length: float, lo: float = 0.1, hi: float = 0.3) -> float:
    """α = sgn(R) · clip(L / L0, lo, hi)."""
    if not ref_length or ref_length <= 0 or math.isnan(ref_length):
        raise ValueError(f"ref_length must be a positive number, got {ref_length!r}; fix the export's ref_length column")
    return _sign(r) * min(max(length / ref_length, lo), hi)


def length_penalized(r: float, length: float, ref_length: float, lo: float = 0.1, hi: float = 0.3) -> float:
    """R · (1 − α) for one completion."""
    return r * (1.0 - length_alpha(r, length, ref_length, lo, hi))


def _text(completion: Any) -> str:
    """What the user sees of a completion (reasoning removed; empty when cut off while reasoning)."""
    return answer_text(completion)


def completion_length(completion: Any, unit: LengthUnit, completion_ids: Sequence[int] | None = None) -> int:
    """L(y) in ``unit`` (``tokens`` needs the completion's token ids, as TRL passes them)."""
    if unit == "chars":
        return len(_text(completion))
    if unit == "words":
        return len(_text(completion).split())
    if completion_ids is None:
        raise ValueError("length_unit='tokens' needs completion_ids; call through TRL or pass completion_ids")
    return len(completion_ids)


def make_general_reward(
    rm: str | Path | RMCallable | None = None,
    *,
    score_column: str = "rm_score",
    ref_length_column: str = "ref_length",
    length_unit: LengthUnit = "chars",
    clip: tuple[float, float] = (0.1, 0.3),
) -> Callable[..., list[float]]:
    """Build the TRL reward ``general_reward(prompts, completions, completion_ids, **columns)``.

    Args:
        rm: local RM directory, a callable ``(prompts, completions) -> scores``, or ``None`` to read
            ``score_column`` from the dataset.
        score_column: dataset column holding R when ``rm`` is ``None``.
        ref_length_column: dataset column holding L0 (same unit as ``length_unit``).
        length_unit: how L(y) is measured: ``chars``, ``words`` or ``tokens`` (policy tokens).
        clip: the (lo, hi) bounds of L/L0.
    """
    lo, hi = clip
    if not 0 <= lo <= hi:
        raise ValueError(f"clip must satisfy 0 <= lo <= hi, got {clip!r}")
    scorer: RMCallable | None
    if isinstance(rm, (str, Path)):  # the process's one instance (fabrika.rewards.rm_service), loaded on first use
        from fabrika.rewards.rm_service import get_reward_model

        scorer = get_reward_model(rm)
    else:
        scorer = rm

    def general_reward(prompts: Sequence[Any], completions: Sequence[Any],
                       completion_ids: Sequence[Sequence[int]] | None = None, **kwargs: Any) -> list[float]:
        if ref_length_column not in kwargs:
            raise ValueError(f"general reward needs the dataset column {ref_length_column!r} (L0); "
                             f"got columns {sorted(k for k in kwargs if not k.startswith(('trainer_', 'log_')))}")
        if scorer is None:
            if score_column not in kwargs:
                raise ValueError(f"general reward without an RM reads R from column {score_column!r}, which is "
                                 "missing; add it to the export or pass rm=<local RM directory>")
            scores = [float(s) for s in kwargs[score_column]]
        else:
            scores = [float(s) for s in scorer(prompts, completions)]
        refs = kwargs[ref_length_column]
        out: list[float | None] = []
        for i, completion in enumerate(completions):
            # no visible answer (empty, reasoning only, cut off while reasoning), or one the RM did not score
            # (a served RM refused its request or gave a non-finite score): the group's floor, never NaN
            if not _text(completion) or not math.isfinite(scores[i]):
                out.append(None)
                continue
            ids = completion_ids[i] if completion_ids is not None else None
            length = completion_length(completion, length_unit, ids)
            out.append(length_penalized(scores[i], length, float(refs[i]), lo, hi))
        answered = [r for r in out if r is not None]
        floor = (min(answered) - 1.0) if answered else 0.0
        return [floor if r is None else r for r in out]

    return general_reward


#: Column-driven default (R from ``rm_score``, L0 from ``ref_length``, lengths in chars), importable as
#: ``"fabrika.rewards.general:general_reward"`` where a ``module:function`` spec is expected.
general_reward = make_general_reward()
