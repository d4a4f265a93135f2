"""A small IF pipeline built from the shipped ``configs/if_demo.yaml`` (the parts that reach the sandbox).

The whole demo (BERTopic, multi-constraint prompts, dialogues) takes minutes on two cores and
most of it never leaves the driver under Ray; this slice keeps every stage kind of the IF core
(expand → dedup → verifiers → consistency (sandbox, on the workers) → back-translation → queries →
responses → samples), so the dataset compared across executors depends on the worker-written table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fabrika.pipeline.config import PipelineConfig, load_config

ROOT = Path(__file__).resolve().parents[2]
IF_DEMO = ROOT / "configs" / "if_demo.yaml"
KEEP = ("if_expand", "if_dedup", "if_verifiers", "if_consistency", "if_backtranslation", "if_queries",
        "if_responses", "if_samples")


def small_if_document(run_dir: Path, executor: str, target_count: int = 48, **ray: Any) -> dict[str, Any]:
    """The YAML document (a dict) of the slice, with ``executor`` and ``ray`` settings."""
    doc = yaml.safe_load(IF_DEMO.read_text(encoding="utf-8"))
    stages = []
    for s in doc["stages"]:
        if s.get("name") not in KEEP:
            continue
        s = dict(s)
        if s["kind"] == "if.expand":
            s["target_count"] = target_count
            s["seed_files"] = [str((IF_DEMO.parent / p).resolve()) for p in s["seed_files"]]
        if s["kind"] == "if.backtranslation":
            s["similarity"] = {"backend": "tfidf"}
        if s["kind"] == "if.responses":
            s["judge"] = False
        stages.append(s)
    doc.update(name="if_ray", stages=stages, run_dir=str(run_dir), executor=executor,
               dataset={"stages": ["if_samples"]})
    doc["sandbox"] = {"workers": 1, "isolation": "rlimits"}
    if ray:
        doc["ray"] = ray
    return doc


def write_config(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def small_if_config(tmp: Path, executor: str, **ray: Any) -> PipelineConfig:
    run_dir = tmp / f"run-{executor}"
    return load_config(write_config(tmp / f"{executor}.yaml", small_if_document(run_dir, executor, **ray)))
