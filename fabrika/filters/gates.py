"""Gate groups for the shared scorers (thresholds are config, contract 2).

Each group is a pydantic ``Params`` model (defaults documented field by field)
and a function returning :class:`fabrika.pipeline.gates.GatePredicate` s. A
predicate only applies to tables that carry its score columns, so a gate
group is inert until its scorer has run. Set thresholds in the pipeline YAML
(``filters: {language: {min_confidence: 0.7}}``) or ``--set
filters.language.min_confidence=0.7``; re-materialising never calls an LLM.

Reasons (the funnel's ``dropped_<reason>``) are ``<group>.<param>``.
"""

from __future__ import annotations

from typing import Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fabrika.pipeline.gates import GatePredicate, register_gate_group


class LanguageGate(BaseModel):
    """``filters.language``."""

    model_config = ConfigDict(extra="forbid")

    allowed: list[str] | None = Field(default=None, description="Detected languages to keep (ISO 639-1); "
                                      "None = any language that matches the row's own `lang`.")
    min_confidence: float = Field(default=0.5, ge=0, le=1, description="Minimum lingua confidence of the label.")
    max_homoglyph_share: float = Field(default=0.0, ge=0, le=1,
                                       description="Maximum share of Cyrillic words holding Latin look-alikes.")
    require_match: bool = Field(default=True, description="Drop rows whose detected language differs from `lang`.")


def _language(p: LanguageGate) -> list[GatePredicate]:
    preds = [
        GatePredicate("language.min_confidence", pl.col("lang_confidence") >= p.min_confidence, ("lang_confidence",),
                      keep_null=True),
        GatePredicate("language.max_homoglyph_share", pl.col("homoglyph_share") <= p.max_homoglyph_share,
                      ("homoglyph_share",), keep_null=True),
    ]
    if p.allowed is not None:
        preds.insert(0, GatePredicate("language.allowed", pl.col("lang_detected").is_in(p.allowed),
                                        ("lang_detected",), keep_null=True))
    if p.require_match:
        preds.append(GatePredicate("language.require_match", pl.col("lang_matches"), ("lang_matches",),
                                   keep_null=True))
    return preds


class DedupGate(BaseModel):
    """``filters.dedup``."""

    model_config = ConfigDict(extra="forbid")

    keep_representatives_only: bool = Field(default=True, description="Keep one row (smallest id) per cluster.")


def _dedup(p: DedupGate) -> list[GatePredicate]:
    if not p.keep_representatives_only:
        return []
    return [GatePredicate("dedup.keep_representatives_only", pl.col("dup_is_representative"),
                          ("dup_is_representative",), keep_null=True)]


class DecontamGate(BaseModel):
    """``filters.decontam``."""

    model_config = ConfigDict(extra="forbid")

    max_overlap: float = Field(default=0.5, ge=0, le=1,
                               description="Maximum share of a benchmark item's n-grams found in the row.")


def _decontam(p: DecontamGate) -> list[GatePredicate]:
    return [GatePredicate("decontam.max_overlap", pl.col("decontam_max_overlap") <= p.max_overlap,
                          ("decontam_max_overlap",), keep_null=True)]


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
        default_factory=lambda: ["grpo"],
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


class LengthGate(BaseModel):
    """``filters.length``."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=8192, ge=1, description="Maximum prompt+completion tokens; None = no cap.")
    min_completion_tokens: int = Field(default=1, ge=0, description="Minimum completion tokens (0 allows empty).")


def _length(p: LengthGate) -> list[GatePredicate]:
    preds = []
    if p.max_tokens is not None:
        preds.append(GatePredicate("length.max_tokens", pl.col("len_total_tokens") <= p.max_tokens,
                                   ("len_total_tokens",), keep_null=True))
    if p.min_completion_tokens > 0:
        preds.append(GatePredicate("length.min_completion_tokens",
                                   pl.col("len_completion_tokens") >= p.min_completion_tokens,
                                   ("len_completion_tokens",), keep_null=True))
    return preds


GROUPS = {
    "language": (LanguageGate, _language),
    "dedup": (DedupGate, _dedup),
    "decontam": (DecontamGate, _decontam),
    "difficulty": (DifficultyGate, _difficulty),
    "length": (LengthGate, _length),
}


def register_all() -> None:
    """Register every group (idempotent; called on import)."""
    for name, (params, fn) in GROUPS.items():
        register_gate_group(name, params, fn)


register_all()
