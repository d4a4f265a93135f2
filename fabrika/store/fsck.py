"""``fabrika fsck RUN_DIR``: check every journal and shard of a run; ``--repair`` sets damage aside.

What is checked:

* each stage journal (:mod:`fabrika.store.journal`): every record's checksum. A torn tail
  (what a crash leaves; ``run`` drops it on its own) and damaged records before it (which
  ``run`` refuses to read) are reported with line and byte offset;
* each stage shard and each materialised version's parquet file: the structure and every
  page of every column is decoded (:func:`fabrika.store.shards.verify_shard`), the row count
  matches the footer and every row has an ``id``;
* the manifest parses; temporary files of a crashed writer are counted.

``--repair`` (under the run directory's lock, so never beside a live run):

* a journal is rewritten, atomically, with its intact items only — the damaged items are
  dropped, so the next ``fabrika run`` redoes them; the original is kept in quarantine;
* a damaged shard is moved into ``<run_dir>/quarantine/<stamp>/`` (a rename, so the stage
  directory never holds half a repair) and the stage's epoch is dropped, so readers that
  followed the stage while it grew re-check it. Its items are no longer done: the next run
  redoes them (answers to unchanged requests come from the cache). A *global* stage (dedup,
  topics) is all-or-nothing, so every one of its shards is set aside and it is redone whole;
* temporary files are deleted.

Damaged version files and a damaged manifest are reported with their fix (re-materialise;
delete the manifest) but not changed. The report is clean (exit 0) when nothing is wrong or
everything wrong was repaired.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fabrika.store.journal as journal
import fabrika.store.shards as shards
from fabrika.errors import StorageError, StoreError
from fabrika.store.lock import hold_run_dir
from fabrika.store.run import EPOCH_FILE, MANIFEST

QUARANTINE = "quarantine"


@dataclass
class Problem:
    """One thing wrong with a run directory; ``repaired`` says whether ``--repair`` dealt with it."""

    path: Path
    what: str
    fix: str
    repaired: bool = False

    def line(self) -> str:
        state = "repaired: " if self.repaired else ""
        return f"{self.path}: {state}{self.what}" + ("" if self.repaired else f"; {self.fix}")


@dataclass
class FsckReport:
    run_dir: Path
    problems: list[Problem] = field(default_factory=list)
    journals: int = 0
    shards: int = 0
    rows: int = 0
    temp_files: int = 0
    #: Items (journal records) dropped and shards set aside by ``--repair``.
    dropped_items: int = 0
    quarantined: list[Path] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Nothing wrong is left (``fabrika fsck`` exits 0)."""
        return all(p.repaired for p in self.problems)


def _fix(run_dir: Path) -> str:
    return f"run `fabrika fsck {run_dir} --repair` (the next run redoes the dropped items)"


class _Quarantine:
    """Where ``--repair`` moves damaged files: ``<run_dir>/quarantine/<stamp>/<path in the run>``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.root = run_dir / QUARANTINE / time.strftime("%Y%m%dT%H%M%S", time.gmtime())

    def move(self, path: Path) -> Path:
        dest = self.root / path.relative_to(self.run_dir)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)  # same file system: atomic
        except OSError as exc:
            raise StorageError.from_os(exc, path, "cannot move into quarantine") from exc
        shards.fsync_dir(path.parent)
        shards.fsync_dir(dest.parent)
        return dest

    def copy(self, path: Path) -> Path:
        dest = self.root / path.relative_to(self.run_dir)
        shards.atomic_write_bytes(dest, path.read_bytes())
        return dest


def _layout(run_dir: Path, report: FsckReport) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not path.is_file():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        report.problems.append(Problem(path, f"unreadable manifest ({exc})",
                                       "delete it and rerun `fabrika run` (the stages' shards are kept)"))
        return {}
    layout = manifest.get("layout") if isinstance(manifest, dict) else None
    return layout if isinstance(layout, dict) else {}


def _check_journal(stage_dir: Path, report: FsckReport, quarantine: _Quarantine | None) -> None:
    for name in journal.journal_names(stage_dir):  # the stage's own and its LLM workers' journals
        _check_journal_file(stage_dir / name, report, quarantine)


def _check_journal_file(path: Path, report: FsckReport, quarantine: _Quarantine | None) -> None:
    report.journals += 1
    found = journal.scan(path)
    report.rows += found.rows
    if not found.damage:
        return
    first = found.damage[0]
    kind = "damaged record(s) before intact ones" if found.corrupt else "a cut record at the end (a crash)"
    what = (f"journal: {len(found.damage)} {kind}, first at line {first.line}, byte {first.offset}; "
            f"{found.rows} row(s) of {len(found.items)} item(s) intact")
    problem = Problem(path, what, _fix(report.run_dir))
    report.problems.append(problem)
    if quarantine is None:
        return
    quarantine.copy(path)
    journal.write_items(path, found.items)
    report.dropped_items += len(found.damage)
    problem.repaired = True


def _check_shards(stage_dir: Path, is_global: bool, report: FsckReport, quarantine: _Quarantine | None) -> None:
    files = shards.shard_files(stage_dir)
    bad: list[tuple[Path, StorageError]] = []
    for f in files:
        report.shards += 1
        try:
            report.rows += shards.verify_shard(f, full=True)
        except StorageError as exc:
            bad.append((f, exc))
    if not bad:
        return
    problems = [Problem(f, exc.problem, _fix(report.run_dir)) for f, exc in bad]
    report.problems.extend(problems)
    if quarantine is None:
        return
    # a global stage's table is all or nothing: set all of it aside so the stage is redone whole
    for f in files if is_global else [f for f, _ in bad]:
        report.quarantined.append(quarantine.move(f))
    (stage_dir / EPOCH_FILE).unlink(missing_ok=True)  # its output changed: followers re-check it
    for p in problems:
        p.repaired = True
        if is_global:
            p.what += f" (global stage: all {len(files)} shard(s) set aside, it is redone whole)"


def _check_versions(run_dir: Path, report: FsckReport) -> None:
    root = run_dir / "versions"
    if not root.is_dir():
        return
    for f in sorted(root.glob("*/*/*.parquet")):
        report.shards += 1
        try:
            shards.verify_shard(f, full=True, require_id=False)
        except StorageError as exc:
            report.problems.append(Problem(f, exc.problem, exc.fix))


def fsck(run_dir: str | Path, repair: bool = False) -> FsckReport:
    """Check (and with ``repair`` fix) every journal and shard of a run; see the module docs."""
    root = Path(run_dir)
    if not (root / MANIFEST).is_file() and not (root / "stages").is_dir():
        raise StoreError(f"{root}: not a run directory (no manifest.json, no stages/)")
    report = FsckReport(root)
    if repair:
        with hold_run_dir(root, f"fabrika fsck {root} --repair"):
            _scan(root, report, _Quarantine(root))
    else:
        _scan(root, report, None)
    return report


def _scan(root: Path, report: FsckReport, quarantine: _Quarantine | None) -> None:
    layout = _layout(root, report)
    stages_root = root / "stages"
    stage_dirs = sorted(p for p in stages_root.iterdir() if p.is_dir()) if stages_root.is_dir() else []
    for d in stage_dirs:
        info = layout.get(d.name)
        is_global = bool(info.get("global")) if isinstance(info, dict) else False
        _check_journal(d, report, quarantine)
        _check_shards(d, is_global, report, quarantine)
        sidecar = d / shards.REQUESTS_DIR
        temps = [p for p in d.iterdir() if p.name.startswith(shards.TEMP_PREFIX) and p.is_file()]
        temps += [p for p in (sidecar.iterdir() if sidecar.is_dir() else ())
                  if p.is_file() and (p.name.startswith(shards.TEMP_PREFIX) or not (d / p.name).exists())]
        report.temp_files += len(temps)
        if quarantine is not None:
            shards.clean_temp(d)
    _check_versions(root, report)


__all__ = ["QUARANTINE", "FsckReport", "Problem", "fsck"]
