"""Branches a stage draws by a declared share: oversampled in the estimate's pilot, then reweighted.

Some stages derive from only a share of their eligible inputs, drawn per input by ``ctx.rng``
(``fc.irrelevance``' ``share: 0.3``). A pilot of a few items may draw none of them: the estimate
then said 0 requests and 0 rows, with no spread, against 26 requests and 13 rows in the run
(``fc_demo``: 11 pilot dialogues, none drawn). A share the config declares is not a share the
pilot has to guess, so the pilot draws more of them and the estimate weighs them back:

* in the pilot, such a stage below a sampled cut runs with its share raised to
  ``min(1, share / f)`` (``f``: the share of the cut stages' input the pilot reads), so it draws
  about as many as the full run will (all of its eligible inputs at a 20% pilot of a 30% share);
* its requests, tokens and ok rows are multiplied by ``share / pilot share`` (a drawn input's
  requests and outcome do not depend on the draw, so this is unbiased), with the full run's own
  draw added to their error (binomial: relative variance ``(1 - share) / draws``);
* its rows are not reweighted: an input passed over writes one row (``not_sampled``) just as a
  drawn one writes its outcome.

Deterministic: the pilot's draw is ``ctx.rng`` of each input against the raised share, the same
on every pilot. A stage declares its draws with the class attribute ``Stage.pilot_draw_shares``
(config field names).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fabrika.pipeline.estimate_model import Figure
from fabrika.pipeline.stage import STAGES


@dataclass(frozen=True)
class Draw:
    """One stage's declared share and the share its pilot ran with."""

    field: str
    share: float
    pilot_share: float

    @property
    def weight(self) -> float:
        """What a pilot figure is multiplied by (``share / pilot share``)."""
        return self.share / self.pilot_share if self.pilot_share > 0 else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "share": self.share, "pilot_share": round(self.pilot_share, 4)}


def draw_fields(kind: str) -> tuple[str, ...]:
    """The config fields of ``kind`` that are a share of inputs drawn by ``ctx.rng``."""
    cls = STAGES.get(kind)
    return tuple(cls.pilot_draw_shares) if cls is not None else ()


def pilot_draws(stages: list[Any], below_cut: set[str], fraction: float) -> dict[str, Draw]:
    """Per stage in ``below_cut`` (a cut stage or below one) with a declared share in (0, 1): the raised
    share its pilot runs with; ``fraction``: the share of the cut stages' input the pilot reads."""
    out: dict[str, Draw] = {}
    if not 0 < fraction < 1:
        return out
    for s in stages:
        if s.stage_name not in below_cut:
            continue
        for name in draw_fields(s.kind):
            share = getattr(s, name, None)
            if isinstance(share, (int, float)) and 0 < float(share) < 1:
                raised = min(1.0, float(share) / fraction)
                if raised > float(share):
                    out[s.stage_name] = Draw(name, float(share), raised)
                break  # one share per stage: two would not be independent of each other's draws
    return out


def reweigh(fig: Figure, draw: Draw, draws_full: float) -> Figure:
    """A pilot-based figure of an oversampled stage at the declared share, with the full run's draw in its error."""
    out = fig.scaled(draw.weight)
    binomial = (1.0 - draw.share) / max(1.0, draws_full)
    return Figure(out.point, out.var + out.point ** 2 * binomial)


def drawn_rows(store: Any, name: str) -> int:
    """Rows of ``name`` in the pilot that were drawn: ok, or rejected for a reason that is a verdict
    (not ``not_sampled`` / ``not_eligible``)."""
    import polars as pl

    from fabrika.pipeline.reasons import PASSED_OVER_REASONS

    lf = store.scan_raw(name)
    if lf is None:
        return 0
    cols = lf.collect_schema().names()
    if "status" not in cols:
        return int(lf.select(pl.len()).collect().item())
    key = pl.col("reason").cast(pl.Utf8).str.split(":").list.first().str.strip_chars() if "reason" in cols \
        else pl.lit("")
    drawn = (pl.col("status") == "ok") | ~key.fill_null("").is_in(sorted(PASSED_OVER_REASONS))
    return int(lf.filter(drawn).select(pl.len()).collect().item())
