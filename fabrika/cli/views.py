"""Rich renderings of run state for the CLI (pure functions of manifest/funnel dicts).

The wide tables (funnel, accounting) are :class:`Fitted`: at render time each picks its full
layout when that fits the console and a compact one otherwise (fewer, shorter columns, the
rejection reasons on lines of their own that wrap), so ``fabrika status`` reads in an 80-column
terminal as well as in a 160-column log. ``tests/cli/test_views_width.py`` snapshots both.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


class Fitted:
    """``wide()`` when ``probe()`` (the wide layout with its free-text cells cut short; default: ``wide()``)
    fits the console at its natural width, else ``narrow()`` — chosen at render time."""

    def __init__(self, wide: Callable[[], RenderableType], narrow: Callable[[], RenderableType],
                 probe: Callable[[], RenderableType] | None = None) -> None:
        self.wide, self.narrow, self.probe = wide, narrow, probe or wide

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        unbounded = options.update(max_width=10_000)  # a table's own measure is clamped to the width it gets
        fits = Measurement.get(console, unbounded, self.probe()).maximum <= options.max_width
        yield self.wide() if fits else self.narrow()


#: Width a free-text cell (rejection reasons) may fold into before the compact layout is chosen.
REASON_ROOM = 28


def _secs(seconds: float) -> str:
    return f"{seconds:.1f}" if seconds < 100 else f"{seconds:.0f}"


def _totals(llm: Mapping[str, Any]) -> int:
    return int(llm.get("prompt_tokens", 0) + llm.get("completion_tokens", 0))


def _fmt_reasons(rejected: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(rejected.items(), key=lambda kv: -kv[1])) or "-"


def stages_table(manifest: Mapping[str, Any], stale: Mapping[str, Any] | None = None) -> Fitted:
    """Per-stage funnel (:func:`stages_table_wide`, or :func:`stages_table_narrow` where it does not fit).

    ``stale`` (:func:`fabrika.pipeline.fingerprint.stale_stages`) marks the stages the next run redoes."""
    return Fitted(lambda: stages_table_wide(manifest, stale), lambda: stages_table_narrow(manifest, stale),
                  lambda: stages_table_wide(manifest, stale, cut=REASON_ROOM))


def _title(manifest: Mapping[str, Any]) -> str:
    from fabrika.store.manifest import effective_status

    return f"run {manifest.get('name', '?')} \\[{effective_status(dict(manifest))}] backend={manifest.get('backend', '?')}"


def stages_table_narrow(manifest: Mapping[str, Any], stale: Mapping[str, Any] | None = None) -> Group:
    """The funnel in about 60 columns: counts per stage, then each stage's reasons on wrapping lines."""
    from fabrika.pipeline.progress import human
    from fabrika.pipeline.stage import is_rejection

    t = Table(title=_title(manifest), title_justify="left", pad_edge=False, box=None, header_style="bold")
    t.add_column("stage", overflow="fold", min_width=12, max_width=24)
    for col in ("in", "ok", "rej", "llm", "cache", "tok", "s", "done"):
        t.add_column(col, justify="right", no_wrap=True)
    notes = Table.grid(padding=(0, 1))
    notes.add_column(no_wrap=True)
    notes.add_column(overflow="fold")
    for name in manifest.get("order", list(manifest.get("layout", {}))):
        s = manifest.get("stages", {}).get(name, {})
        llm = s.get("llm", {})
        reasons = s.get("rejected", {}) or {}
        rej = {k: v for k, v in reasons.items() if is_rejection(k)}
        passed = {k: v for k, v in reasons.items() if not is_rejection(k)}
        t.add_row(name, str(s.get("seen", "-")), str(s.get("ok", 0)), str(sum(rej.values())),
                  str(llm.get("requests", 0)), str(llm.get("cached", 0)), human(_totals(llm)),
                  _secs(s.get("seconds", 0)), "yes" if s.get("complete") else "no")
        if rej:
            notes.add_row(Text(f"{name} rejected:", style="bold"), _fmt_reasons(rej))
        if passed:
            notes.add_row(Text(f"{name} passed over:", style="dim"), _fmt_reasons(passed))
        if stale is not None and name in stale:
            notes.add_row(Text(f"{name} stale:", style="yellow"), ", ".join(stale[name]))
    return Group(t, notes) if notes.row_count else Group(t)


def stages_table_wide(manifest: Mapping[str, Any], stale: Mapping[str, Any] | None = None,
                      cut: int | None = None) -> Table:
    """Per-stage funnel: rows in the store, ok, rejected by reason, this run's work and LLM use.

    ``cut``: free-text cells (reasons, stale) at most this long — the probe :class:`Fitted` measures."""
    def free(text: str) -> str:
        return text if cut is None else text[:cut]


    t = Table(title=_title(manifest))
    t.add_column("stage", no_wrap=True)
    for col in ("in", "rows", "ok"):
        t.add_column(col, justify="right")
    t.add_column("rejected", overflow="fold")
    t.add_column("passed over", overflow="fold")  # not drawn by a share / not applicable: not a verdict
    for col in ("llm", "cached", "tokens", "s", "done"):
        t.add_column(col, justify="right")
    if stale is not None:
        t.add_column("stale", overflow="fold")
    layout = manifest.get("layout", {})
    from fabrika.pipeline.stage import is_rejection

    for name in manifest.get("order", list(layout)):
        s = manifest.get("stages", {}).get(name, {})
        llm = s.get("llm", {})
        reasons = s.get("rejected", {}) or {}
        t.add_row(
            name,
            str(s.get("seen", "-")),
            str(s.get("rows", 0)),
            str(s.get("ok", 0)),
            free(_fmt_reasons({k: v for k, v in reasons.items() if is_rejection(k)})),
            free(_fmt_reasons({k: v for k, v in reasons.items() if not is_rejection(k)})),
            str(llm.get("requests", 0)),
            str(llm.get("cached", 0)),
            str(llm.get("prompt_tokens", 0) + llm.get("completion_tokens", 0)),
            f"{s.get('seconds', 0):.1f}",
            "yes" if s.get("complete") else "no",
            *([free(", ".join(stale[name])) if name in stale else "-"] if stale is not None else []),
        )
    return t


def stale_lines(stale: Mapping[str, Mapping[str, list[str]]], config_file: str | None) -> list[str]:
    """Why each stale stage would be redone, one line per stage, and the command that redoes them."""
    if not stale:
        return ["stale: none (code, prompts and config match what the rows were written under)"]
    lines = [f"stale: {len(stale)} stage(s); the next run redoes them (cached answers for unchanged requests):"]
    for name, reasons in stale.items():
        lines.append(f"  {name}: " + "; ".join(f"{kind} ({', '.join(what)})" for kind, what in reasons.items()))
    lines.append(f"  redo them: fabrika run {config_file or 'CONFIG'}")
    return lines


def version_line(name: str, base: str, changed: Mapping[str, Any]) -> str:
    """``version v2: base config; changed backtranslation.min_similarity=0``."""
    what = ", ".join(f"{k}={v}" for k, v in sorted(changed.items())) or "nothing"
    return f"version {name}: base {base}; changed {what}"


def summary_lines(manifest: Mapping[str, Any], width: int = 100) -> list[str]:
    """The run's per-stage funnel as plain lines of at most ``width`` columns (logs, non-TTY)."""
    from fabrika.pipeline.progress import human
    from fabrika.pipeline.stage import is_rejection
    from fabrika.store.manifest import effective_status

    def cut(line: str) -> str:
        return line if len(line) <= width else line[: width - 1] + "…"

    lines = [cut(f"run {manifest.get('name', '?')} [{effective_status(dict(manifest))}] "
                 f"backend={manifest.get('backend', '?')}")]
    lines.append(f"{'stage':<22} {'in':>8} {'ok':>8} {'rej':>7} {'passed':>7} {'llm':>7} {'tokens':>7} {'s':>7}")
    reasons: list[str] = []
    for name in manifest.get("order", list(manifest.get("layout", {}))):
        s = manifest.get("stages", {}).get(name, {})
        llm = s.get("llm", {})
        rej = {k: v for k, v in (s.get("rejected") or {}).items() if is_rejection(k)}
        passed = sum(v for k, v in (s.get("rejected") or {}).items() if not is_rejection(k))
        tokens = llm.get("prompt_tokens", 0) + llm.get("completion_tokens", 0)
        done = "" if s.get("complete") else " (not complete)"
        lines.append(cut(f"{name[:22]:<22} {s.get('seen', '-'):>8} {s.get('ok', 0):>8} {sum(rej.values()):>7} "
                         f"{passed:>7} {llm.get('requests', 0):>7} {human(tokens):>7} {s.get('seconds', 0):>7.1f}"
                         f"{done}"))
        if rej:
            reasons.append(cut(f"  {name}: rejected {_fmt_reasons(rej)}"))
    totals = (manifest.get("accounting") or {}).get("totals") or {}
    if totals:
        cost = totals.get("cost")
        lines.append(cut(f"LLM: {totals.get('requests', 0)} requests, {totals.get('cache_hits', 0)} cache hits, "
                         f"{human(totals.get('prompt_tokens', 0))} prompt + {human(totals.get('completion_tokens', 0))} "
                         f"completion tokens" + (f", cost ${cost:.2f}" if cost is not None else "")))
    return lines + reasons


def gates_lines(funnel: Mapping[str, Any], title: str) -> list[str]:
    """:func:`gates_table` as plain lines (logs)."""
    lines = [title]
    for stage, counts in funnel.get("gates", {}).items():
        line = f"  {stage}: " + ", ".join(f"{k}={v}" for k, v in counts.items() if v or k in ("in", "out"))
        lines.append(line if len(line) <= 100 else line[:99] + "…")
    return lines


def gates_table(funnel: Mapping[str, Any], title: str) -> Table:
    """Gate funnel of one version: in, out and ``dropped_<gate>`` per dataset stage."""
    t = Table(title=title)
    t.add_column("dataset stage")
    t.add_column("counter")
    t.add_column("rows", justify="right")
    for stage, counts in funnel.get("gates", {}).items():
        for key, n in counts.items():
            t.add_row(stage, key, str(n))
    return t


def diff_table(diff: list[tuple[str, str, int, int]], old: str | None, new: str) -> Table:
    t = Table(title=f"funnel {old or '(config thresholds)'} → {new}")
    for col in ("dataset stage", "counter", old or "before", new, "Δ"):
        t.add_column(col, justify="left" if col in ("dataset stage", "counter") else "right")
    for stage, key, a, b in diff:
        t.add_row(stage, key, str(a), str(b), f"{b - a:+d}")
    return t


def flat_table(data: Mapping[str, Any], title: str) -> Table:
    """Key/value table of a nested mapping (the engine's accounting snapshot)."""
    t = Table(title=title)
    t.add_column("key")
    t.add_column("value", justify="right")

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            t.add_row(prefix, str(value))

    walk("", data)
    return t


_ACCOUNTING_COLUMNS = ("requests", "cache_hits", "retries", "success_after_retry", "failed", "truncated",
                       "prompt_tokens", "completion_tokens", "cost")


def accounting_table(snapshot: Mapping[str, Any], title: str) -> RenderableType:
    """The engine's accounting (:func:`accounting_table_wide`, compact where that does not fit)."""
    if not isinstance(snapshot.get("rows"), list):
        return flat_table(snapshot, title)
    return Fitted(lambda: accounting_table_wide(snapshot, title), lambda: accounting_table_narrow(snapshot, title))


def accounting_table_narrow(snapshot: Mapping[str, Any], title: str) -> Table:
    """Accounting in about 70 columns: stage and tag in one folded cell, tokens abbreviated, zero-only
    columns (retries, truncated, cost) left out, the model in the title when there is one."""
    from fabrika.pipeline.progress import human

    rows = sorted(snapshot.get("rows") or [], key=lambda r: (str(r.get("stage")), str(r.get("tag")),
                                                             str(r.get("model"))))
    totals = snapshot.get("totals") if isinstance(snapshot.get("totals"), Mapping) else {}
    models = sorted({str(r.get("model", "")) for r in rows})
    optional = [c for c in ("retries", "failed", "truncated") if any(r.get(c) for r in rows)]
    has_cost = any(r.get("cost") is not None for r in rows)
    t = Table(title=title + (f" · model {models[0]}" if len(models) == 1 else ""), title_justify="left",
              box=None, pad_edge=False, header_style="bold")
    t.add_column("stage / tag", overflow="fold", min_width=14)
    if len(models) > 1:
        t.add_column("model", overflow="fold", max_width=14)
    for col in ("req", "hit", *optional, "tok in", "tok out", *(("cost",) if has_cost else ())):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("failures", overflow="fold")

    def cells(r: Mapping[str, Any]) -> list[str]:
        fails = r.get("failures") or {}
        nums = [str(r.get("requests", 0)), str(r.get("cache_hits", 0)), *(str(r.get(c, 0)) for c in optional),
                human(r.get("prompt_tokens", 0) or 0), human(r.get("completion_tokens", 0) or 0)]
        if has_cost:
            nums.append("-" if r.get("cost") is None else f"{r['cost']:.2f}")
        return [*nums, ", ".join(f"{k}={v}" for k, v in sorted(fails.items())) or "-"]

    for r in rows:
        stage, tag = str(r.get("stage", "")), str(r.get("tag", ""))
        label = tag if tag.startswith(stage) and stage else f"{stage} / {tag}"
        t.add_row(label, *([str(r.get("model", ""))] if len(models) > 1 else []), *cells(r))
    if totals:
        t.add_row("[b]total[/b]", *([""] if len(models) > 1 else []), *cells(totals))
    return t


def accounting_table_wide(snapshot: Mapping[str, Any], title: str) -> Table:
    """One row per (stage, tag, model) of the engine's snapshot, then the totals; failures by kind."""
    rows = snapshot.get("rows")
    if not isinstance(rows, list):
        return flat_table(snapshot, title)
    t = Table(title=title)
    for col in ("stage", "tag", "model", *_ACCOUNTING_COLUMNS, "failures"):
        t.add_column(col, justify="left" if col in ("stage", "tag", "model", "failures") else "right")

    def cells(r: Mapping[str, Any]) -> list[str]:
        fails = r.get("failures") or {}
        nums = ["-" if r.get(c) is None else (f"{r[c]:.4f}" if c == "cost" else str(r[c])) for c in _ACCOUNTING_COLUMNS]
        return [*nums, ", ".join(f"{k}={v}" for k, v in sorted(fails.items())) or "-"]

    for r in sorted(rows, key=lambda r: (str(r.get("stage")), str(r.get("tag")), str(r.get("model")))):
        t.add_row(str(r.get("stage", "")), str(r.get("tag", "")), str(r.get("model", "")), *cells(r))
    totals = snapshot.get("totals")
    if isinstance(totals, Mapping):
        t.add_row("[b]total[/b]", "", "", *cells(totals))
    return t


def versions_table(manifest: Mapping[str, Any]) -> Table:
    """Materialised versions: rows, the version each derives from, and when."""
    t = Table(title="versions")
    for col in ("version", "samples", "base", "changed", "created"):
        t.add_column(col, justify="right" if col == "samples" else "left", overflow="fold")
    for name, info in manifest.get("versions", {}).items():
        latest = " (latest)" if name == manifest.get("latest_version") else ""
        changed = ", ".join(f"{k}={v}" for k, v in sorted((info.get("changed") or {}).items())) or "-"
        t.add_row(name + latest, str(info.get("rows", "?")), info.get("base") or info.get("previous") or "-",
                  changed, info.get("created_at", "?"))
    return t
