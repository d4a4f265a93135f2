"""The IF funnel of a run, step by step (the AutoIF paper's "100K → 72K → 50K" view).

Counts come from the stored shards with gates applied at the given thresholds, so
the funnel of a refilter is computed without any LLM call:

    python -m fabrika.generators.instruct.report runs/if_demo [--set filters.consistency.min_function_accuracy=1.0]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

from fabrika.gates import apply_gates, parse_set
from fabrika.pipeline.registry import load_run_modules
from fabrika.store.run import RunStore


def _names(manifest: Mapping[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in manifest.get("config", {}).get("stages", []):
        out.setdefault(s["kind"], []).append(s.get("name") or s["kind"])
    return out


def if_funnel(run_dir: str | Path, thresholds: Mapping[str, Any] | None = None) -> list[tuple[str, int]]:
    """``(step, count)`` pairs from seeds to samples; ``thresholds`` default to the run's ``filters``."""
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    load_run_modules(manifest)
    thresholds = dict(manifest.get("config", {}).get("filters", {}) if thresholds is None else thresholds)
    names = _names(manifest)
    first = {k: v[0] for k, v in names.items()}
    steps: list[tuple[str, int]] = []

    def count(stage: str, annotators: Sequence[str] = (), gated: bool = False, where: pl.Expr | None = None) -> int:
        lf = store.scan(stage, list(annotators))
        if lf is None:
            return 0
        if where is not None:
            lf = lf.filter(where)
        if gated:
            lf, _ = apply_gates(lf, thresholds)
        else:
            lf = lf.filter(pl.col("status") == "ok")
        return int(lf.select(pl.len()).collect().item())

    if "if.expand" in first:
        exp = first["if.expand"]
        steps.append(("seeds", count(exp, where=pl.col("source") != "llm")))
        raw = store.scan_raw(exp)
        steps.append(("candidates asked", 0 if raw is None else int(
            raw.filter(pl.col("source") == "llm").select(pl.len()).collect().item())))
        steps.append(("candidates in Russian, well-formed", count(exp, where=pl.col("source") == "llm")))
    if "if.dedup" in first:
        steps.append(("after dedup", count(first["if.dedup"])))
    if "if.verifiers" in first:
        ver = first["if.verifiers"]
        head = pl.col("sample_index").is_null()
        steps.append(("with parsed verifiers", count(ver, where=head)))
        annotators = [n for k in ("if.consistency", "if.backtranslation") for n in names.get(k, [])]
        cons = [n for n in names.get("if.consistency", [])]
        if cons:
            steps.append(("after cross-validation", count(ver, cons, gated=True, where=head)))
        if len(annotators) > len(cons):
            steps.append(("after back-translation", count(ver, annotators, gated=True, where=head)))
    for kind, label in (("if.queries", "prompts"), ("if.responses", "responses"), ("if.samples", "SFT samples"),
                        ("if.grpo", "GRPO prompts")):
        if kind in first:
            steps.append((label, count(first[kind], gated=True)))
    return steps


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--set", action="append", default=[], help="filters.GROUP.PARAM=VALUE threshold override (as in fabrika refilter)")
    args = ap.parse_args(argv)
    manifest = RunStore(args.run_dir).read_manifest()
    load_run_modules(manifest)
    thresholds = parse_set(args.set, manifest.get("config", {}).get("filters", {})) if args.set else None
    for step, n in if_funnel(args.run_dir, thresholds):
        print(f"{step:38s} {n:>9,d}")


if __name__ == "__main__":  # pragma: no cover
    main()
