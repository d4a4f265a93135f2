"""Mixing: sample an exact-size dataset with target shares per column.

A mix is a list of dimensions. Each dimension maps groups of a column's values
to target shares (``lang``: en 0.7 / ru 0.3). A dimension may apply only inside
a group of an earlier one (irrelevance is 10% *of the text targets*). Dimensions
are treated as independent, so the target of a cell (en × text × irrelevance) is
the product of its shares; integer counts come from largest-remainder rounding,
so the output has exactly ``size`` rows.

Selection is deterministic and independent of input order: inside each cell rows
are ranked by ``sha256(seed:id)`` and the first ``n`` taken. If a cell has fewer
rows than it needs, :class:`MixInfeasibleError` lists every short cell with the
numbers, instead of silently returning a different mix.

Kind-level mixing (``kinds: {general: 0.5, if: 0.25, fc: 0.25}``) first splits
``size`` across data kinds (the ``expert`` column; rows without one are general
chat) by the same largest-remainder rounding, then fills each kind's count: the
kind named by ``dimensions_kind`` (FC) through the dimensions above, the others by
the same seeded ranking. A kind with too few rows fails with the missing count per
kind (:func:`mix_kinds`). Without ``kinds`` nothing of this runs.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fabrika.errors import ConfigError

_STAR = "*"


class MixInfeasibleError(ConfigError):
    """The data cannot satisfy the requested shares at the requested size."""

    def __init__(self, size: int, missing: list[dict[str, Any]]) -> None:
        self.size = size
        self.missing = missing
        lines = [f"  {m['cell']}: need {m['needed']}, have {m['available']}, missing {m['missing']}" for m in missing]
        super().__init__(
            f"mix of size {size} is infeasible; short cells:\n" + "\n".join(lines)
            + "\nfix: lower `size`, relax the shares, or generate more rows of those classes"
        )


class MixDimension(BaseModel):
    """Target shares over one column."""

    model_config = ConfigDict(extra="forbid")

    column: str = Field(description="Column whose values are mixed, e.g. 'lang' or 'target_type'.")
    shares: dict[str, float] = Field(description="Group label → target share; shares sum to 1.")
    groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Group label → column values it covers; a label without an entry covers the value equal to it.",
    )
    when: dict[str, str] | None = Field(
        default=None,
        description="Apply only to rows whose earlier dimension (by column) falls in this group, "
        "e.g. {'target_type': 'text'}; other rows are unconstrained by this dimension.",
    )
    label: str | None = Field(default=None, description="Name in reports; defaults to the column.")

    @model_validator(mode="after")
    def _check(self) -> "MixDimension":
        bad = {k: v for k, v in self.shares.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"mix shares of {self.column!r} must be in [0, 1], got {bad}")
        total = sum(self.shares.values())
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"mix shares of {self.column!r} must sum to 1, got {total:.6f} ({self.shares})")
        seen: dict[str, str] = {}
        for label in self.shares:
            for value in self.values_of(label):
                if value in seen:
                    raise ValueError(f"value {value!r} of {self.column!r} is in groups {seen[value]!r} and {label!r}")
                seen[value] = label
        return self

    @property
    def name(self) -> str:
        return self.label or self.column

    def values_of(self, label: str) -> list[str]:
        return list(self.groups.get(label, [label]))


def reference_dimensions() -> list[MixDimension]:
    """The reference recipe: 70% en / 30% ru; 80% tool calls / 20% text; irrelevance 10% of text."""
    return [
        MixDimension(column="lang", shares={"en": 0.7, "ru": 0.3}),
        MixDimension(column="target_type", shares={"tool_call": 0.8, "text": 0.2},
                     groups={"tool_call": ["tool_call"], "text": ["text", "clarification", "irrelevance"]}),
        MixDimension(column="target_type", label="text_kind", shares={"irrelevance": 0.1, "other": 0.9},
                     groups={"irrelevance": ["irrelevance"], "other": ["text", "clarification"]},
                     when={"target_type": "text"}),
    ]


class MixConfig(BaseModel):
    """A mix request: exact size, seed and dimensions."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=1, description="Exact number of output rows.")
    seed: int = Field(default=0, description="Seed of the per-row ranking; same seed, same rows.")
    dimensions: list[MixDimension] = Field(default_factory=reference_dimensions,
                                           description="Target shares; default is the reference recipe.")
    kinds: dict[str, float] | None = Field(
        default=None, description="Data kind → exact share of `size` (e.g. general 0.5, if 0.25, fc 0.25); "
        "`dimensions` then apply inside `dimensions_kind` only. None = no kind-level mix.")
    kind_column: str = Field(default="expert", description="Column naming a row's data kind; null = 'general'.")
    dimensions_kind: str = Field(default="fc", description="With `kinds`: the kind whose rows `dimensions` mix.")

    @model_validator(mode="after")
    def _check_kinds(self) -> "MixConfig":
        if self.kinds is None:
            if not self.dimensions:
                raise ValueError("mix needs at least one dimension (or `kinds`)")
            return self
        if self.kind_column == "expert":  # the kinds are the experts; a typo must not read as "0 rows available"
            import difflib
            import typing

            from fabrika.schemas.records import Expert

            known = list(typing.get_args(Expert))
            unknown = [k for k in self.kinds if k not in known]
            if unknown:
                hints = "; ".join(f"{k!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(
                    k, known, n=1)) else "") for k in unknown)
                raise ValueError(f"unknown kind {hints}; kinds are {', '.join(known)} (the `expert` column; rows "
                                 "without one are general)")
        bad = {k: v for k, v in self.kinds.items() if not 0.0 <= v <= 1.0}
        if bad or not self.kinds:
            raise ValueError(f"mix kinds shares must be in [0, 1], got {bad or self.kinds}")
        total = sum(self.kinds.values())
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"mix kinds shares must sum to 1, got {total:.6f} ({self.kinds})")
        return self

    @model_validator(mode="after")
    def _check_when(self) -> "MixConfig":
        for i, dim in enumerate(self.dimensions):
            for col, label in (dim.when or {}).items():
                parents = [d for d in self.dimensions[:i] if d.column == col and d.when is None]
                if not parents:
                    raise ValueError(f"dimensions[{i}].when refers to {col!r}, which no earlier unconditional "
                                     f"dimension mixes; add it before dimensions[{i}]")
                if label not in parents[0].shares:
                    raise ValueError(f"dimensions[{i}].when: {label!r} is not a group of {col!r} "
                                     f"(groups: {sorted(parents[0].shares)})")
        return self


class MixReport(BaseModel):
    """What a mix asked for and what it got."""

    size: int
    seed: int
    cells: list[dict[str, Any]] = Field(description="Per cell: labels, target share, rows taken, rows available.")
    target_shares: dict[str, dict[str, float]] = Field(description="Dimension → group → target share (within scope).")
    achieved_shares: dict[str, dict[str, float]] = Field(description="Dimension → group → achieved share.")
    unassigned_rows: int = Field(description="Input rows whose values fall in no group (never selected).")
    kinds: list[dict[str, Any]] | None = Field(
        default=None, description="Kind-level mix: per kind its target share, rows taken, achieved share, available.")


def _label_expr(i: int, dim: MixDimension, dims: list[MixDimension]) -> pl.Expr:
    expr: Any = None
    for label in dim.shares:
        cond = pl.col(dim.column).cast(pl.String).is_in(dim.values_of(label))
        expr = pl.when(cond).then(pl.lit(label)) if expr is None else expr.when(cond).then(pl.lit(label))
    out = expr.otherwise(pl.lit(None, dtype=pl.String))
    if dim.when:
        scope = pl.lit(True)
        for col, label in dim.when.items():
            parent = next(j for j, d in enumerate(dims[:i]) if d.column == col and d.when is None)
            scope = scope & (pl.col(f"__mix{parent}") == label)
        out = pl.when(scope).then(out).otherwise(pl.lit(_STAR))
    return out.alias(f"__mix{i}")


def _cell_targets(dims: list[MixDimension]) -> dict[tuple[str, ...], float]:
    targets: dict[tuple[str, ...], float] = {}
    for combo in itertools.product(*[list(d.shares) + [_STAR] if d.when else list(d.shares) for d in dims]):
        share = 1.0
        valid = True
        for i, (dim, label) in enumerate(zip(dims, combo)):
            in_scope = all(combo[next(j for j, d in enumerate(dims[:i]) if d.column == c and d.when is None)] == lab
                           for c, lab in (dim.when or {}).items())
            if dim.when and not in_scope:
                valid &= label == _STAR
                continue
            if label == _STAR:
                valid = False
                break
            share *= dim.shares[label]
        if valid:
            targets[combo] = share
    return targets


def _largest_remainder(targets: dict[tuple[str, ...], float], size: int) -> dict[tuple[str, ...], int]:
    raw = {k: v * size for k, v in targets.items()}
    counts = {k: int(v) for k, v in raw.items()}
    left = size - sum(counts.values())
    for k in sorted(raw, key=lambda k: (-(raw[k] - counts[k]), k))[:left]:
        counts[k] += 1
    return counts


def rank_key(seed: int, ids: list[str]) -> list[int]:
    """Order-independent per-row rank: the first 8 bytes of ``sha256(f"{seed}:{id}")``."""
    return [int.from_bytes(hashlib.sha256(f"{seed}:{i}".encode()).digest()[:8], "big") >> 1 for i in ids]


def mix(frame: pl.DataFrame | pl.LazyFrame, config: MixConfig) -> tuple[pl.LazyFrame, MixReport]:
    """Select exactly ``config.size`` rows with the target shares.

    Only ``id`` and the mixed columns are collected for planning; the returned
    lazy frame semi-joins the chosen ids back onto ``frame`` in source order
    (which rows are chosen does not depend on that order; shuffling is the trainer's job).
    """
    if config.kinds is not None:
        return mix_kinds(frame, config)
    lf = frame.lazy()
    dims = config.dimensions
    needed_cols = sorted({"id", *(d.column for d in dims)})
    missing_cols = [c for c in needed_cols if c not in lf.collect_schema().names()]
    if missing_cols:
        raise ConfigError(f"mix needs columns {missing_cols} that the dataset lacks; "
                          f"remove those dimensions or export a dataset that has them")
    plan = lf.select(needed_cols).with_columns(pl.col("id").cast(pl.String))
    for i, dim in enumerate(dims):
        plan = plan.with_columns(_label_expr(i, dim, dims))
    labels = [f"__mix{i}" for i in range(len(dims))]
    table = plan.collect()
    assigned = pl.all_horizontal([pl.col(c).is_not_null() for c in labels])
    unassigned = table.height - table.filter(assigned).height
    table = table.filter(assigned)
    table = table.with_columns(pl.Series("__rank", rank_key(config.seed, table["id"].to_list()), dtype=pl.UInt64))
    available = {tuple(r[:-1]): r[-1] for r in table.group_by(labels).len().iter_rows()}
    targets = _cell_targets(dims)
    counts = _largest_remainder(targets, config.size)
    short = [
        {"cell": dict(zip([d.name for d in dims], k)), "needed": n, "available": available.get(k, 0),
         "missing": n - available.get(k, 0)}
        for k, n in counts.items() if n > available.get(k, 0)
    ]
    if short:
        raise MixInfeasibleError(config.size, short)
    quota = pl.DataFrame({**{c: [k[i] for k in counts] for i, c in enumerate(labels)},
                          "__quota": list(counts.values())}, schema_overrides={"__quota": pl.UInt32})
    chosen = (
        table.join(quota, on=labels, how="inner")
        .sort("__rank", "id")
        .filter(pl.int_range(pl.len()).over(labels) < pl.col("__quota"))
    )
    report = _report(chosen, dims, targets, counts, available, config, unassigned)
    selection = chosen.select("id").lazy()
    # A semi join in source order keeps the payload streaming (a sort would load it all).
    out = lf.with_columns(pl.col("id").cast(pl.String)).join(selection, on="id", how="semi", maintain_order="left")
    return out, report


def _report(chosen: pl.DataFrame, dims: list[MixDimension], targets: dict[tuple[str, ...], float],
            counts: dict[tuple[str, ...], int], available: dict[tuple[str, ...], int],
            config: MixConfig, unassigned: int) -> MixReport:
    achieved: dict[str, dict[str, float]] = {}
    target_shares: dict[str, dict[str, float]] = {}
    for i, dim in enumerate(dims):
        col = chosen[f"__mix{i}"]
        scoped = col.filter(col != _STAR)
        n = max(scoped.len(), 1)
        achieved[dim.name] = {label: round(int((scoped == label).sum()) / n, 6) for label in dim.shares}
        target_shares[dim.name] = dict(dim.shares)
    cells = [
        {"cell": dict(zip([d.name for d in dims], k)), "target_share": round(targets[k], 6),
         "rows": counts[k], "available": available.get(k, 0)}
        for k in counts
    ]
    return MixReport(size=chosen.height, seed=config.seed, cells=cells, target_shares=target_shares,
                     achieved_shares=achieved, unassigned_rows=unassigned)


def _kind_expr(lf: pl.LazyFrame, column: str) -> pl.Expr:
    if column not in lf.collect_schema().names():
        return pl.lit("general").alias("__kind")
    return pl.col(column).cast(pl.String).fill_null("general").alias("__kind")


def mix_kinds(frame: pl.DataFrame | pl.LazyFrame, config: MixConfig) -> tuple[pl.LazyFrame, MixReport]:
    """Exact shares across data kinds; ``config.dimensions`` apply inside ``config.dimensions_kind``."""
    assert config.kinds is not None
    lf = frame.lazy().with_columns(pl.col("id").cast(pl.String))
    plan = lf.select("id", _kind_expr(lf, config.kind_column)).collect()
    available = {str(k): int(v) for k, v in plan.group_by("__kind").len().iter_rows()}
    counts = {k[0]: n for k, n in _largest_remainder({(k,): v for k, v in config.kinds.items()}, config.size).items()}
    short = [{"cell": {"kind": k}, "needed": n, "available": available.get(k, 0), "missing": n - available.get(k, 0)}
             for k, n in counts.items() if n > available.get(k, 0)]
    if short:
        raise MixInfeasibleError(config.size, short)
    chosen: list[pl.DataFrame] = []
    inner: MixReport | None = None
    for kind, n in counts.items():
        if n == 0:
            continue
        ids = plan.filter(pl.col("__kind") == kind).select("id")
        if kind == config.dimensions_kind and config.dimensions:
            sub = lf.join(ids.lazy(), on="id", how="semi")
            inner_cfg = MixConfig(size=n, seed=config.seed, dimensions=config.dimensions)
            try:
                picked, inner = mix(sub, inner_cfg)
            except MixInfeasibleError as exc:
                raise MixInfeasibleError(config.size, [{**m, "cell": {"kind": kind, **m["cell"]}}
                                                       for m in exc.missing]) from exc
            chosen.append(picked.select("id").collect())
        else:
            ranked = ids.with_columns(pl.Series("__rank", rank_key(config.seed, ids["id"].to_list()), dtype=pl.UInt64))
            chosen.append(ranked.sort("__rank", "id").head(n).select("id"))
    selection = pl.concat(chosen) if chosen else pl.DataFrame({"id": []}, schema={"id": pl.String})
    size = selection.height
    kinds = [{"kind": k, "target_share": round(config.kinds[k], 6), "rows": counts[k],
              "achieved_share": round(counts[k] / size, 6) if size else 0.0, "available": available.get(k, 0)}
             for k in config.kinds]
    unassigned = sum(v for k, v in available.items() if k not in config.kinds)
    report = MixReport(size=size, seed=config.seed, cells=inner.cells if inner else [],
                       target_shares=inner.target_shares if inner else {},
                       achieved_shares=inner.achieved_shares if inner else {},
                       unassigned_rows=unassigned + (inner.unassigned_rows if inner else 0), kinds=kinds)
    out = lf.join(selection.lazy(), on="id", how="semi", maintain_order="left")
    return out, report
