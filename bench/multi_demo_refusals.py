"""Refusals and kept-prompt defects of ``if.multi.prompts`` on the shipped IF demo (sim), by composition mode.

    PYTHONPATH=$PWD python bench/multi_demo_refusals.py

Runs the multi-constraint part of ``configs/if_demo.yaml`` (if.expand target 60, k=6 verifiers, as
tests/instruct/test_multi_demo.py) once with ``composition: stored_cases`` (the old check) and once with
``witness``; prints refusal reasons by kind, and kept prompts whose members demand two different openings or
endings, disjoint word bounds, stack redundant word bounds, or hold an unmapped text speaking of a facet another
member fixes (read by fabrika.constraints.compose, the structured map).
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import polars as pl

from fabrika.constraints.compose import facet_conflict, library_member, redundant_bound, text_member, unverifiable
from fabrika.pipeline.config import load_config
from fabrika.pipeline.runner import run_pipeline
from fabrika.store.run import RunStore

ROOT = Path(__file__).resolve().parent.parent
KEEP = ("if.expand", "if.dedup", "if.verifiers", "if.consistency", "if.multi.prompts")


def run(mode: str, tmp: Path) -> tuple[Counter[str], int, int, int]:
    config = load_config(ROOT / "configs" / "if_demo.yaml")
    stages = []
    for s in config.stages:
        if s.kind not in KEEP:
            continue
        upd: dict = {"if.expand": {"target_count": 60}, "if.verifiers": {"k": 6},
                     "if.multi.prompts": {"composition": mode}}.get(s.kind, {})
        if s.kind == "if.backtranslation":
            continue
        stages.append(s.model_copy(update=upd))
    names = {s.name for s in stages}
    stages = [s for s in stages if not s.input or all(i in names for i in ([s.input] if isinstance(s.input, str)
                                                                         else s.input))]
    dataset = config.dataset.model_copy(update={"stages": []})
    config = config.model_copy(update={"stages": stages, "dataset": dataset, "run_dir": tmp / mode})
    run_pipeline(config, resume=False, progress=False)
    name = next(s.name for s in stages if s.kind == "if.multi.prompts")
    df = RunStore(tmp / mode).scan_raw(name).collect()
    reasons = Counter(str(r).split(":", 1)[0] for r in df["reason"].drop_nulls())
    kept = df.filter(pl.col("status") == "ok")
    conflicts = redundant = unread = 0
    for row in kept.iter_rows(named=True):
        members = [library_member(c["library_id"], c["params"], id=c["id"]) if c.get("library_id")
                   else text_member(c["id"], c["text"]) for c in json.loads(row["constraints"])]
        conflicts += facet_conflict(members) is not None
        redundant += redundant_bound(members) is not None
        unread += unverifiable(members) is not None
    return reasons, kept.height, conflicts, redundant, unread


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        for mode in ("stored_cases", "witness"):
            reasons, kept, conflicts, redundant, unread = run(mode, Path(d))
            print(f"| {mode} | {kept} | {conflicts} | {redundant} | {unread} | {dict(sorted(reasons.items()))} |")


if __name__ == "__main__":
    main()
