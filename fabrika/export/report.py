"""``fabrika report RUN``: one static, self-contained HTML page about a run.

Order follows what a reader asks first: where did rows go (the funnel per
stage and per gate), then what the kept data looks like (lengths, language and
target-type shares, tools per sample, turns per sample), then what it cost
(requests, tokens, cache hits, failures). Everything comes from the manifest,
the store's counts and the latest (or named) version; sample statistics are
computed on at most ``max_rows`` rows so the report stays fast on big runs.
Charts use matplotlib's Agg backend (no display needed); they are written next
to the page and embedded in it as data URIs, with the CSS and JavaScript of the
sample browser (:mod:`fabrika.export.browser`), so the page opens offline from
anywhere — no server, no CDN.

A report directory belongs to one run (``report.json`` says which): writing
another run's report over it needs ``overwrite=True``.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any, Mapping

import polars as pl

from fabrika.errors import StoreError
from fabrika.export.browser import BrowserLimits, collect_samples, explorer_html, template
from fabrika.export.explorer import RunExplorer
from fabrika.export.source import open_version
from fabrika.filters.text import count_tokens, messages_text
from fabrika.schemas.chat import messages_to_chat, tools_to_chat
from fabrika.store.shards import atomic_write_bytes, atomic_write_json

CHARTS = ("funnel", "rejections", "lengths", "shares", "tools", "turns", "accounting")
#: Written into the report directory: which run the report is of (checked before overwriting).
OWNER_FILE = "report.json"


class ReportExistsError(StoreError):
    """The output directory holds the report of another run."""


def _plt():  # noqa: ANN202 - pyplot module
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    _plt().close(fig)


def _empty(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", fontsize=12, color="#666")
    ax.set_axis_off()


def _barh(ax: Any, labels: list[str], values: list[float], title: str, color: str = "#3b6ea8") -> None:
    if not labels:
        _empty(ax, title.lower())
        return
    ax.barh(range(len(labels)), values, color=color)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:g}", va="center", fontsize=7)


def _barh_pair(ax: Any, labels: list[str], series: tuple[tuple[str, list[float], str], tuple[str, list[float], str]],
               title: str, stacked: bool) -> None:
    """Two ``(label, values, color)`` bar series per row: the second on top of (stacked) or over the first."""
    (name1, first, color1), (name2, second, color2) = series
    ax.barh(range(len(labels)), first, color=color1, label=name1)
    ax.barh(range(len(labels)), second, left=first if stacked else None, color=color2, label=name2)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    ax.set_title(title)


def chart_funnel(funnel: dict[str, Any], stages: dict[str, Any], path: Path) -> None:
    plt = _plt()
    gated = {**(funnel.get("upstream_gates") or {}), **(funnel.get("gates") or {})}  # pipeline order: upstream first
    n_bars = max(len(stages), sum(2 + sum(1 for k, v in c.items() if k.startswith("dropped_") and v)
                                  for c in gated.values()))
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, max(4.5, 0.22 * n_bars + 1.5)))  # one readable line per bar
    names = list(stages)
    if names:
        ok = [stages[n].get("ok", 0) for n in names]
        rej = [sum((stages[n].get("rejected") or {}).values()) for n in names]
        _barh_pair(a, names, (("ok", ok, "#4c9a5b"), ("rejected", rej, "#c0504d")), "Rows per stage", stacked=True)
    else:
        _empty(a, "stages")
    labels, values = [], []
    for stage, counts in gated.items():
        left = counts.get("in", 0)
        labels.append(f"{stage}: in")
        values.append(left)
        for key, n in counts.items():
            if key.startswith("dropped_") and n:
                left -= n
                labels.append(f"  left after − {key[len('dropped_'):]}")
                values.append(left)
        labels.append(f"{stage}: out (left)")
        values.append(counts.get("out", left))
    _barh(b, labels, values, "Gate funnel (rows left after each gate)", "#7b5ea7")
    _save(fig, path)


def chart_rejections(stages: dict[str, Any], path: Path) -> None:
    totals: dict[str, int] = {}
    for name, s in stages.items():
        for reason, n in (s.get("rejected") or {}).items():
            totals[f"{name}: {reason}"] = totals.get(f"{name}: {reason}", 0) + n
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:25]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, max(3, 0.3 * len(top) + 1)))
    _barh(ax, [k for k, _ in top], [v for _, v in top], "Rejections by reason", "#c0504d")
    _save(fig, path)


def sample_stats(frame: pl.DataFrame) -> dict[str, Any]:
    """Per-row lengths and tool counts of (a sample of) the kept rows, and turns per episode.

    Rows whose ``meta`` names an ``episode_id`` (FC samples, one per assistant step)
    count once per episode, with the user+assistant turns of its longest sample;
    other rows count their own turns.
    """
    stats: dict[str, Any] = {"prompt_tokens": [], "completion_tokens": [], "tools": [], "turns": []}
    episodes: dict[str, int] = {}
    for row in frame.iter_rows(named=True):
        prompt, completion = row.get("prompt"), row.get("completion")
        if "len_prompt_tokens" in row and row["len_prompt_tokens"] is not None:
            stats["prompt_tokens"].append(row["len_prompt_tokens"])
            stats["completion_tokens"].append(row.get("len_completion_tokens") or 0)
        else:
            stats["prompt_tokens"].append(count_tokens(messages_text(prompt)))
            stats["completion_tokens"].append(count_tokens(messages_text(completion, with_calls=True)))
        try:
            stats["tools"].append(len(tools_to_chat(row.get("tools"))))
        except ValueError:
            stats["tools"].append(0)
        msgs = messages_to_chat(prompt) + messages_to_chat(completion, role="assistant")
        turns = sum(1 for m in msgs if m.get("role") in ("user", "assistant"))
        episode = _episode_id(row.get("meta"))
        if episode is None:
            stats["turns"].append(turns)
        else:  # samples are steps of an episode: the episode's length is its longest sample
            episodes[episode] = max(episodes.get(episode, 0), turns)
    stats["turns"] += list(episodes.values())
    stats["episodes"] = len(episodes)
    return stats


def _episode_id(meta: Any) -> str | None:
    if isinstance(meta, str) and meta.startswith("{"):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    if isinstance(meta, dict):
        value = meta.get("episode_id") or meta.get("episode")
        return str(value) if value is not None else None
    return None


def chart_lengths(stats: dict[str, Any], path: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, key in zip(axes, ("prompt_tokens", "completion_tokens")):
        if stats[key]:
            ax.hist(stats[key], bins=40, color="#3b6ea8")
            ax.set_title(f"{key.replace('_', ' ')} (n={len(stats[key])})")
        else:
            _empty(ax, key)
    _save(fig, path)


def chart_shares(shares: Mapping[str, dict[str, int]], path: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, col in zip(axes, ("lang", "target_type")):
        counts = shares.get(col) or {}
        total = sum(counts.values()) or 1
        _barh(ax, list(counts), [round(100 * v / total, 1) for v in counts.values()], f"{col} share, %")
    _save(fig, path)


def chart_hist(values: list[int], title: str, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if values:
        lo, hi = min(values), max(values)
        ax.hist(values, bins=range(lo, hi + 2), color="#4c9a5b", align="left", rwidth=0.8)
        ax.set_title(f"{title} (n={len(values)})")
    else:
        _empty(ax, title)
    _save(fig, path)


def chart_accounting(rows: list[dict[str, Any]], path: Path) -> None:
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, max(3, 0.35 * len(rows) + 1.5)))
    labels = [f"{r.get('stage')} / {r.get('tag')} / {r.get('model')}" for r in rows]
    if rows:
        req = [r.get("requests", 0) for r in rows]
        hits = [r.get("cache_hits", 0) for r in rows]
        _barh_pair(a, labels, (("requests", req, "#3b6ea8"), ("cache hits", hits, "#e0a030")), "LLM requests",
                   stacked=False)  # hits are a part of requests: drawn over them
        pt = [r.get("prompt_tokens", 0) for r in rows]
        ct = [r.get("completion_tokens", 0) for r in rows]
        _barh_pair(b, labels, (("prompt tokens", pt, "#7b5ea7"), ("completion tokens", ct, "#c0504d")),
                   "Tokens (real calls only)", stacked=True)
    else:
        _empty(a, "LLM requests")
        _empty(b, "tokens")
    _save(fig, path)


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(out: Path, name: str) -> str:
    data = base64.b64encode((out / f"{name}.png").read_bytes()).decode("ascii")
    return f"<img alt='{name}' src='data:image/png;base64,{data}'>"


def _owner(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    return {"run_dir": str(run_dir.resolve()), "run": manifest.get("name") or run_dir.name}


def check_owner(out: Path, run_dir: Path, manifest: dict[str, Any], overwrite: bool) -> None:
    """Refuse to write over a report of another run (or over a foreign ``index.html``) unless ``overwrite``."""
    page = out / "index.html"
    if overwrite or not page.exists():
        return
    mine = _owner(run_dir, manifest)
    try:
        theirs = json.loads((out / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        theirs = None
    if theirs is None and out.resolve() == (run_dir / "report").resolve():
        return  # the run's own report directory, written before reports recorded their run
    if theirs is None or theirs.get("run_dir") != mine["run_dir"]:
        whose = f"run {theirs.get('run')!r} ({theirs.get('run_dir')})" if isinstance(theirs, dict) else "something else"
        raise ReportExistsError(f"{page} is the report of {whose}, not of {run_dir}; pass --overwrite to replace it "
                                "or --out DIR to write elsewhere")


def build_report(run_dir: str | Path, out: str | Path | None = None, version: str | None = None,
                 max_rows: int = 20_000, overwrite: bool = False,
                 limits: BrowserLimits = BrowserLimits()) -> Path:
    """Write ``report/index.html`` (+ PNGs) for ``run_dir``; returns the HTML path.

    Raises :class:`ReportExistsError` when ``out`` holds another run's report and not ``overwrite``.
    """
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report"
    source = open_version(run_dir, version)
    manifest = source.manifest
    check_owner(out, run_dir, manifest, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    order = {name: i for i, name in enumerate(manifest.get("order") or [])}  # funnel.json keys are sorted

    def in_order(d: dict[str, Any]) -> dict[str, Any]:
        return dict(sorted(d.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))

    stages = in_order(source.funnel.get("stages") or manifest.get("stages") or {})
    funnel = {**source.funnel, "gates": in_order(source.funnel.get("gates") or {}),
              "upstream_gates": in_order(source.funnel.get("upstream_gates") or {})}
    lf = source.frame
    names = lf.collect_schema().names()
    shares: dict[str, dict[str, int]] = {c: {str(k): int(v) for k, v in lf.group_by(c).len().sort(c).collect().iter_rows()}
              for c in ("lang", "target_type", "llm_backend") if c in names}
    total = int(lf.select(pl.len()).collect().item())
    cols = [c for c in ("prompt", "completion", "tools", "meta", "len_prompt_tokens", "len_completion_tokens")
            if c in names]
    stats = sample_stats(lf.select(cols).head(max_rows).collect()) if cols else sample_stats(pl.DataFrame())
    accounting = manifest.get("accounting") or {}
    chart_funnel(funnel, stages, out / "funnel.png")
    chart_rejections(stages, out / "rejections.png")
    chart_lengths(stats, out / "lengths.png")
    chart_shares(shares, out / "shares.png")
    chart_hist(stats["tools"], "tools per sample", out / "tools.png")
    chart_hist(stats["turns"], "user+assistant turns per episode", out / "turns.png")
    chart_accounting(accounting.get("rows") or [], out / "accounting.png")
    explorer = RunExplorer(run_dir, source.version)
    summary = explorer.summary()
    page_data = {"mode": "offline", "summary": summary, **collect_samples(explorer, limits)}
    sim = "sim" in shares.get("llm_backend", {}) or manifest.get("backend") == "sim"
    totals = accounting.get("totals") or {}
    sandbox = manifest.get("sandbox_isolation")
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>fabrika report: {html.escape(run_dir.name)}</title>",
        f"<style>{template('report.css')}</style></head><body>",
        f"<h1>Run {html.escape(run_dir.name)} — version {html.escape(str(source.version))}</h1>",
    ]
    if sim:
        parts.append("<p class='sim'>SIMULATED DATA (sim backend): for pipeline tests only, never for training.</p>")
    if manifest.get("sandbox_isolation"):
        mode = str(manifest["sandbox_isolation"])
        parts.append(f"<p class='{'sim' if 'rlimits' in mode else 'sandbox'}'>Sandbox isolation of LLM-written verifiers: "
                     f"{html.escape(mode)}{' (weaker: no namespaces)' if 'rlimits' in mode else ''}</p>")
    parts += [
        f"<p>{total} rows kept in version {html.escape(str(source.version))}; length and tool statistics over "
        f"{len(stats['prompt_tokens'])} of them, turns over {len(stats['turns'])} episodes or rows."
        + (f" Sandbox isolation: {html.escape(str(sandbox))}." if sandbox else "") + "</p>",
        "<p><a href='#browser'>Run explorer</a> · <a href='#funnel'>Funnel</a> · <a href='#lengths'>Lengths</a> · "
        "<a href='#accounting'>Accounting</a></p>",
        "<h2 id='funnel'>Funnel</h2>", _img(out, "funnel"), _img(out, "rejections"),
        "<h2 id='lengths'>Lengths</h2>", _img(out, "lengths"),
        "<h2>Shares</h2>", _img(out, "shares"),
        "<h2>Tools and turns</h2>", _img(out, "tools"), _img(out, "turns"),
        "<h2 id='accounting'>Accounting</h2>", _img(out, "accounting"),
        _table([totals], [k for k in totals if k != "failures"]) if totals else "<p>no LLM accounting recorded</p>",
        "<p>The charts are also written as files next to this page: "
        + ", ".join(f"<a href='{c}.png'>{c}.png</a>" for c in CHARTS) + ".</p>",
        "<h2>Thresholds</h2><pre>" + html.escape(json.dumps(source.thresholds, ensure_ascii=False, indent=2)) + "</pre>",
        "<h2 id='browser'>Run explorer</h2>",
        "<p>Every count is the one <code>fabrika status</code> prints. <b>kept</b>: in the dataset of version "
        f"{html.escape(str(source.version))}; <b>ok</b>: a row of a stage outside the dataset that passes the gates "
        "its consumers read; <b>gate-dropped</b>: accepted by its stage, dropped by the gate named with its "
        "threshold; <b>rejected</b>: a verdict of the stage, with its reason and raw answer; <b>passed over</b>: not "
        "drawn by a share or not applicable (not a quality verdict). Scores are joined onto the rows they score. "
        + ("This page holds every row of the run." if page_data["complete"] else
           f"This run is too big for one page: it holds up to {limits.kept_per_stage} kept rows per stage and "
           f"{limits.per_reason} per gate and reason; <code>fabrika browse {html.escape(str(run_dir))}</code> pages "
           "through every row.") + "</p>",
        explorer_html(page_data),
        "</body></html>",
    ]
    page = out / "index.html"
    atomic_write_bytes(page, "\n".join(parts).encode("utf-8"))
    atomic_write_json(out / OWNER_FILE, {**_owner(run_dir, manifest), "version": source.version})
    for path in (page, out / OWNER_FILE):
        path.chmod(0o644)  # temporary files are private; a report is meant to be read
    return page
