"""The run explorer's page: rows for the offline report, and the HTML both the report and ``fabrika browse`` serve.

A small run goes into the page whole (every row of every stage, up to
:attr:`BrowserLimits.max_rows`), so the offline page pages and searches exactly what
``fabrika browse`` does. A bigger run gets a bounded sample per stage — kept rows and,
for each gate and each reason, a few rows with the gate, threshold or raw answer — and
the page says that ``fabrika browse RUN`` pages through every row. Counts are always the
whole run's (:meth:`RunExplorer.summary`, equal to ``fabrika status``).

The UI is one script (``templates/explorer.js``) with two data sources: the page's JSON
block, or the browse server's ``api/rows``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import polars as pl

from fabrika.export.explorer import GROUPS, MAX_CELL_CHARS, RunExplorer

__all__ = ["MAX_CELL_CHARS", "BrowserLimits", "collect_samples", "explorer_html", "script_json"]


@dataclass(frozen=True)
class BrowserLimits:
    """How much of a run goes into the offline page."""

    #: runs with at most this many rows (all browsable stages together) go into the page whole
    max_rows: int = 5_000
    kept_per_stage: int = 30
    per_reason: int = 4
    reasons_per_stage: int = 20
    #: full request bodies embedded in the page (characters of JSON, all requests together)
    body_chars: int = 8_000_000


def _sample(explorer: RunExplorer, stage: str, limits: BrowserLimits) -> pl.DataFrame:
    """Index rows of a bounded sample: kept/ok rows, then a few per gate and per reason (most frequent first)."""
    idx = explorer.index(stage).frame
    parts = [idx.filter(pl.col("group").is_in(["kept", "ok"])).head(limits.kept_per_stage)]
    other = idx.filter(~pl.col("group").is_in(["kept", "ok"])).with_columns(
        pl.coalesce(pl.col("gate"), pl.col("_r")).alias("_k"))
    top = (other.group_by("_k").len().sort(["len", "_k"], descending=[True, False]).head(limits.reasons_per_stage)
           .get_column("_k").to_list())
    for key in top:
        parts.append(other.filter(pl.col("_k") == key).sort("id").head(limits.per_reason).drop("_k"))
    return pl.concat(parts)


def collect_samples(explorer: RunExplorer, limits: BrowserLimits = BrowserLimits()) -> dict[str, Any]:
    """``{"complete", "samples", "diffs"}`` for the offline page.

    ``samples``: rows as :meth:`RunExplorer.rows` gives them (``_stage``, ``_group``, ``_reason``,
    ``_gate``, ``_threshold``, ``_scores``), every row when the run is small (``complete``), else
    a sample per stage. ``diffs``: per other version and dataset stage, the ids this version
    added and removed (only when complete: otherwise the rows behind them are not in the page).
    """
    stages = explorer.stages()
    total = sum(explorer.index(s).frame.height for s in stages)
    complete = total <= limits.max_rows
    samples: list[dict[str, Any]] = []
    for stage in stages:
        idx = explorer.index(stage).frame
        if complete:
            order = {g: i for i, g in enumerate(GROUPS)}
            chosen = idx.with_columns(pl.col("group").replace_strict(order, return_dtype=pl.Int32).alias("_g")) \
                .sort(["_g", "gate", "_r"], maintain_order=True, nulls_last=True).drop("_g")
        else:
            chosen = _sample(explorer, stage, limits)
        samples.extend(explorer.rows(stage, chosen, upstream=True))
    diffs: dict[str, dict[str, dict[str, list[str]]]] = {}
    if complete and explorer.version:
        for other in explorer.versions:
            if other == explorer.version:
                continue
            diffs[other] = {s: {g: explorer.select(s, g, vs=other)["id"].to_list() for g in ("added", "removed")}
                            for s in explorer.dataset_stages if s in stages}
    return {"complete": complete, "samples": samples, "diffs": diffs, "bodies": _bodies(explorer, samples, limits)}


def _bodies(explorer: RunExplorer, samples: list[dict[str, Any]], limits: BrowserLimits) -> dict[str, Any]:
    """Full request bodies for the page's rows (each request once), up to ``limits.body_chars`` in all; the rest
    show their excerpts only (``fabrika browse`` opens any of them)."""
    keys = sorted({e["key"] for r in samples for step in r.get("_requests", ()) for e in step["requests"]
                   if e.get("recorded")})
    out: dict[str, Any] = {}
    used = 0
    for key, full in explorer.requests.full_many(keys).items():
        size = len(json.dumps(full, ensure_ascii=False, default=str))
        if used + size > limits.body_chars:
            break
        out[key] = full
        used += size
    return out


def template(name: str) -> str:
    return resources.files("fabrika.export").joinpath("templates", name).read_text(encoding="utf-8")


def script_json(value: Any) -> str:
    """JSON safe inside ``<script>``: no ``</script>`` or ``<!--`` can end or confuse the block."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace(
        "\u2028", "\\u2028").replace("\u2029", "\\u2029")


def explorer_html(data: dict[str, Any]) -> str:
    """The explorer's markup and script over ``data`` (``mode``, ``summary``, and for the offline page ``samples``)."""
    return "\n".join([
        "<div id='counts'></div>",
        "<div class='controls'>"
        "<label>stage <select id='f-stage'></select></label>"
        "<label>rows <select id='f-group'></select></label>"
        "<label>gate / reason <select id='f-reason'></select></label>"
        "<label>version <select id='f-vs'></select></label>"
        "<label>search <input id='f-text' type='search' placeholder='a value (not a field name)'></label>"
        "<button id='prev' type='button'>‹ prev</button><button id='next' type='button'>next ›</button>"
        "<span id='shown'></span></div>",
        "<div id='samples'></div>",
        "<script type='application/json' id='fabrika-samples'>" + script_json(data) + "</script>",
        f"<script>{template('explorer.js')}</script>",
    ])
