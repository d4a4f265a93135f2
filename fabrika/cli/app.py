"""The ``fabrika`` command: run, validate, status, refilter (+ export/report/train/eval from their modules).

Logic lives in ``fabrika.pipeline`` and ``fabrika.store``; this module only
parses arguments, prints, and maps errors to exit codes: 2 for a user error
(bad config, unknown gate, missing input, a run dir in use, an endpoint that
fails the probe, a stage stopped by a configuration problem such as a missing
file or a stage wired to the wrong input — one line each), 3 when a run did not
finish (items left pending by an outage, an open breaker, an infrastructure
fault or ``--cache-only`` misses, or a stage's failure rate above
``llm.max_failure_rate``) — and when a refilter's thresholds admit upstream items
that downstream stages never processed (a run is needed; the message names it) —,
4 when a stage was stopped by a bug in its code (one line: stage, item, exception,
fix), 1 for anything unexpected. A storage fault
(:class:`~fabrika.errors.StorageError`) is one line with its own code: 3 for a full disk, 2 for
an unwritable directory or a damaged journal/shard (``fabrika fsck RUN_DIR --repair``).
A run stopped by a signal exits 128 + its number — 143 for SIGTERM, 130 for SIGINT (Ctrl-C) — after one
line naming the command that resumes it (:mod:`fabrika.pipeline.stopping`); a stop is never 0 or 3.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

import fabrika
from fabrika.errors import (
    ConfigError,
    InputError,
    SandboxError,
    SandboxInfrastructureError,
    StageFailure,
    StorageError,
    StoreError,
)
from fabrika.pipeline.stopping import RunStopped

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="fabrika: synthetic post-training data factory (Russian first).")
# Piped output (CI logs, tests) gets a wide fixed width so tables do not fold words.
out = Console() if sys.stdout.isatty() else Console(width=160)
err = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=240)


def fail(message: str, code: int = 2) -> None:
    """Print one line per message line to stderr and exit with ``code``."""
    for line in str(message).splitlines() or [""]:
        prefix = "" if ": error: " in line else "[red]error:[/] "
        err.print(f"{prefix}{escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        out.print(f"fabrika {fabrika.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """fabrika: synthetic post-training data factory."""


SetOption = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Override a config key: KEY=VALUE, KEY a dotted path into the YAML (a stage by its name), "
                 "e.g. stages.answers.max_items=5 or filters.length.max_tokens=1024 (repeatable)."),
]


def _fail_closed(cfg: Any) -> None:
    """LLM-written code of a real model runs only under bubblewrap unless the config accepts rlimits."""
    from fabrika.pipeline.config import sandbox_problem

    problem = sandbox_problem(cfg)
    if problem:
        sys.stderr.write(problem + "\n")
        raise typer.Exit(2)


@app.command()
def validate(
    config: Annotated[Path, typer.Argument(help="Pipeline YAML.")],
    set_: SetOption = None,
    probe: Annotated[bool, typer.Option("--probe", help="Also ask each endpoint's GET /models: reachable, and "
                                        "serving llm.model?")] = False,
) -> None:
    """Check a pipeline document; print every error and warning. Exit 2 on errors."""
    from fabrika.pipeline.config import validate_file

    cfg, issues = validate_file(config, list(set_ or []))
    for issue in issues:
        (err if issue.level == "error" else out).print(escape(str(issue)), highlight=False, soft_wrap=True)
    if cfg is None:
        raise typer.Exit(2)
    _fail_closed(cfg)
    if probe and cfg.llm.backend == "openai":
        from fabrika.llm.openai_compat import probe_endpoints

        problems = asyncio.run(probe_endpoints(cfg.llm))
        if problems:
            fail("\n".join(f"{config}: {p}" for p in problems))
        out.print(f"probe: {len(cfg.llm.endpoints)} endpoint(s) serve {cfg.llm.model!r}")
    out.print(f"[green]ok[/]: {config} ({len(cfg.stages)} stages, run dir {cfg.resolved_run_dir})")


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="Pipeline YAML.")],
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Skip items already written (default).")] = True,
    cache_only: Annotated[bool, typer.Option("--cache-only", help="Answer only from the LLM cache; uncached items stay pending.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Live per-stage progress.")] = True,
    version: Annotated[Optional[str], typer.Option("--version-name",
                                                   help="Name of the materialised version (default dataset.version).")] = None,
    set_: SetOption = None,
    until: Annotated[Optional[list[str]], typer.Option("--until", help="Run only this stage and what it needs (repeatable).")] = None,
    allow_partial: Annotated[bool, typer.Option("--allow-partial", help="Materialise a version even when items "
                                                "are still pending (the run still exits 3).")] = False,
    log_every: Annotated[float, typer.Option("--log-every", min=0,
                                             help="Seconds between plain progress lines when stdout is not a terminal.")] = 30.0,
    executor: Annotated[Optional[str], typer.Option("--executor", help="local | ray: where per-item CPU stages run "
                                                    "(overrides the config's executor; see docs/RAY.md).")] = None,
    llm_workers: Annotated[Optional[int], typer.Option("--llm-workers", min=1, help="Processes per LLM-calling "
                                                       "stage (overrides the config's llm_workers).")] = None,
) -> None:
    """Run a pipeline (validated first; nothing is written on a bad config) and materialise its dataset."""
    from fabrika.pipeline.config import validate_file
    from fabrika.pipeline.runner import run_pipeline

    cfg, issues = validate_file(config, [*(set_ or []), *([f"executor={executor}"] if executor else []),
                                         *([f"llm_workers={llm_workers}"] if llm_workers else [])])
    errors = [str(i) for i in issues if i.level == "error"]
    if cfg is None:
        fail("\n".join(errors))
    _fail_closed(cfg)
    for w in issues:
        err.print(f"[yellow]{escape(str(w))}[/]", highlight=False, soft_wrap=True)
    assert cfg is not None
    if until:
        from fabrika.pipeline.runner import stages_until

        try:
            stages_until(cfg, until)  # before anything is written
        except ConfigError as exc:
            fail(str(exc))
    try:
        result = run_pipeline(cfg, resume=resume, cache_only=cache_only, progress=progress, version=version,
                              until=until or None, allow_partial=allow_partial, log_every=log_every)
    except (StageFailure, StorageError) as exc:  # a stage bug (4) / config problem (2); a storage fault (2/3)
        fail(str(exc), code=exc.exit_code)
    except (ConfigError, InputError, StoreError) as exc:
        fail(str(exc))
    except SandboxError as exc:  # a sandbox that cannot start (bwrap self-test) is loud, never a fallback
        fail(str(exc), code=3 if isinstance(exc, SandboxInfrastructureError) else 2)
    except RunStopped as exc:  # SIGTERM / SIGINT (fabrika.pipeline.stopping): 143 / 130
        stopped(f"stopped by {exc.signal_name}: finished items are saved; rerun `{_again(config, set_, until)}` "
                "to resume", exc.exit_code)
    except (KeyboardInterrupt, asyncio.CancelledError):
        stopped(f"interrupted: finished items are saved; rerun `{_again(config, set_, until)}` to resume", 130)
    from fabrika.cli import views

    if sys.stdout.isatty():
        out.print(views.stages_table(result.manifest))
    else:  # logs: a summary that fits in 100 columns, no box drawing
        print("\n".join(views.summary_lines(result.manifest)), flush=True)
    if result.problems:
        again = _again(config, set_, until)
        if result.version is not None:
            out.print(f"partial dataset (--allow-partial): {result.version.path}")
        fail(f"run did not finish: {'; '.join(result.problems)}; rerun `{again}` to continue", code=3)
    if until:
        out.print(f"ran up to {', '.join(until)}; no version materialised (run without --until for the dataset)")
    if result.version is not None:
        title = f"version {result.version.name}: {result.version.rows} samples"
        if sys.stdout.isatty():
            out.print(views.gates_table(result.version.funnel, title))
        else:
            print("\n".join(views.gates_lines(result.version.funnel, title)), flush=True)
        out.print(f"dataset: {result.version.path}")


def _again(config: Path, set_: list[str] | None, until: list[str] | None) -> str:
    """The ``fabrika run`` that continues this run (secrets in ``--set`` values redacted)."""
    from fabrika.llm.redact import redact

    sets = [f"{k}={v}" for s in set_ or [] for k, v in redact(dict([s.split("=", 1)])).items()] \
        if all("=" in s for s in set_ or []) else []
    return " ".join(["fabrika run", str(config), *(f"--set {s}" for s in sets), *(f"--until {u}" for u in until or [])])


#: Set when a command was stopped by a signal: :func:`main` then leaves with ``os._exit`` (see :func:`stopped`).
_stopped: list[int] = []


def stopped(message: str, code: int) -> None:
    """A command stopped by SIGTERM/SIGINT: one line on stderr, exit ``code`` (128 + the signal: 143, 130).

    Under :func:`main` the process then ends with ``os._exit``: a thread-pool thread still computing
    (Python cannot stop a thread) must not keep a stopped run alive; everything the run keeps is on
    disk by now (:mod:`fabrika.pipeline.stopping`)."""
    _stopped.append(code)
    fail(message, code=code)


def _stale(manifest: dict[str, Any], config: Path | None) -> tuple[dict[str, dict[str, list[str]]], str | None]:
    """Stale stages against ``config`` (default the run's config file, else the config it recorded), and a note
    when neither can be read."""
    from fabrika.pipeline.config import validate_data, validate_file
    from fabrika.pipeline.fingerprint import stale_stages

    path = config or (Path(manifest["config_file"]) if manifest.get("config_file") else None)
    cfg = None
    if path is not None and path.is_file():
        cfg, _ = validate_file(path)
    if cfg is None and config is None and manifest.get("config"):
        base = path.resolve().parent if path is not None else Path.cwd()
        cfg, _ = validate_data(manifest["config"], "(recorded config)", base)
    if cfg is None:
        return {}, f"staleness not checked: {path or 'the recorded config'} does not validate (pass --config CONFIG)"
    return stale_stages(cfg, manifest), None


@app.command()
def status(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (runs/<name>).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts) instead of tables.")] = False,
    config: Annotated[Optional[Path], typer.Option("--config", help="Check staleness against this pipeline YAML "
                                                   "(default: the run's config file).")] = None,
) -> None:
    """Per-stage funnel, stale stages and why (code/prompt/config/upstream changed), versions, LLM accounting."""
    from fabrika.cli import views
    from fabrika.store import RunStore
    from fabrika.store.manifest import effective_status
    from fabrika.store.versions import read_version

    store = RunStore(run_dir)
    try:
        manifest = store.read_manifest() if run_dir.is_dir() else {}
        if not manifest:
            fail(f"{run_dir}: not a run directory (no manifest.json)")
        if effective_status(manifest) != "done":  # live or killed: count what is on disk, not the last snapshot
            for name, entry in manifest.get("stages", {}).items():
                entry.update(store.counts(name))
                entry["journal_rows"] = store.journal_rows(name)
                entry["rows"] = entry.get("rows", 0) + entry["journal_rows"]
        stale, note = _stale(manifest, config)
    except StorageError as exc:
        fail(str(exc), code=exc.exit_code)
    except StoreError as exc:
        fail(str(exc))
    if as_json:
        latest = manifest.get("latest_version")
        doc = {k: manifest.get(k) for k in ("name", "backend", "stages", "versions", "latest_version", "accounting",
                                            "sandbox_isolation", "invocations")}
        doc["status"] = effective_status(manifest)
        doc["latest_funnel"] = read_version(run_dir, latest)["funnel"] if latest else None
        doc["stale"] = stale
        print(json.dumps(doc, ensure_ascii=False, indent=2, default=str))
        return
    out.print(views.stages_table(manifest, stale))
    for line in views.stale_lines(stale, manifest.get("config_file")):
        out.print(escape(line), highlight=False, soft_wrap=True)
    if note:
        err.print(f"[yellow]{escape(note)}")
    if manifest.get("versions"):
        out.print(views.versions_table(manifest))
    latest = manifest.get("latest_version")
    if latest:
        try:
            v = read_version(run_dir, latest)
            out.print(views.gates_table(v["funnel"], f"version {latest}"))
        except (StoreError, OSError) as exc:
            err.print(f"[yellow]version {latest}: {exc}")
    if manifest.get("accounting"):
        out.print(views.accounting_table(manifest["accounting"], "LLM accounting (last invocation)"))
    if manifest.get("sandbox_isolation"):
        weak = " [bold red](weaker: no namespaces)[/]" if "rlimits" in str(manifest["sandbox_isolation"]) else ""
        out.print(f"sandbox isolation: {manifest['sandbox_isolation']}{weak}")


@app.command()
def refilter(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", help="Change a gate threshold: filters.GROUP.PARAM=VALUE, the same address as `fabrika run --set`, "
        "e.g. filters.length.max_tokens=1024 (repeatable).")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="New version name (default next vN).")] = None,
    base: Annotated[Optional[str], typer.Option("--from-base", "--base", help="Version whose thresholds the --set "
                                                "values stack on (default: the run's config thresholds).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing version named --name.")] = False,
    run_downstream: Annotated[bool, typer.Option("--run-downstream", help="When a loosened gate admits upstream items "
                                                 "that downstream stages never processed, resume the run at these "
                                                 "thresholds (cached answers first) and materialise its result.")] = False,
    allow_partial: Annotated[bool, typer.Option("--allow-partial", help="Gate an incomplete run (items pending) "
                                                "anyway.")] = False,
) -> None:
    """Re-apply gates with new thresholds: a new version, zero LLM calls, seconds.

    Exit 2: a bad --set, an unknown base, a run that did not finish. Exit 3: the thresholds admit upstream
    items downstream stages never processed (the message has the `fabrika run` that processes them).
    """
    from fabrika.cli import views
    from fabrika.pipeline.versions import UpstreamNotProcessed
    from fabrika.pipeline.versions import refilter as do_refilter

    if not (run_dir / "manifest.json").is_file():
        fail(f"{run_dir}: not a run directory (no manifest.json)")
    try:
        info, diff = do_refilter(run_dir, list(set_ or []), name=name, base=base, overwrite=overwrite,
                                 run_downstream=run_downstream, allow_partial=allow_partial)
    except UpstreamNotProcessed as exc:
        fail(str(exc), code=3)
    except RunStopped as exc:  # --run-downstream's run stopped by SIGTERM / SIGINT
        stopped(f"stopped by {exc.signal_name}: finished items are saved; rerun the same command to resume",
                exc.exit_code)
    except StorageError as exc:
        fail(str(exc), code=exc.exit_code)
    except (ConfigError, StoreError, InputError) as exc:
        fail(str(exc))
    out.print(views.gates_table(info.funnel, f"version {info.name}: {info.rows} samples"))
    out.print(escape(views.version_line(info.name, info.base, info.changed)), highlight=False, soft_wrap=True)
    out.print(views.diff_table(diff, info.previous, info.name) if diff
              else f"funnel unchanged vs {info.previous or 'the config thresholds'}")
    out.print(f"dataset: {info.path}")


for _mod in ("export_cmd", "report_cmd", "train_cmd", "eval_cmd", "estimate_cmd", "stages_cmd", "fsck_cmd"):
    importlib.import_module(f"fabrika.cli.{_mod}").register(app)


def main() -> None:
    try:
        app()
    except SystemExit:
        if _stopped:  # stopped by a signal: do not wait for threads still computing (see `stopped`)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(_stopped[-1])
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
