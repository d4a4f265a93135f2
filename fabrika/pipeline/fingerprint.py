"""Per-stage config fingerprints: what a per-item stage's rows depend on, to notice a changed config on resume.

A stage's fingerprint covers its own config minus bookkeeping (``name``,
``chunk_size``, ``max_items``, ``max_in_flight``: they change how much or how
fast, not what), the LLM settings that change answers (backend, model,
default sampling parameters, ``extra_body``, the ``sim`` seed), the pipeline
seed, and the fingerprints of the stages it reads — so a changed upstream
stage re-processes its consumers too (their unchanged requests are cache hits).
Gate thresholds are left out on purpose: they decide *which* rows a stage
reads, and a stage processes newly passing rows without redoing the others
(docs/ARCHITECTURE.md, "what a refilter can change").
"""

from __future__ import annotations

from typing import Any

from fabrika.pipeline.config import PipelineConfig, execution_order, inputs_of
from fabrika.schemas.ids import stable_id

STAGE_EXCLUDED = frozenset({"name", "chunk_size", "max_items", "max_in_flight"})
LLM_FIELDS = ("backend", "model", "temperature", "top_p", "max_tokens", "seed", "extra_body")


def _llm_fields(config: PipelineConfig) -> dict[str, Any]:
    raw = config.llm.model_dump(mode="json")
    out = {k: raw.get(k) for k in LLM_FIELDS}
    if out.get("backend") == "sim":
        out["sim.seed"] = (raw.get("sim") or {}).get("seed", 0)
    return out


def stage_fingerprints(config: PipelineConfig) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{stage: (fingerprint, fields)}``; ``fields`` (JSON) lets a changed fingerprint name what changed."""
    llm = _llm_fields(config)
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for stage in execution_order(config):
        own = {k: v for k, v in stage.model_dump(mode="json").items() if k not in STAGE_EXCLUDED}
        fields = {"stage": own, "llm": llm, "seed": config.seed,
                  "inputs": {src: out[src][0] for src in inputs_of(stage) if src in out}}
        out[stage.stage_name] = (stable_id(fields), fields)
    return out


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Names of what differs between two ``fields`` mappings: ``max_tokens``, ``llm.model``, ``input answers``."""
    names = []
    for key, value in (new.get("stage") or {}).items():
        if (old.get("stage") or {}).get(key) != value:
            names.append(key)
    for key, value in (new.get("llm") or {}).items():
        if (old.get("llm") or {}).get(key) != value:
            names.append(f"llm.{key}")
    if old.get("seed") != new.get("seed"):
        names.append("seed")
    for src, fp in (new.get("inputs") or {}).items():
        if (old.get("inputs") or {}).get(src) != fp:
            names.append(f"input {src}")
    return names or ["the stage's config"]
