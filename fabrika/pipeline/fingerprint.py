"""Per-stage fingerprints: what a stage's rows depend on, to notice a change on resume (DESIGN contract 9).

A stage's fingerprint covers its own config minus bookkeeping (``name``,
``chunk_size``, ``max_items``, ``max_in_flight``: they change how much or how
fast, not what), the LLM settings that change answers (backend, model,
default sampling parameters, ``extra_body``, the ``sim`` seed), the pipeline
seed, its lineage (:mod:`fabrika.pipeline.lineage`: the code of the stage's
modules, the prompt templates it renders and, on ``backend: sim``, the sim
responders it may reach), the contents of the input files it declares
(``Stage.input_files``: seed files, corpora, pools, tools specs, model and
tokenizer directories; :mod:`fabrika.pipeline.input_digest`), the releases of the
libraries its code can import that decide rows (an embedding engine, a language detector,
numpy's random streams; :mod:`fabrika.pipeline.lineage_libraries`) and the
fingerprints of the stages it reads — its inputs and the annotators of
them whose score columns it reads (a changed ``rm.teacher_scores`` redoes the
``if.grpo`` rows that copy its α; a gate's scorer is not among them) — so an edited input file or a changed
upstream stage re-processes its consumers too (their unchanged requests are
cache hits). Gate thresholds are left out on purpose: they decide
*which* rows a stage reads, and a stage processes newly passing rows without
redoing the others (docs/ARCHITECTURE.md, "what a refilter can change").

:func:`changed_fields` names what differs between two recorded ``fields``
(``prompt instruct/expand``, ``code fabrika.generators.instruct.expand``,
``sim responder if.expand``, ``input file seed_files[0] (seeds.jsonl)``,
``input if_dedup``, ``llm.model``, ``max_tokens``);
:func:`reason_kind` sorts such a name into the kinds ``fabrika status`` shows.
"""

from __future__ import annotations

from typing import Any

from fabrika.pipeline.config import PipelineConfig, execution_order, inputs_of, stage_dependencies
from fabrika.pipeline.input_digest import input_file_digests
from fabrika.pipeline.lineage import code_modules, stage_lineage
from fabrika.pipeline.lineage_libraries import library_versions
from fabrika.pipeline.stage import STAGES
from fabrika.schemas.ids import stable_id

STAGE_EXCLUDED = frozenset({"name", "chunk_size", "max_items", "max_in_flight"})
LLM_FIELDS = ("backend", "model", "temperature", "top_p", "max_tokens", "seed", "extra_body")


def _llm_fields(config: PipelineConfig) -> dict[str, Any]:
    raw = config.llm.model_dump(mode="json")
    out = {k: raw.get(k) for k in LLM_FIELDS}
    if out.get("backend") == "sim":
        out["sim.seed"] = (raw.get("sim") or {}).get("seed", 0)
    return out


def _reads_scores_of(stage: Any, annotator: Any) -> bool:
    """Whether ``stage`` reads (or carries) a column the annotating stage ``annotator`` joins onto its input.

    Such a stage's rows depend on the scores — ``if.grpo`` copies ``rm.teacher_scores``' α and ``rm_id`` —
    so the annotator's fingerprint is part of its own. Scores that only gate which rows it reads are not:
    gates are thresholds, handled like a refilter (module doc). Undeclared columns count as read."""
    cls, ann = STAGES.get(stage.kind), STAGES.get(annotator.kind)
    if cls is None or ann is None or not ann.annotates:
        return False
    reads, writes = cls.contract(stage), ann.contract(annotator)
    if reads.reads is None or writes.writes is None or reads.carries:
        return True
    return bool({c.name for c in reads.reads} & {c.name for c in writes.writes})


def stage_fingerprints(config: PipelineConfig) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{stage: (fingerprint, fields)}``; ``fields`` (JSON) lets a changed fingerprint name what changed."""
    llm = _llm_fields(config)
    sim = llm.get("backend") == "sim"
    deps = stage_dependencies(config)
    by_name = {s.stage_name: s for s in config.stages}
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for stage in execution_order(config):
        own = {k: v for k, v in stage.model_dump(mode="json").items() if k not in STAGE_EXCLUDED}
        sources = inputs_of(stage)
        joined = sorted(a for a in deps.get(stage.stage_name, set()) - set(sources)
                        if a in by_name and _reads_scores_of(stage, by_name[a]))
        fields = {"stage": own, "llm": llm, "seed": config.seed,
                  "inputs": {src: out[src][0] for src in [*sources, *joined] if src in out}}
        cls = STAGES.get(stage.kind)
        if cls is not None:
            fields.update(stage_lineage(cls, sim))
            libraries = library_versions(code_modules(cls))
            if libraries:
                fields["libraries"] = libraries
            files = input_file_digests(stage, cls.input_files, config)
            if files:  # a stage that reads no file keeps the fingerprint it had before files were digested
                fields["files"] = files
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
    for part, label in LINEAGE_PARTS:
        was, now = old.get(part) or {}, new.get(part) or {}
        for key in sorted(set(was) | set(now)):
            if was.get(key) != now.get(key):
                names.append(f"{label} {key}")
    was_files, now_files = old.get("files") or {}, new.get("files") or {}
    first = " — not digested when its rows were written" if old and "files" not in old else ""
    for key in sorted(set(was_files) | set(now_files)):
        was, now = was_files.get(key) or {}, now_files.get(key) or {}
        if was.get("digest") != now.get("digest"):
            names.append(f"input file {key} ({now.get('path') or was.get('path')}){first}")
    was_libs, now_libs = old.get("libraries") or {}, new.get("libraries") or {}
    if "libraries" in old:
        for key in sorted(set(was_libs) | set(now_libs)):
            if was_libs.get(key) != now_libs.get(key):
                names.append(f"library {key} ({was_libs.get(key, 'none')} → {now_libs.get(key, 'none')})")
    elif now_libs and old:
        names.append("library versions (not recorded when its rows were written)")
    for src, fp in (new.get("inputs") or {}).items():
        if (old.get("inputs") or {}).get(src) != fp:
            names.append(f"input {src}")
    return names or ["the stage's config"]


#: The lineage parts of ``fields`` and how :func:`changed_fields` names a change in them.
LINEAGE_PARTS = (("code", "code"), ("prompts", "prompt"), ("sim", "sim responder"))
#: What :func:`reason_kind` returns, in the order ``fabrika status`` lists them.
REASON_KINDS = ("code changed", "prompt changed", "sim responder changed", "input file changed", "library changed",
                "config changed", "upstream changed")


def reason_kind(name: str) -> str:
    """The kind of one :func:`changed_fields` name: code, prompt, sim responder, input file, upstream or config."""
    for prefix, kind in (("code ", "code changed"), ("prompt ", "prompt changed"),
                         ("sim responder ", "sim responder changed"), ("input file ", "input file changed"),
                         ("library ", "library changed"),
                         ("input ", "upstream changed")):
        if name.startswith(prefix):
            return kind
    return "config changed"


def stale_reasons(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[str]]:
    """``{kind: [what]}`` of :func:`changed_fields`, kinds in :data:`REASON_KINDS` order."""
    grouped: dict[str, list[str]] = {}
    for name in changed_fields(old, new):
        kind = reason_kind(name)
        what = name.split(" ", 2)[-1] if kind != "config changed" else name
        if kind == "sim responder changed":
            what = name[len("sim responder "):]
        elif kind == "input file changed":
            what = name[len("input file "):]
        elif kind == "library changed":
            what = name[len("library "):]
        grouped.setdefault(kind, []).append(what)
    return {k: grouped[k] for k in REASON_KINDS if k in grouped}


def stale_stages(config: PipelineConfig, manifest: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Stages whose rows were written under another fingerprint than ``config`` (and today's code) gives.

    ``{stage: {kind: [what]}}`` (:func:`stale_reasons`), in execution order; stages with no
    recorded fingerprint (never ran) are left out. ``fabrika status`` shows it; the next
    ``fabrika run`` of ``config`` redoes exactly these (per-item stages by this fingerprint,
    global stages by it and their input).
    """
    from fabrika.llm.redact import redact

    recorded = manifest.get("stages") or {}
    out: dict[str, dict[str, list[str]]] = {}
    for name, (fp, fields) in stage_fingerprints(config).items():
        entry = recorded.get(name) or {}
        old = entry.get("config_fingerprint")
        if old is not None and old != fp:
            out[name] = stale_reasons(entry.get("config_fields") or {}, redact(fields))
    return out
