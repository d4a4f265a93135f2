"""The run manifest: what ran, with which config and versions, and what came out.

Written atomically after every stage, so ``fabrika status`` can read a live or
crashed run. Fields: ``config`` and ``config_hash``, ``packages`` (versions),
``backend``, ``layout`` (stage kind/inputs/annotates), ``order``, ``stages``
(counts in/out/rejected by reason, timings, LLM counters, stage reports),
``accounting`` (the engine's snapshot), ``sandbox_isolation`` when a stage
reports it, ``versions`` (materialised datasets) and timestamps.

Secrets never reach it: :func:`redact` replaces the value of every
``*_key`` / ``*token*`` / ``*secret*`` / ``*password*`` field (``api_key``,
``hf_token``…) and the password of URLs (``https://user:pw@host``) with
``***`` before the config is recorded.

:class:`RunManifest` is the one writer of a run's manifest: the runner hands it
facts (a stage's settings fingerprint, its counters, the run's status) and it
merges them with what an earlier invocation recorded and what the store counts.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from fabrika.gates import GATE_GROUPS, validate_thresholds

if TYPE_CHECKING:
    from fabrika.store.run import RunStore

PACKAGES = ("fabrika", "polars", "pyarrow", "pydantic", "datasets", "openai", "transformers", "trl", "torch")

def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def package_versions() -> dict[str, str | None]:
    from importlib import metadata  # here: a reader of manifests (``fabrika browse``) does not pay for it

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def gate_sources(filters: Any) -> dict[str, Any]:
    """Per gate group, the module that defines its gates and the columns they read (at the run's thresholds
    and at the defaults): ``gate_modules`` and ``gate_columns``, so a reader (``fabrika browse``) imports
    only the modules whose gates can act on the table it shows. ``{}`` when the thresholds do not validate
    (the run stops on them anyway)."""
    try:
        params = validate_thresholds(filters if isinstance(filters, Mapping) else None)
        columns = {name: sorted({c for p in [*group.predicates(params[name]), *group.predicates(group.Params())]
                                 for c in p.columns})
                   for name, group in sorted(GATE_GROUPS.items())}
    except Exception:  # noqa: BLE001 - only a speed-up for readers; they fall back to importing every module
        return {}
    return {"gate_modules": {name: getattr(group.predicates, "__module__", None) or group.Params.__module__
                             for name, group in sorted(GATE_GROUPS.items())},
            "gate_columns": columns}


def base_manifest(name: str, config: Mapping[str, Any], config_file: str | None, config_hash: str, backend: str,
                  layout: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> dict[str, Any]:
    """A fresh manifest before any stage ran.

    ``config`` is the pipeline document as JSON (redacted here), ``layout`` per stage name its
    ``kind``/``inputs``/``annotates``/``global`` and ``order`` the stages this invocation runs.
    """
    from fabrika.llm.redact import redact  # here: ``fabrika.llm`` loads the engine, which readers do not need

    return {
        "name": name,
        "config": redact(dict(config)),
        "config_file": config_file,
        "config_hash": config_hash,
        "packages": package_versions(),
        "backend": backend,
        "layout": {k: dict(v) for k, v in layout.items()},
        # what materialisation checks is loaded before it applies gates (store.versions.check_gate_groups)
        "gate_groups": sorted(GATE_GROUPS),
        **gate_sources(config.get("filters")),
        "order": list(order),
        "stages": {},
        "versions": {},
        "started_at": now(),
    }


#: A running stage refreshes its manifest entry at most this often (``fabrika status`` on a live run).
LIVE_SECONDS = 5.0


class RunManifest:
    """The manifest of a run while ``fabrika run`` writes it (one instance per invocation).

    Every write is atomic (:meth:`RunStore.write_manifest`). ``accounting`` returns the engine's
    counters, recorded with each write (an error there is recorded, never raised).
    """

    def __init__(self, store: "RunStore", accounting: Callable[[], Any] | None = None,
                 live_every: float = LIVE_SECONDS) -> None:
        self.store = store
        self.accounting = accounting
        self.live_every = live_every
        self.doc: dict[str, Any] = {}
        self.invocation: dict[str, Any] = {}
        #: sandbox isolation modes the stages of this invocation reported
        self.isolation: set[str] = set()
        self._last_live = time.monotonic()

    def start(self, fresh: dict[str, Any], previous: Mapping[str, Any], resume: bool) -> None:
        """Begin an invocation: ``fresh`` (:func:`base_manifest`) keeps what ``previous`` recorded
        (start time, versions, stage entries, invocations) and the status becomes ``running``."""
        self.doc = fresh
        if previous:
            fresh["started_at"] = previous.get("started_at", fresh["started_at"])
            fresh["versions"] = previous.get("versions", {})
            fresh["stages"] = previous.get("stages", {})
            if previous.get("latest_version"):
                fresh["latest_version"] = previous["latest_version"]
            if previous.get("config_hash") != fresh["config_hash"]:
                fresh["config_changed_on_resume"] = True  # stages whose settings changed are redone
        self.invocation = {"started_at": now(), "resume": resume, "pid": os.getpid(), "host": socket.gethostname()}
        fresh["invocations"] = [*previous.get("invocations", []), self.invocation]
        self.write("running")

    def entry(self, stage: str) -> dict[str, Any]:
        return self.doc.setdefault("stages", {}).setdefault(stage, {})

    def write(self, status: str) -> None:
        m = self.doc
        m["status"] = status
        m["updated_at"] = now()
        if self.accounting is not None:
            try:
                m["accounting"] = self.accounting()
            except Exception as exc:  # noqa: BLE001 - accounting must not kill a run
                m["accounting"] = {"error": f"{type(exc).__name__}: {exc}"}
        # one record per `fabrika run` of this directory: a resumed run's cost is the sum of these
        self.invocation.update(status=status, updated_at=m["updated_at"],
                               llm_totals=(m.get("accounting") or {}).get("totals"))
        if self.isolation:
            modes = sorted(self.isolation)
            m["sandbox_isolation"] = modes[0] if len(modes) == 1 else modes
        self.store.write_manifest(m)

    def stage_settings(self, stage: str, fingerprint: str, fields: Mapping[str, Any]) -> None:
        """Record the settings fingerprint a per-item stage's rows are written under."""
        self.entry(stage).update(config_fingerprint=fingerprint, config_fields=dict(fields))
        self.write("running")

    def stage_live(self, stage: str, facts: Mapping[str, Any]) -> None:
        """Progress of a running stage, at most every ``live_every`` seconds (counters only, no pass over the store)."""
        t = time.monotonic()
        if t - self._last_live < self.live_every:
            return
        self._last_live = t
        self.entry(stage).update(complete=False, **facts)
        self.write("running")

    def stage_finished(self, stage: str, facts: Mapping[str, Any], complete: bool) -> int:
        """A stage's final entry: the store's counts of its table plus ``facts``. Returns its duplicate ids."""
        entry = self.entry(stage)
        entry.update(self.store.counts(stage))
        entry.update(facts, complete=complete)
        self.write("running")
        return int(entry.get("duplicate_ids", 0))


def effective_status(manifest: dict[str, Any]) -> str:
    """The manifest's status, or ``killed`` when it says running but its process is gone (kill -9, OOM)."""
    status = str(manifest.get("status", "unknown"))
    last = (manifest.get("invocations") or [{}])[-1]
    if status != "running" or last.get("host") != socket.gethostname() or not last.get("pid"):
        return status
    try:
        os.kill(int(last["pid"]), 0)
    except ProcessLookupError:
        return "killed"
    except PermissionError:
        return status
    return status
