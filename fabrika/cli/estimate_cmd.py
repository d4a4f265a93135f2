"""``fabrika estimate CONFIG --pilot 0.2``: a pilot run, extrapolated (logic in :mod:`fabrika.pipeline.estimate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table


def estimate_table(doc: dict[str, Any]) -> Table:
    from fabrika.pipeline.progress import duration, human

    sim = " — SIM BACKEND, not a real model's numbers" if doc.get("sim") else ""
    t = Table(title=f"estimate for {doc.get('config')} (backend {doc.get('backend')}){sim}")
    for col in ("stage", "items", "requests (range)", "tokens", "rows (range)", "cost", "time (range)"):
        t.add_column(col, justify="left" if col == "stage" else "right")

    def span(r: dict[str, Any], fmt: Any = human) -> str:
        if r["low"] == r["high"]:
            return f"{fmt(r['point'])} exact"
        return f"{fmt(r['point'])} ({fmt(r['low'])}–{fmt(r['high'])})"

    for name, s in doc["stages"].items():
        cost = "-" if s["cost"] is None else f"${s['cost']:.2f}"
        rng = s["range"]
        t.add_row(name, human(s["items"]), span(rng["requests"]), human(s["prompt_tokens"] + s["completion_tokens"]),
                  span(rng["rows"]), cost, span(rng["seconds"], duration))
    tot = doc["total"]
    cost = "-" if tot["cost"] is None else f"${tot['cost']:.2f}"
    rng = tot["range"]
    t.add_row("[b]total (wall)[/b]", "", span(rng["requests"]), human(tot["prompt_tokens"] + tot["completion_tokens"]),
              "", cost, span(rng["seconds"], duration))
    return t


def register(app: typer.Typer) -> None:
    """Add ``estimate`` to the fabrika app."""

    @app.command("estimate")
    def estimate_command(
        config: Annotated[Path, typer.Argument(help="Pipeline YAML.")],
        pilot: Annotated[str, typer.Option("--pilot", help="Share (0.2) or count (50) of the first per-item "
                                           "stages' input the pilot runs. A share is floored at "
                                           "ceil(64·N/(N+64)) items, so a small input's pilot is its full run; "
                                           "a count is taken as given.")] = "0.1",
        out_json: Annotated[Optional[Path], typer.Option("--json", help="Where to write the estimate "
                                                         "(default RUN/estimate.json).")] = None,
        work_dir: Annotated[Optional[Path], typer.Option("--work-dir", help="Scratch run directory of the pilot "
                                                         "(default RUN/.estimate-pilot; emptied first).")] = None,
        set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a config key: KEY=VALUE.")] = None,
        progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Live per-stage progress of "
                                               "the pilot.")] = True,
    ) -> None:
        """Run a small pilot on the configured backend and extrapolate requests, tokens, cost, time and yield."""
        from fabrika.cli.app import fail, out, stopped
        from fabrika.errors import ConfigError, InputError, StoreError
        from fabrika.pipeline.config import validate_file
        from fabrika.pipeline.estimate import Pilot, run_estimate
        from fabrika.pipeline.stopping import RunStopped
        from fabrika.store.shards import atomic_write_json

        try:
            share = Pilot.parse(pilot)
        except ValueError as exc:
            fail(str(exc))
        cfg, issues = validate_file(config, list(set_ or []))
        if cfg is None:
            fail("\n".join(str(i) for i in issues if i.level == "error"))
        assert cfg is not None
        run_dir = cfg.resolved_run_dir
        work = work_dir or run_dir / ".estimate-pilot"
        try:
            est = run_estimate(cfg, share, work, config_name=str(config), progress=progress,
                               note=lambda line: out.print(line, highlight=False))
        except (ConfigError, InputError, StoreError) as exc:
            fail(str(exc))
        except RunStopped as exc:  # SIGTERM / SIGINT during the pilot: no estimate is written
            stopped(f"stopped by {exc.signal_name}: no estimate written; rerun the same command", exc.exit_code)
        doc = est.as_dict()
        out.print(estimate_table(doc))
        tot = doc["total"]
        rows = tot["range"]["dataset_rows"]
        out.print(f"dataset rows: about {tot['dataset_rows']} ({rows['low']:.0f}–{rows['high']:.0f}) from "
                  f"{tot['inputs']} inputs ({tot['yield_per_input']:g} per input item)", highlight=False)
        if "seconds_sum" in tot:
            from fabrika.pipeline.progress import duration
            wall, summed = tot["range"]["seconds"], tot["range"]["seconds_sum"]
            out.print(f"time: wall (overlapped) {duration(wall['point'])} ({duration(wall['low'])}–"
                      f"{duration(wall['high'])}); sum of stages {duration(summed['point'])} "
                      f"({duration(summed['low'])}–{duration(summed['high'])}); a point is within "
                      f"max(25%, {tot['schedule']['resolution_s']:g} s)", highlight=False)
        out.print("assumptions:")
        for line in doc["assumptions"]:
            out.print(f"  - {line}", highlight=False, soft_wrap=True)
        target = out_json or run_dir / "estimate.json"
        atomic_write_json(target, doc)
        out.print(f"estimate: {target}")
