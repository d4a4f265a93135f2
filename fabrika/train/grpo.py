"""`fabrika train grpo --expert if|fc|general`: a thin script over TRL's ``GRPOTrainer``.

Each expert is the same trainer with its own reward and KL β:

* ``fc`` — :func:`fabrika.rewards.fc.fc_reward` (exact match of tool calls), β = 0.001;
* ``if`` — :func:`fabrika.rewards.instruct.make_if_reward` (verifiers + RM correction; S from
  ``rm_path`` or the ``rm_score`` column, α from ``teacher_rm_mean``), β = 0.001;
* ``general`` — :func:`fabrika.rewards.general.make_general_reward` (RM × length penalty), β = 0.01.

Shared preset (reference recipe): 8 generations per prompt, lr 1e-6, T = 1.0,
clip ε 0.2 / ε_high 0.28, 512 completions per step, vLLM generation when vLLM
and a GPU are present. Per-row tools are written into the system turn (TRL
renders every prompt with one trainer-wide tool list).

Dynamic sampling (optional, off by default) keeps groups whose mean reward is
in (low, high] = (0, 0.8]. TRL cannot resample a batch, so it is done in two
honest ways:

* ``dynamic_sampling_column`` set: a *pre-filter* on a stored difficulty
  (``difficulty_pass_rate``, the pass rate of a reference policy written by
  ``fabrika.filters.difficulty``) — rows outside the band never reach the trainer;
* otherwise an *online mask*: the reward wrapper :func:`dynamic_sampling`
  returns ``None`` for every completion of an out-of-band group, which TRL
  treats as unscorable (advantage 0). The group's generation compute is still
  spent and its tokens still count in the loss normaliser; the gradient comes
  only from in-band groups. Groups are identified by equal prompts within one
  process's batch (keep ``per_device_train_batch_size`` a multiple of
  ``num_generations`` so a group never spans processes).
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from trl import GRPOConfig

from fabrika.errors import ConfigError
from fabrika.train.config import (
    EXPERT_PRESETS,
    EXPERTS,
    GRPO_PRESET,
    build_dataclass,
    read_yaml,
    required,
    resolve_checkpoint,
    save_trained,
    vllm_available,
)
from fabrika.train.data import load_split, prepare_grpo_dataset
from fabrika.train.sft import load_model_and_tokenizer

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import GRPOTrainer

    from fabrika.rewards.general import LengthUnit

RewardFn = Callable[..., list[float | None]]  # TRL's reward contract (None: not applicable to this sample)
_LENGTH_UNITS: dict[str, LengthUnit] = {"chars": "chars", "words": "words", "tokens": "tokens"}


@dataclass
class FabrikaGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` plus the expert, the data and the reward inputs.

    Parameters:
        expert (`str`): ``if``, ``fc`` or ``general`` — picks the reward and the KL β preset.
        model_name_or_path (`str`): local directory of the policy (never downloaded).
        dataset_path (`str`): directory of the exported GRPO dataset (``save_to_disk``).
        dataset_split (`str`, defaults to ``"train"``): split when the export is a ``DatasetDict``.
        torch_dtype (`str`, defaults to ``"auto"``): dtype the policy is loaded in.
        rm_path (`str` or `None`): general and IF experts — local sequence-classification RM (S / R), or
            ``sim`` (the offline stand-in RM of the demo: pipeline checks only, never a real model);
            ``None`` reads the ``rm_score`` column (per-prompt, for tests and offline checks only).
        rm_endpoint (`dict` or `None`): general and IF experts — a served RM instead of ``rm_path``
            (``fabrika.rewards.rm_service.RMEndpoint`` fields: base_url, model, api pooling|rerank|predict).
        allow_no_rm_correction (`bool`): IF expert — accept ``rm_correction: false``. Without the correction
            the IF reward is the verifier score alone, which an untrained policy's garbage already scores
            high on (the semantic collapse the correction prevents), so it is refused unless this is set
            (``fabrika train grpo --allow-no-rm-correction``).
        rm_score_column (`str`): general expert — column with R when ``rm_path`` is ``None``.
        ref_length_column (`str`): general expert — column with the reference length L0.
        length_unit (`str`): general expert — unit of L(y) and L0: ``chars``, ``words`` or ``tokens``.
        if_reward_kwargs (`dict`): IF expert — fields of ``fabrika.rewards.instruct.IFRewardConfig``.
        rubric_reward (`dict` or `None`): IF expert — use the all-rubrics-pass judge reward
            (``fabrika.rewards.rubric``), composed with the IF reward: ``RubricRewardConfig`` fields + ``llm``.
        dynamic_sampling (`bool`): keep only groups whose mean reward is in (low, high] (see module doc).
        dynamic_sampling_low / dynamic_sampling_high (`float`): the band, (0, 0.8] by default.
        dynamic_sampling_column (`str` or `None`): stored difficulty column for the pre-filter variant.
    """

    expert: str = field(default="fc", metadata={"help": "Expert to train: if, fc or general.",
                                                "choices": list(EXPERTS)})
    model_name_or_path: str | None = field(default=None, metadata={"help": "Local directory of the policy."})
    dataset_path: str | None = field(default=None, metadata={"help": "Directory of the exported GRPO dataset."})
    dataset_split: str = field(default="train", metadata={"help": "Split to use if the export is a DatasetDict."})
    torch_dtype: str = field(default="auto", metadata={"help": "dtype the policy is loaded in."})
    rm_path: str | None = field(default=None, metadata={"help": "General/IF expert: local RM directory, or `sim`."})
    rm_endpoint: dict[str, Any] | None = field(
        default=None, metadata={"help": "General/IF expert: a served RM (RMEndpoint fields) instead of rm_path."})
    allow_no_rm_correction: bool = field(
        default=False, metadata={"help": "IF expert: accept if_reward_kwargs rm_correction: false (refused otherwise)."})
    rm_score_column: str = field(default="rm_score", metadata={"help": "General expert: R column if no rm_path."})
    ref_length_column: str = field(default="ref_length", metadata={"help": "General expert: L0 column."})
    length_unit: str = field(default="chars", metadata={"help": "General expert: chars, words or tokens."})
    if_reward_kwargs: dict[str, Any] = field(default_factory=dict,
                                             metadata={"help": "IF expert: IFRewardConfig fields."})
    rubric_reward: dict[str, Any] | None = field(
        default=None, metadata={"help": "IF expert: judge rubrics too (fabrika.rewards.rubric): RubricRewardConfig "
                                "fields plus `llm` (fabrika llm settings of the judge)."})
    dynamic_sampling: bool = field(default=False, metadata={"help": "Keep groups with mean reward in (low, high]."})
    dynamic_sampling_low: float = field(default=0.0, metadata={"help": "Exclusive lower bound of the band."})
    dynamic_sampling_high: float = field(default=0.8, metadata={"help": "Inclusive upper bound of the band."})
    dynamic_sampling_column: str | None = field(
        default=None, metadata={"help": "Stored difficulty column: pre-filter rows instead of masking online."})


def load_grpo_config(expert: str, path: str | Path | None = None, overrides: dict[str, Any] | None = None, *,
                     use_preset: bool = True) -> FabrikaGRPOConfig:
    """Shared preset ← expert preset (β) ← YAML ← overrides; ``use_vllm`` defaults to availability."""
    if expert not in EXPERTS:
        raise ConfigError(f"--expert must be one of {list(EXPERTS)}, got {expert!r}")
    values: dict[str, Any] = {}
    if use_preset:
        values.update(GRPO_PRESET)
        values.update(EXPERT_PRESETS[expert])
        values["use_vllm"] = vllm_available()
    user = read_yaml(path) if path is not None else {}
    if user.get("expert", expert) != expert:
        raise ConfigError(f"config {path} says expert={user['expert']!r} but --expert is {expert!r}; make them agree")
    values.update(user)
    values.update(overrides or {})
    values["expert"] = expert
    config = build_dataclass(FabrikaGRPOConfig, values, where=f"grpo config {path or '<dict>'}")
    for name in ("model_name_or_path", "dataset_path"):
        if not getattr(config, name):
            raise ConfigError(f"grpo config: `{name}` is required; set it in the YAML or pass --set {name}=...")
    if config.length_unit not in ("chars", "words", "tokens"):
        raise ConfigError(f"grpo config: length_unit must be chars, words or tokens, got {config.length_unit!r}")
    if not 0 <= config.dynamic_sampling_low < config.dynamic_sampling_high:
        raise ConfigError("grpo config: need 0 <= dynamic_sampling_low < dynamic_sampling_high, got "
                          f"({config.dynamic_sampling_low}, {config.dynamic_sampling_high}]")
    if config.rm_path is not None and config.rm_endpoint is not None:
        raise ConfigError("grpo config: set rm_path or rm_endpoint, not both (they name the reward model)")
    if config.expert == "if" and not rm_correction_on(config) and not config.allow_no_rm_correction:
        raise ConfigError("grpo config: if_reward_kwargs turns rm_correction off, which lets an untrained policy's "
                          "garbage score high; give the rows α (rm.teacher_scores) and an RM, or pass "
                          "--allow-no-rm-correction (--set allow_no_rm_correction=true)")
    return config


def rm_correction_on(config: FabrikaGRPOConfig) -> bool:
    """Whether the IF (or rubric) reward applies the RM correction under this config."""
    if_reward = dict(config.if_reward_kwargs)
    if config.rubric_reward is not None:
        if_reward.update((config.rubric_reward or {}).get("if_reward") or {})
    return bool(if_reward.get("rm_correction", True))


def reward_model(config: FabrikaGRPOConfig) -> Any:
    """The process's one RM of ``rm_path``/``rm_endpoint`` (:mod:`fabrika.rewards.rm_service`), or None."""
    from fabrika.rewards.rm_service import RMEndpoint, RMSpec, get_reward_model

    if config.rm_endpoint is not None:
        try:
            spec = RMSpec(endpoint=RMEndpoint(**config.rm_endpoint))
        except ValueError as exc:
            raise ConfigError(f"grpo config: rm_endpoint {config.rm_endpoint!r} is not valid: {exc}") from exc
        return get_reward_model(spec)
    if config.rm_path is None:
        return None
    if config.rm_path != "sim" and not Path(config.rm_path).is_dir():
        raise ConfigError(f"grpo config: rm_path {config.rm_path!r} is not a local directory; point it at a saved "
                          "AutoModelForSequenceClassification (or `sim`, the offline stand-in)")
    return get_reward_model(config.rm_path)


def _if_config(config: FabrikaGRPOConfig) -> Any:
    from fabrika.rewards.instruct import IFRewardConfig

    try:
        return IFRewardConfig(**config.if_reward_kwargs)
    except ValueError as exc:
        raise ConfigError(f"grpo config: if_reward_kwargs {config.if_reward_kwargs!r} is not a valid "
                          f"IFRewardConfig: {exc}") from exc


def required_columns(config: FabrikaGRPOConfig) -> list[str]:
    """Dataset columns the expert's reward reads (checked before training)."""
    if config.expert == "fc":
        return ["ground_truth", "target_type"]
    if config.expert == "if":
        return [_if_config(config).constraints_column]
    cols = [config.ref_length_column]
    if config.rm_path is None and config.rm_endpoint is None:
        cols.append(config.rm_score_column)
    return cols


def _check_if_rm_columns(config: FabrikaGRPOConfig, dataset: Dataset) -> None:
    """The IF RM correction compares S with α on one scale: refuse, in one line, data where that cannot hold.

    α (``teacher_rm_mean``) must be set and finite on every row, and, when S comes from
    ``rm_path``/``rm_endpoint``, scored by that same RM (``rm_id`` equal to the service RM's ``rm_id``).
    """
    from fabrika.errors import InputError

    cfg = _if_config(config)
    if not cfg.rm_correction:
        return
    fix = ("score the prompts with an rm.teacher_scores stage using the same RM as rm_path, re-export, or set "
           "if_reward_kwargs: {rm_correction: false} with --allow-no-rm-correction")
    rm = reward_model(config)
    has_s = rm is not None or cfg.rm_score_column in dataset.column_names
    if not has_s:
        raise InputError("IF reward: rm_correction is on but there is no RM score S (no rm_path, no "
                         f"{cfg.rm_score_column!r} column); set rm_path (the RM that scored α)")
    alpha = cfg.teacher_rm_column
    if alpha not in dataset.column_names:
        raise InputError(f"IF reward: the dataset has no {alpha!r} column (α, the teacher's mean RM score); {fix}")
    arr = dataset.data.column(alpha)
    values = arr.to_pylist()
    bad = sum(1 for v in values if v is None or (isinstance(v, float) and math.isnan(v)))
    if bad:
        raise InputError(f"IF reward: α ({alpha}) is missing or NaN in {bad} of {len(values)} rows; {fix}")
    if rm is None:
        return  # S from a column (offline checks): no RM to compare identities with
    want = rm.rm_id
    if "rm_id" not in dataset.column_names:
        raise InputError(f"IF reward: the dataset has no 'rm_id' column, so α's RM is unknown (rm_path is {want}); {fix}")
    got = sorted({str(v) for v in dataset.data.column("rm_id").to_pylist()})
    if got != [want]:
        raise InputError(f"IF reward: α was scored by RM {', '.join(got)} but rm_path is {want}; {fix}")


def _trl_reward(fn: Callable[..., Sequence[float | None]]) -> RewardFn:
    """``fn`` as TRL types a reward (``list[float | None]``); ``functools.wraps`` keeps its name and ``close``."""

    @functools.wraps(fn)
    def reward(*args: Any, **kwargs: Any) -> list[float | None]:
        return list(fn(*args, **kwargs))

    return reward


def expert_reward(config: FabrikaGRPOConfig) -> RewardFn:
    """The expert's TRL reward function."""
    return _trl_reward(_expert_reward(config))


def _expert_reward(config: FabrikaGRPOConfig) -> Callable[..., Sequence[float | None]]:
    if config.expert == "fc":
        from fabrika.rewards.fc import fc_reward

        return fc_reward
    if config.expert == "if":
        from fabrika.rewards.instruct import make_if_reward

        rm_scorer = reward_model(config)
        if config.rubric_reward is not None:
            return _rubric_reward(config, rm_scorer)
        return make_if_reward(_if_config(config), rm_scorer=rm_scorer)
    from fabrika.rewards.general import make_general_reward

    return make_general_reward(reward_model(config), score_column=config.rm_score_column,
                               ref_length_column=config.ref_length_column,
                               length_unit=_LENGTH_UNITS[config.length_unit])  # checked by load_grpo_config


def _rubric_reward(config: FabrikaGRPOConfig, rm_scorer: Any) -> Callable[..., Sequence[float | None]]:
    from fabrika.rewards.rubric import RubricRewardConfig, make_rubric_reward

    spec = dict(config.rubric_reward or {})
    llm = spec.pop("llm", None)
    if not llm:
        raise ConfigError("grpo config: rubric_reward needs `llm` (the judge's fabrika llm settings, e.g. "
                          "{backend: openai, endpoints: [{base_url: ...}]})")
    try:
        cfg = RubricRewardConfig(**{"if_reward": dict(config.if_reward_kwargs), **spec})
    except ValueError as exc:
        raise ConfigError(f"grpo config: rubric_reward {spec!r} is not a valid RubricRewardConfig: {exc}") from exc
    return make_rubric_reward(cfg, llm_config=llm, rm_scorer=rm_scorer)


def dynamic_sampling(reward_fn: RewardFn, low: float = 0.0, high: float = 0.8) -> RewardFn:
    """Wrap a reward so groups whose mean reward is outside (low, high] score ``None`` (TRL: advantage 0)."""

    @functools.wraps(reward_fn)
    def wrapped(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        rewards = list(reward_fn(prompts=prompts, completions=completions, **kwargs))
        groups: dict[str, list[int]] = {}
        for i, prompt in enumerate(prompts):
            groups.setdefault(json.dumps(prompt, sort_keys=True, ensure_ascii=False), []).append(i)
        for idx in groups.values():
            values = [r for r in (rewards[i] for i in idx) if r is not None and not math.isnan(r)]
            mean = sum(values) / len(values) if values else math.nan
            if not (low < mean <= high):
                for i in idx:
                    rewards[i] = None
        return rewards

    return wrapped


def prefilter_by_difficulty(ds: Dataset, column: str, low: float, high: float) -> Dataset:
    """Keep rows whose stored difficulty is in (low, high]; an empty result is an error, not a silent no-op."""
    if column not in ds.column_names:
        raise ConfigError(f"dynamic_sampling_column {column!r} is not a dataset column (has {ds.column_names})")
    kept = ds.filter(lambda v: v is not None and low < v <= high, input_columns=[column], desc="dynamic sampling")
    if len(kept) == 0:
        raise ConfigError(f"dynamic sampling kept 0 of {len(ds)} rows with {column} in ({low}, {high}]; "
                          "widen the band or turn dynamic_sampling off")
    return kept


def _check_general_length_unit(config: FabrikaGRPOConfig, dataset: Dataset) -> None:
    """L0 and L(y) on one scale: a stored ``length_unit`` (general.teacher) must be the trainer's ``length_unit``."""
    from fabrika.errors import InputError

    if "ref_length_k" in dataset.column_names:
        ks = dataset.data.column("ref_length_k").to_pylist()
        single = sum(1 for k in ks if k == 1)
        if single:
            print(f"warning: {single} of {len(ks)} rows have an L0 (ref_length) from a single reference answer "
                  "(generic chat rows); general.teacher with k >= 4 gives a steadier L0", file=sys.stderr)
    if "length_unit" not in dataset.column_names:
        return
    units = sorted({str(u) for u in dataset.data.column("length_unit").to_pylist() if u is not None})
    if units and units != [config.length_unit]:
        raise InputError(f"general reward: ref_length (L0) is measured in {', '.join(units)} but length_unit is "
                         f"{config.length_unit!r}; set length_unit: {units[0]} or re-run general.teacher with "
                         f"length_unit: {config.length_unit}")


def build_grpo_trainer(config: FabrikaGRPOConfig, callbacks: list[Any] | None = None) -> GRPOTrainer:
    """Check data and reward first (fails fast), then load the policy and build ``GRPOTrainer``."""
    from trl import GRPOTrainer

    dataset = prepare_grpo_dataset(load_split(required(config, "dataset_path"), config.dataset_split), required_columns(config),
                                   expert=config.expert)
    if config.expert == "if":
        _check_if_rm_columns(config, dataset)
    if config.expert == "general":
        _check_general_length_unit(config, dataset)
    reward = expert_reward(config)
    if config.dynamic_sampling:
        if config.dynamic_sampling_column:
            dataset = prefilter_by_difficulty(dataset, config.dynamic_sampling_column,
                                              config.dynamic_sampling_low, config.dynamic_sampling_high)
        else:
            reward = dynamic_sampling(reward, config.dynamic_sampling_low, config.dynamic_sampling_high)
    model, tokenizer = load_model_and_tokenizer(required(config, "model_name_or_path"), config.torch_dtype)
    if not tokenizer.chat_template:
        raise ConfigError(f"the tokenizer at {config.model_name_or_path!r} has no chat template; GRPO prompts are "
                          "conversational — save the tokenizer with one")
    return GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                       processing_class=tokenizer, callbacks=callbacks)


def run_grpo(config: FabrikaGRPOConfig) -> GRPOTrainer:
    """Train (resuming when ``resume_from_checkpoint`` is a path or ``auto``) and save the expert."""
    output_dir = required(config, "output_dir")
    checkpoint = resolve_checkpoint(config.resume_from_checkpoint, output_dir)
    trainer = build_grpo_trainer(config)
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    finally:  # the IF reward may hold a sandbox pool for LLM-written verifiers
        for fn in trainer.reward_funcs:
            close = getattr(fn, "close", None)
            if callable(close):
                close()
    save_trained(trainer, output_dir)
    return trainer
