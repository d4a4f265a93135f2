"""Rich renderings of run state for the CLI (pure functions of manifest/funnel dicts)."""

from __future__ import annotations

from typing import Any, Mapping

from rich.table import Table


def _fmt_reasons(rejected: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(rejected.items(), key=lambda kv: -kv[1])) or "-"


def stages_table(manifest: Mapping[str, Any], stale: Mapping[str, Any] | None = None) -> Table:
    """Per-stage funnel: rows in the store, ok, rejected by reason, this run's work and LLM use.

    ``stale`` (:func:`fabrika.pipeline.fingerprint.stale_stages`) marks the stages the next run redoes."""
    from fabrika.store.manifest import effective_status

    t = Table(title=f"run {manifest.get('name', '?')} \\[{effective_status(dict(manifest))}] backend={manifest.get('backend', '?')}")
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
            _fmt_reasons({k: v for k, v in reasons.items() if is_rejection(k)}),
            _fmt_reasons({k: v for k, v in reasons.items() if not is_rejection(k)}),
            str(llm.get("requests", 0)),
            str(llm.get("cached", 0)),
            str(llm.get("prompt_tokens", 0) + llm.get("completion_tokens", 0)),
            f"{s.get('seconds', 0):.1f}",
            "yes" if s.get("complete") else "no",
            *([", ".join(stale[name]) if name in stale else "-"] if stale is not None else []),
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


def accounting_table(snapshot: Mapping[str, Any], title: str) -> Table:
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
