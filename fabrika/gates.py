"""Gates: thresholds applied to score columns when rows are read or materialised.

Scores are data, thresholds are config (DESIGN contract 2). A filters module
registers a *gate group*: a pydantic ``Params`` model (the thresholds, with
defaults) and a function turning params into :class:`GatePredicate` s::

    class LangParams(BaseModel):
        model_config = ConfigDict(extra="forbid")
        min_ru_share: float = Field(0.8, ge=0, le=1, description="...")

    register_gate_group("language", LangParams,
        lambda p: [GatePredicate("language", pl.col("ru_share") >= p.min_ru_share, ("ru_share",))])

A predicate is ``True`` for rows to keep and applies to a table only when all its
``columns`` are present, so stage-specific gates act where their scores are.
A null score fails (``keep_null=False``) unless the predicate says otherwise.
The built-in ``status`` gate drops rows whose ``status`` (or an annotation's
``status__<scorer>``) is not ``"ok"``, with reason ``rejected``.
Each dropped row records the FIRST gate that dropped it in ``dropped_by``; the
funnel counts ``dropped_<reason>`` (datatrove style). Rows a ``keep_null``
predicate let through *because their score is missing* are counted too
(``kept_null_<reason>``): a null score is never admitted without a number.

A predicate may be scoped to export kinds (``only_for=("grpo",)``): it never drops
a row from a version (nor from a stage's input at run time); instead the row's
first failing scoped reason per kind lands in ``dropped_by__<kind>``, and the
export of that kind leaves the row out (the funnel counts
``<kind>.dropped_<reason>``). Difficulty is the example: a prompt every sample
solves teaches GRPO nothing but is a fine SFT target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import polars as pl
from pydantic import BaseModel, ValidationError

from fabrika.errors import ConfigError
from fabrika.textutil.suggest import did_you_mean

DROPPED_BY = "dropped_by"
#: Per-row flag columns (prefix + reason) marking rows kept only because a keep_null score was missing.
KEPT_NULL = "__kept_null__"
#: Column prefix of export-kind-scoped decisions: ``dropped_by__grpo``.
SCOPED = f"{DROPPED_BY}__"


@dataclass(frozen=True)
class GatePredicate:
    """Keep rows where ``expr`` is true; otherwise they are dropped with ``reason``."""

    reason: str
    expr: pl.Expr
    columns: tuple[str, ...]
    keep_null: bool = False
    only_for: tuple[str, ...] = ()  # export kinds this gate applies to; () = everywhere


@dataclass(frozen=True)
class GateGroup:
    name: str
    Params: type[BaseModel]
    predicates: Callable[[Any], list[GatePredicate]]


GATE_GROUPS: dict[str, GateGroup] = {}


def register_gate_group(
    name: str, Params: type[BaseModel], predicates: Callable[[Any], list[GatePredicate]]
) -> None:
    """Make ``filters.<name>.*`` thresholds usable in YAML and ``--set``."""
    if name in GATE_GROUPS and GATE_GROUPS[name].Params is not Params:
        raise ValueError(f"gate group {name!r} is registered twice")
    GATE_GROUPS[name] = GateGroup(name, Params, predicates)


def _known() -> str:
    return ", ".join(sorted(GATE_GROUPS)) or "(none registered)"


def validate_thresholds(thresholds: Mapping[str, Any] | None) -> dict[str, BaseModel]:
    """Params of every registered group: defaults, overridden by ``thresholds``.

    Raises :class:`ConfigError` naming the first unknown group or bad value.
    """
    thresholds = dict(thresholds or {})
    for unknown in thresholds:
        if unknown not in GATE_GROUPS:
            raise ConfigError(f"filters.{unknown}: unknown gate group; known: {_known()}{did_you_mean(unknown, GATE_GROUPS)}")
    out: dict[str, BaseModel] = {}
    for name, group in sorted(GATE_GROUPS.items()):
        values = thresholds.get(name) or {}
        if not isinstance(values, Mapping):
            raise ConfigError(f"filters.{name}: expected a mapping of parameters, got {values!r}")
        try:
            out[name] = group.Params.model_validate(dict(values))
        except ValidationError as exc:
            raise ConfigError(_one_line(exc, f"filters.{name}", group.Params)) from exc
    return out


def _one_line(exc: ValidationError, prefix: str, Params: type[BaseModel]) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    allowed = ", ".join(Params.model_fields)
    if err["type"] == "extra_forbidden":
        return f"{prefix}.{loc}: unknown parameter; allowed: {allowed}{did_you_mean(str(err['loc'][-1]), Params.model_fields)}"
    return f"{prefix}.{loc}: {err['msg']} (got {err.get('input')!r})"


def thresholds_dump(params: Mapping[str, BaseModel]) -> dict[str, dict[str, Any]]:
    """JSON-able thresholds (what a version records in ``thresholds.json``)."""
    return {name: p.model_dump(mode="json") for name, p in sorted(params.items())}


def _threshold_address(item: str) -> tuple[str, str, str]:
    """``filters.GROUP.PARAM=VALUE`` -> (group, param, raw value): the address ``fabrika run --set`` uses."""
    key, sep, raw = item.partition("=")
    parts = key.strip().split(".")
    if sep and len(parts) == 3 and parts[0] == "filters" and all(parts):
        return parts[1], parts[2], raw
    if sep and len(parts) == 2 and all(parts) and parts[0] != "filters":  # the short form older docs used
        fix = f"write filters.{key.strip()}={raw}"
    elif sep and parts[0] not in ("", "filters"):
        fix = f"only gate thresholds change without an LLM call; for {key.strip()} rerun `fabrika run CONFIG --set {item}`"
    else:
        fix = "e.g. filters.language.min_ru_share=0.9"
    raise ConfigError(f"--set {item!r}: a threshold is addressed as filters.GROUP.PARAM=VALUE "
                      f"(as in `fabrika run --set`); {fix}")


def parse_set(assignments: Sequence[str], base: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Apply ``--set filters.GROUP.PARAM=VALUE`` overrides to ``base`` thresholds, checking each.

    The address is the threshold's path in the pipeline document, so one ``--set`` means the same in
    ``fabrika run`` and ``fabrika refilter``. Values are YAML scalars (``0.5``, ``true``, ``ru``) or flow
    collections (``[ru, en]``). Raises :class:`ConfigError` with one line naming the gate/param and the
    allowed ones.
    """
    out: dict[str, dict[str, Any]] = {k: dict(v or {}) for k, v in (base or {}).items()}
    for item in assignments:
        group, param, raw = _threshold_address(item)
        if group not in GATE_GROUPS:
            raise ConfigError(f"--set {item!r}: unknown gate group {group!r}; known: {_known()}"
                              f"{did_you_mean(group, GATE_GROUPS)}")
        Params = GATE_GROUPS[group].Params
        if param not in Params.model_fields:
            raise ConfigError(
                f"--set {item!r}: unknown parameter {param!r} of gate {group!r}; allowed: {', '.join(Params.model_fields)}"
                f"{did_you_mean(param, Params.model_fields)}"
            )
        import yaml  # here: readers of gates (``fabrika browse``) never parse ``--set``

        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        trial = {**out.get(group, {}), param: value}
        try:
            Params.model_validate(trial)
        except ValidationError as exc:
            raise ConfigError(f"--set {item!r}: " + _one_line(exc, f"filters.{group}", Params)) from exc
        out[group] = trial
    return out


def status_predicates(columns: Sequence[str]) -> list[GatePredicate]:
    """The built-in gate: a row whose own or an annotation's status is not ``ok`` is ``rejected``."""
    preds = []
    for col in columns:
        if col == "status" or col.startswith("status__"):
            # A missing annotation (scorer not run on that id) is not a rejection: its scores are null.
            preds.append(GatePredicate("rejected", pl.col(col) == "ok", (col,), keep_null=col != "status"))
    return preds


def active_predicates(columns: Sequence[str], params: Mapping[str, BaseModel]) -> list[GatePredicate]:
    """Predicates that apply to a table with ``columns``, status gate first, then groups by name."""
    present = set(columns)
    preds = status_predicates(columns)
    for name in sorted(params):
        for p in GATE_GROUPS[name].predicates(params[name]):
            if set(p.columns) <= present:
                preds.append(p)
    return preds


def _first_failing(preds: Sequence[GatePredicate]) -> pl.Expr:
    expr: Any = pl
    for p in preds:
        expr = expr.when(~p.expr.fill_null(p.keep_null)).then(pl.lit(p.reason))
    return expr.otherwise(pl.lit(None, dtype=pl.String))


def mark_dropped(lf: pl.LazyFrame, thresholds: Mapping[str, Any] | None,
                 *, scoped: bool = True) -> tuple[pl.LazyFrame, list[str]]:
    """Add ``dropped_by`` (the first failing gate's reason, null for kept rows). Returns reasons in order.

    Also adds a ``__kept_null__<reason>`` flag per ``keep_null`` predicate (true where the
    row passed only because the score was null) and, with ``scoped``, a ``dropped_by__<kind>``
    column per export kind that scoped predicates name. :func:`funnel_of` counts them all.
    """
    params = validate_thresholds(thresholds)
    preds = active_predicates(lf.collect_schema().names(), params)
    everywhere = [p for p in preds if not p.only_for]
    marked = lf.with_columns(_first_failing(everywhere).alias(DROPPED_BY) if everywhere
                             else pl.lit(None, dtype=pl.String).alias(DROPPED_BY))
    counted = preds if scoped else everywhere
    flags = [pl.any_horizontal([p.expr.is_null() for p in counted if p.reason == r]).alias(KEPT_NULL + r)
             for r in dict.fromkeys(p.reason for p in counted if p.keep_null)]
    if scoped:
        kinds = sorted({k for p in preds for k in p.only_for})
        flags += [_first_failing([p for p in preds if k in p.only_for]).alias(SCOPED + k) for k in kinds]
    if flags:
        marked = marked.with_columns(flags)
    return marked, [p.reason for p in everywhere]


def marker_columns(names: Sequence[str]) -> list[str]:
    """The bookkeeping columns :func:`mark_dropped` added (what :func:`funnel_of` reads)."""
    return [c for c in names if c == DROPPED_BY or c.startswith((KEPT_NULL, SCOPED))]


def funnel_of(marked: pl.LazyFrame, reasons: Sequence[str] = ()) -> dict[str, int]:
    """``{"in", "out", "dropped_<reason>"..., "kept_null_<reason>"..., "<kind>.dropped_<reason>"...}``."""
    names = marked.collect_schema().names()
    agg = marked.group_by(DROPPED_BY).len().collect()
    funnel: dict[str, int] = {"in": 0, "out": 0}
    funnel.update({f"dropped_{r}": 0 for r in reasons})
    for reason, n in agg.iter_rows():
        funnel["in"] += n
        if reason is None:
            funnel["out"] += n
        else:
            funnel[f"dropped_{reason}"] = funnel.get(f"dropped_{reason}", 0) + n
    kept = marked.filter(pl.col(DROPPED_BY).is_null())
    flags = [c for c in names if c.startswith(KEPT_NULL)]
    if flags:
        row = kept.select([pl.col(c).sum().alias(c) for c in flags]).collect().row(0)
        funnel.update({f"kept_null_{c[len(KEPT_NULL):]}": int(v) for c, v in zip(flags, row) if v})
    for col in (c for c in names if c.startswith(SCOPED)):
        kind = col[len(SCOPED):]
        counts = kept.group_by(col).len().collect()
        funnel[f"{kind}.out"] = 0
        for reason, n in counts.iter_rows():
            key = f"{kind}.out" if reason is None else f"{kind}.dropped_{reason}"
            funnel[key] = funnel.get(key, 0) + n
    return funnel


def apply_gates(lf: pl.LazyFrame, thresholds: Mapping[str, Any] | None) -> tuple[pl.LazyFrame, dict[str, int]]:
    """Kept rows (lazy, without ``dropped_by``) and the funnel counts."""
    marked, reasons = mark_dropped(lf, thresholds)
    kept = marked.filter(pl.col(DROPPED_BY).is_null()).drop(marker_columns(marked.collect_schema().names()))
    return kept, funnel_of(marked, reasons)


def gate_lazy(lf: pl.LazyFrame, thresholds: Mapping[str, Any] | None) -> pl.LazyFrame:
    """Only the kept rows, lazily (no counting pass) — what a downstream stage reads (export-scoped gates ignored)."""
    marked, _ = mark_dropped(lf, thresholds, scoped=False)
    return marked.filter(pl.col(DROPPED_BY).is_null()).drop(marker_columns(marked.collect_schema().names()))
