"""The dataset card (README.md) written into every export.

It says what a consumer must know before training on the data: counts and
shares, the thresholds and funnel that produced it, the generator models and
the LLM backend — simulated (``sim``) data is flagged at the top in capitals,
because a model trained on it learns nothing real.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from fabrika.export.mix import MixReport
    from fabrika.export.source import ExportSource
    from fabrika.export.validate import ValidationReport

SIM_WARNING = ("> **WARNING: SIMULATED DATA.** Rows of this dataset were produced by the `sim` backend "
               "(canned answers, no real model). Use it to test pipelines, NEVER to train a model.")


def generator_models(manifest: dict[str, Any]) -> list[str]:
    """Every model name mentioned in the run's config and accounting (``model`` keys, ``by_model`` maps)."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "model" and isinstance(v, str) and v:
                    found.add(v)
                elif k in ("by_model", "models") and isinstance(v, dict):
                    found.update(str(m) for m in v)
                elif k == "models" and isinstance(v, list):
                    found.update(str(m) for m in v if isinstance(m, str))
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk({k: manifest.get(k) for k in ("config", "accounting", "models")})
    return sorted(found)


def _shares(counts: dict[str, int]) -> str:
    total = sum(counts.values()) or 1
    return ", ".join(f"{k}: {v} ({v / total:.1%})" for k, v in counts.items())


def render_card(source: "ExportSource", kind: str, fmt: str, rows: int, stats: dict[str, Any], license: str,
                mix: "MixReport | None" = None, validation: "ValidationReport | None" = None) -> str:
    """Markdown with YAML front matter (license, languages, size) for the Hub."""
    backends = stats.get("llm_backend", {})
    simulated = "sim" in backends
    langs = sorted(k for k in stats.get("lang", {}) if k and k != "None")
    front = {"license": license, "language": langs, "tags": ["fabrika", "synthetic", kind] + (["simulated"] if simulated else []),
             "size_categories": [_size_category(rows)]}
    lines = ["---", yaml.safe_dump(front, allow_unicode=True, sort_keys=False).strip(), "---", ""]
    title = f"fabrika {kind.upper()} export"
    if source.run_dir is not None:
        title += f" of run `{source.run_dir.name}`" + (f", version `{source.version}`" if source.version else "")
    lines += [f"# {title}", ""]
    if simulated:
        lines += [SIM_WARNING, ""]
    lines += [
        f"- rows: **{rows}**",
        f"- kind: `{kind}`, format: `{fmt}`",
        f"- license: `{license}`",
        f"- LLM backend(s): {_shares(backends) if backends else 'unknown'}",
        f"- generator models: {', '.join(f'`{m}`' for m in generator_models(source.manifest)) or 'unknown'}",
        "",
        "## Shares",
        "",
    ]
    for col in ("lang", "target_type", "expert"):
        if stats.get(col):
            lines.append(f"- {col}: {_shares(stats[col])}")
    tokenizers = {k: v for k, v in stats.get("len_tokenizer", {}).items() if k and k != "None"}
    lines += ["", "Token counts (`len_*_tokens`, the rendered chat template): "
              + (_shares(tokenizers) if tokenizers else "not measured (no filter.length scorer)")
              + (" — `estimate:razdel` is an estimate, not the model's tokenizer" if "estimate:razdel" in tokenizers
                 else "")]
    if mix is not None:
        lines += ["", "## Mix", "", f"Exact size {mix.size}, seed {mix.seed}.", ""]
        if mix.kinds is not None:
            lines += ["Shares across data kinds (`expert`; rows without one are general chat):", "",
                      "| kind | target | achieved | rows | available |", "|---|---|---|---|---|"]
            lines += [f"| {k['kind']} | {k['target_share']:.3f} | {k['achieved_share']:.3f} | {k['rows']} | "
                      f"{k['available']} |" for k in mix.kinds]
            lines += ["", "Dimensions below apply inside the FC share." if mix.target_shares else "", ""]
        lines += ["| dimension | group | target | achieved |", "|---|---|---|---|"]
        for dim, shares in mix.target_shares.items():
            for group, target in shares.items():
                lines.append(f"| {dim} | {group} | {target:.3f} | {mix.achieved_shares[dim].get(group, 0):.3f} |")
    if kind == "sft":
        lines += ["", "## Format", "", "TRL conversational prompt–completion: `prompt` and `completion` are lists of chat "
                  "messages (tool call `function.arguments` is an object), `tools` are OpenAI tool dicts."]
    else:
        lines += ["", "## Format", "", "GRPO: `prompt` messages, `tools`, `ground_truth` (what the reward needs), "
                  "`target_type`, `lang`; IF rows carry `constraints`. When the source has them: `teacher_rm_mean` "
                  "(IF RM correction α), `rm_score` (general R), `difficulty_pass_rate` (dynamic sampling). "
                  "`ref_length` (general L0) is the stored value, else the reference answer's length in "
                  "characters (the general reward's default `length_unit: chars`)."]
    load = {"hf": "from datasets import load_from_disk\nds = load_from_disk(\"<this directory>\")",
            "parquet": "from datasets import load_dataset\nds = load_dataset(\"parquet\", data_files=\"data/*.parquet\")"
                       "  # nested columns are JSON strings",
            "jsonl": "from datasets import load_dataset\nds = load_dataset(\"json\", data_files=\"data/*.jsonl\")"}[fmt]
    lines += ["", "## Loading", "", "```python", load, "```"]
    if validation is not None:
        lines += ["", "## Validation", "", f"{validation.rows} rows rendered with `{validation.template}`: "
                  f"{validation.failed} failed."]
    lines += ["", "## Thresholds", "", "```json", json.dumps(source.thresholds, ensure_ascii=False, indent=2), "```",
              "", "## Funnel", "", "```json", json.dumps(source.funnel, ensure_ascii=False, indent=2), "```", ""]
    return "\n".join(lines)


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"
