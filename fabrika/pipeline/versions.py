"""Materialise and refilter a run from any process: load its gate groups, then let the store gate.

:mod:`fabrika.store.versions` applies the gates but sits below the stage modules that
register gate groups, so it cannot import them; these entry points load them first
(the registry's modules and the run's ``plugins``), as ``fabrika refilter`` does.
``fabrika.materialise`` and ``fabrika.refilter`` are these.

Refilter across the graph: gates also choose, at run time, which upstream rows a
stage reads. Before it writes a version, :func:`refilter` asks, for every per-item
stage that reads its input the default way, how many rows of that input pass the new
thresholds but were never processed by it (:func:`unprocessed_upstream`). When there
are any, the version would not be what a fresh run at these thresholds gives, so it
raises :class:`UpstreamNotProcessed` naming the counts and the ``fabrika run`` that
processes just those items (resume skips the rest; cached answers are reused) — or,
with ``run_downstream=True``, runs that itself and materialises the result, which is
then the version a fresh full run at the same thresholds makes.

Nothing here prints: it logs (``logging``) and returns or raises data; the CLI renders.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from fabrika import gates
from fabrika.errors import ConfigError, StoreError
from fabrika.pipeline.lineage import reads_rows, row_readers
from fabrika.pipeline.registry import load_run_modules
from fabrika.store import versions
from fabrika.store.run import RunStore

log = logging.getLogger(__name__)


def _load(run_dir: str | Path) -> None:
    manifest = RunStore(run_dir).read_manifest()
    if manifest:
        load_run_modules(manifest)


def materialise(run_dir: str | Path, thresholds: Mapping[str, Any] | None = None, name: str | None = None,
                previous: str | None = None, overwrite: bool = True) -> versions.VersionInfo:
    """:func:`fabrika.store.versions.materialise` with the run's gate groups loaded."""
    _load(run_dir)
    layout = RunStore(run_dir).read_manifest().get("layout", {})
    return versions.materialise(run_dir, thresholds=thresholds, name=name, previous=previous, overwrite=overwrite,
                                traceable=row_readers(layout))


@dataclass(frozen=True)
class Unprocessed:
    """Rows of ``upstream`` that pass the new thresholds but ``stage`` never processed."""

    stage: str
    upstream: str
    count: int


class UpstreamNotProcessed(StoreError):
    """A loosened gate admits upstream items that downstream stages never processed."""

    def __init__(self, message: str, items: list[Unprocessed], command: str) -> None:
        super().__init__(message)
        self.items = items
        self.command = command


def _passing(store: RunStore, manifest: Mapping[str, Any], upstream: str, consumer: str,
             thresholds: Mapping[str, Any]) -> list[str]:
    order = list(manifest.get("layout", {}))
    before = set(order[: order.index(consumer)])
    annotators = [a for a in store.annotators_of(upstream, dict(manifest)) if a in before]
    lf = store.scan(upstream, annotators)
    return [] if lf is None else gates.gate_lazy(lf, thresholds).select("id").collect()["id"].to_list()


def unprocessed_upstream(run_dir: str | Path, thresholds: Mapping[str, Any]) -> list[Unprocessed]:
    """Per consumer and input: how many input rows pass ``thresholds`` that the consumer has not processed.

    Only consumers that read their input the default way (gated ``ok`` rows, one item per
    row id) are checked; for those with their own reading (slots drawn from the table:
    ``if.multi.prompts``) see :func:`grown_inputs`; global stages are redone when their input
    changes. Pure polars over ids; no LLM.
    """
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    layout: Mapping[str, Any] = manifest.get("layout", {})
    gates.validate_thresholds(thresholds)  # a bad value fails here, naming it
    out = []
    for name, info in layout.items():
        if not info.get("inputs") or not reads_rows(str(info.get("kind"))):
            continue
        done = store.done_ids(name)
        for upstream in info["inputs"]:
            count = sum(1 for i in _passing(store, manifest, upstream, name, thresholds) if i not in done)
            if count:
                out.append(Unprocessed(name, upstream, count))
    return out


def grown_inputs(run_dir: str | Path, thresholds: Mapping[str, Any]) -> list[Unprocessed]:
    """Per-item consumers with their own reading whose gated input has rows that the run's thresholds
    did not pass: a run does not redo their items (``count``: the rows added)."""
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    layout: Mapping[str, Any] = manifest.get("layout", {})
    was = manifest.get("config", {}).get("filters", {})
    out = []
    for name, info in layout.items():
        if (not info.get("inputs") or info.get("global") or info.get("annotates")
                or reads_rows(str(info.get("kind")))):
            continue
        for upstream in info["inputs"]:
            added = set(_passing(store, manifest, upstream, name, thresholds)) - set(
                _passing(store, manifest, upstream, name, was))
            if added:
                out.append(Unprocessed(name, upstream, len(added)))
    return out


def _file_run_dir(manifest: Mapping[str, Any]) -> Path | None:
    """The run directory the run's config file names (``run_dir``, else ``runs/<name>``), resolved."""
    import yaml

    try:
        doc = yaml.safe_load(Path(str(manifest.get("config_file"))).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict):
        return None
    return Path(doc.get("run_dir") or Path("runs") / str(doc.get("name", ""))).resolve()


def _run_command(manifest: Mapping[str, Any], thresholds: Mapping[str, Any], run_dir: str | Path) -> str:
    import shlex

    sets = versions.set_options(versions.changed_thresholds(manifest.get("config", {}).get("filters", {}),
                                                            thresholds))
    where = [] if Path(run_dir).resolve() == _file_run_dir(manifest) else [f"--set {shlex.quote(f'run_dir={run_dir}')}"]
    return " ".join(["fabrika run", str(manifest.get("config_file") or "CONFIG"), *where, *([sets] if sets else [])])


def _not_processed(items: list[Unprocessed], grown: list[Unprocessed], command: str) -> UpstreamNotProcessed:
    what = "; ".join(f"{u.count} row(s) of {u.upstream!r} now pass its gates that {u.stage!r} never processed"
                     for u in items) or "none read row by row"
    also = "".join(f"; {u.stage!r} draws from {u.upstream!r} itself ({u.count} more row(s) pass now): a run keeps "
                   f"its rows as they are, --run-downstream redoes it (from the cache where requests repeat)"
                   for u in grown)
    return UpstreamNotProcessed(
        f"these thresholds admit upstream items that downstream stages never processed ({what}), so a refilter "
        f"alone cannot give the dataset a run at these thresholds gives; process just those items with "
        f"`{command}` (resume skips the rest; cached answers are reused), or refilter with --run-downstream{also}",
        items, command)


def refilter(run_dir: str | Path, assignments: list[str], name: str | None = None, base: str | None = None,
             overwrite: bool = False, run_downstream: bool = False, allow_partial: bool = False,
             engine: Any = None) -> tuple[versions.VersionInfo, list[tuple[str, str, int, int]]]:
    """:func:`fabrika.store.versions.refilter` with the run's gate groups loaded, across the graph.

    Raises :class:`UpstreamNotProcessed` when the thresholds admit upstream rows a consumer never
    processed, unless ``run_downstream`` (then the run is resumed at these thresholds and the
    result materialised; ``engine`` injects an LLM client, as in :func:`run_pipeline`).
    """
    _load(run_dir)
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    if not manifest:
        raise StoreError(f"{store.run_dir}: not a run directory (no manifest.json)")
    versions.check_gate_groups(manifest)
    versions.require_finished(manifest, allow_partial)
    base_name, old, thresholds = versions.refilter_thresholds(run_dir, assignments, base)
    missing = unprocessed_upstream(run_dir, thresholds)
    grown = grown_inputs(run_dir, thresholds)
    latest = manifest.get("latest_version")
    if missing or grown:
        command = _run_command(manifest, thresholds, run_dir)
        if not run_downstream:
            raise _not_processed(missing, grown, command)
        name = name or versions.next_version_name(run_dir)
        if not overwrite and versions.version_dir(run_dir, name).is_dir():
            raise StoreError(f"version {name!r} exists (export cards may cite it); pass --overwrite to replace it "
                             f"or choose another --name (next free: {versions.next_version_name(run_dir)})")
        log.info("refilter: running downstream stages over %d newly admitted item(s): %s",
                 sum(u.count for u in missing), command)
        _run_downstream(run_dir, manifest, thresholds, engine, name, grown)
        overwrite = True  # the run materialised it under this name; now with its base recorded
    return versions.refilter_to(run_dir, thresholds, base_name, old, name=name, overwrite=overwrite,
                                traceable=row_readers(manifest.get("layout", {})), latest=latest)


def _downstream(layout: Mapping[str, Any], roots: set[str]) -> list[str]:
    """``roots`` and every stage that reads them, directly or not (layout order)."""
    out = set(roots)
    grew = True
    while grew:
        grew = False
        for name, info in layout.items():
            if name not in out and any(src in out for src in info.get("inputs") or []):
                out.add(name)
                grew = True
    return [n for n in layout if n in out]


def _run_downstream(run_dir: str | Path, manifest: Mapping[str, Any], thresholds: Mapping[str, Any],
                    engine: Any, name: str, grown: list[Unprocessed]) -> None:
    """Resume the run at ``thresholds`` (only newly passing items are processed; cache first).

    Stages that draw from a grown input themselves (``grown``: slot stages) are redone whole with
    everything downstream of them (scorers included), as a fresh run would make them; unchanged
    requests are cache hits.
    """
    from fabrika.llm.redact import redact
    from fabrika.pipeline.config import load_config
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store.lock import hold_run_dir

    source = manifest.get("config_file")
    if not source or not Path(source).is_file():
        raise StoreError(f"--run-downstream needs the run's config file ({source or 'not recorded'}); run "
                         f"`{_run_command(manifest, thresholds, run_dir)}` with the config instead")
    config = load_config(source, [f"run_dir={Path(run_dir).resolve()}"])
    recorded = {k: v for k, v in (manifest.get("config") or {}).items() if k not in ("filters", "run_dir")}
    current = {k: v for k, v in redact(config.model_dump(mode="json")).items() if k not in ("filters", "run_dir")}
    if recorded != current:
        raise ConfigError(f"{source} differs from the config this run recorded (edited since, or the run used "
                          f"--set): run `{_run_command(manifest, thresholds, run_dir)}` with the settings you mean instead")
    config = config.model_copy(update={"filters": gates.thresholds_dump(gates.validate_thresholds(thresholds))})
    with hold_run_dir(Path(run_dir), f"fabrika refilter --run-downstream {run_dir}"):
        for stage in _downstream(manifest.get("layout", {}), {u.stage for u in grown}):
            log.info("refilter: redoing %s (it or an upstream stage draws from a grown input itself)", stage)
            RunStore(run_dir).drop_stage(stage)
        result = run_pipeline(config, resume=True, progress=False, engine=engine, version=name)
    if result.problems:
        raise StoreError(f"--run-downstream: the run did not finish: {'; '.join(result.problems)}")


__all__ = ["Unprocessed", "UpstreamNotProcessed", "grown_inputs", "materialise", "refilter", "unprocessed_upstream"]
