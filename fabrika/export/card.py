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
    import polars as pl

    from fabrika.export.mix import MixReport
    from fabrika.export.source import ExportSource
    from fabrika.export.validate import ValidationReport

SIM_RM_WARNING = ("> **WARNING: STAND-IN REWARD MODEL.** `rm_id: sim@v1` rows were scored (α = "
                  "`teacher_rm_mean`, general R) by fabrika's packaged offline stand-in RM, a deterministic hash of "
                  "prompt and answer — not a reward model. It only exercises the pipeline and the RM correction; "
                  "score real data with a real RM (`rm:` / `endpoint:`) and train with that same RM.")
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


def _sandbox_line(manifest: dict[str, Any]) -> list[str]:
    """How LLM-written verifiers ran (manifest ``sandbox_isolation``); rlimits-only is called out."""
    mode = manifest.get("sandbox_isolation")
    if not mode:
        return []
    weak = " — **weaker isolation: no namespaces (host filesystem view and loopback network)**" if "rlimits" in str(mode) else ""
    return [f"- sandbox isolation of LLM-written verifiers: `{mode}`{weak}"]


def render_card(source: "ExportSource", kind: str, fmt: str, rows: int, stats: dict[str, Any], license: str,
                mix: "MixReport | None" = None, validation: "ValidationReport | None" = None,
                frame: "pl.LazyFrame | None" = None) -> str:
    """Markdown with YAML front matter (license, languages, size) for the Hub; ``frame`` = the exported rows."""
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
    rm_ids = {k: v for k, v in stats.get("rm_id", {}).items() if k and k != "None"}
    if "sim@v1" in rm_ids:
        lines += [SIM_RM_WARNING, ""]
    lines += [
        f"- rows: **{rows}**",
        f"- kind: `{kind}`, format: `{fmt}`",
        f"- license: `{license}`",
        f"- LLM backend(s): {_shares(backends) if backends else 'unknown'}",
        f"- generator models: {', '.join(f'`{m}`' for m in generator_models(source.manifest)) or 'unknown'}",
        *([f"- reward model(s) of α / R (`rm_id`): {_shares(rm_ids)}"] if rm_ids else []),
        *_sandbox_line(source.manifest),
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
              + (" — `estimate:regex` is an estimate, not the model's tokenizer" if "estimate:regex" in tokenizers
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
    lengths = length_stats(source, kind, frame=frame)
    if lengths is not None:
        of = f" of the {rows} exported" if frame is not None and lengths["rows"] < rows else ""
        lines += ["", "## Lengths", "", f"Measured on {lengths['rows']}{of} rows with {lengths['tokenizer']}.", "",
                  "| part | p50 | p99 | max |", "|---|---:|---:|---:|"]
        for part in ("prompt", "completion", "total"):
            q = lengths[part]
            lines.append(f"| {part} | {q['p50']} | {q['p99']} | {q['max']} |")
        lines += ["", "## Training with TRL", "", trl_note(lengths, kind), "", "```python",
                  trl_snippet(kind, fmt, lengths, _expert(stats)), "```"]
    sandbox = source.manifest.get("sandbox_isolation")
    if sandbox or "if" in (stats.get("expert") or {}):
        lines += ["", "## Sandbox", "",
                  f"LLM-written verifiers ran with sandbox isolation `{sandbox or 'unknown (not recorded)'}`"
                  + (" (bubblewrap namespaces, no network)." if sandbox == "bwrap" else
                     " — rlimits only, weaker than bubblewrap; see the run's manifest." if sandbox == "rlimits" else ".")]
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


#: Rows sampled for the length table and the TRL snippet's limits.
LENGTH_ROWS = 5000
#: Assumed BPE tokens per razdel word-token when no model tokenizer measured the lengths (an
#: assumption, not measured here: Cyrillic text usually splits into more BPE pieces than English).
WORD_TO_BPE = 2.0


def _expert(stats: dict[str, Any]) -> str | None:
    experts = [k for k, v in sorted((stats.get("expert") or {}).items(), key=lambda kv: -kv[1]) if k and k != "None"]
    return experts[0] if experts else None


def _tokenizer(manifest: dict[str, Any]) -> str | None:
    for stage in ((manifest.get("config") or {}).get("stages") or []):
        if isinstance(stage, dict) and stage.get("kind") == "filter.length" and stage.get("tokenizer"):
            return str(stage["tokenizer"])
    return None


def _quantiles(values: list[int]) -> dict[str, int]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": 0, "p99": 0, "max": 0}

    def at(q: float) -> int:
        return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]

    return {"p50": at(0.5), "p99": at(0.99), "max": ordered[-1]}


def length_stats(source: "ExportSource", kind: str, max_rows: int = LENGTH_ROWS, *,
                 frame: "pl.LazyFrame | None" = None) -> dict[str, Any] | None:
    """p50/p99/max of prompt (with its tools), completion and total lengths over the exported rows.

    ``frame`` is what the export writes (after the kind's scope, prompt-only rows and the mix);
    without it the whole source is measured. A row's stored ``len_*_tokens`` (``filter.length``,
    unit ``len_tokenizer``) are used when present, else razdel word-tokens are counted here. One
    unit is reported as is; when some rows have stored counts and others not, the counted rows
    are scaled by :data:`WORD_TO_BPE` onto the token scale and the label says how many of each.
    ``None`` when the rows have no prompt.
    """
    from fabrika.filters.text import count_tokens, messages_text

    lf = frame if frame is not None else source.frame
    names = lf.collect_schema().names()
    if "prompt" not in names:
        return None
    stored = "len_prompt_tokens" in names and "len_completion_tokens" in names
    cols = [c for c in ("prompt", "completion", "tools", "len_prompt_tokens", "len_completion_tokens", "len_tokenizer")
            if c in names]
    rows = lf.select(cols).head(max_rows).collect()
    measured: list[tuple[int, int, str | None]] = []  # (prompt, completion, unit; None = razdel here)
    for row in rows.iter_rows(named=True):
        tools = count_tokens(row["tools"]) if isinstance(row.get("tools"), str) and row["tools"] not in ("", "[]") else 0
        if stored and row.get("len_prompt_tokens") is not None:
            unit = row.get("len_tokenizer") or _tokenizer(source.manifest) or "stored token counts"
            measured.append((int(row["len_prompt_tokens"]) + tools, int(row.get("len_completion_tokens") or 0),
                             str(unit)))
        else:
            c = count_tokens(messages_text(row.get("completion"), with_calls=True)) if row.get("completion") else 0
            measured.append((count_tokens(messages_text(row.get("prompt"))) + tools, c, None))
    if not measured:
        return None
    units = sorted({u for _, _, u in measured if u is not None})
    counted = sum(1 for _, _, u in measured if u is None)
    razdel = "razdel word-tokens (fabrika's default length unit: words, numbers, punctuation — not model tokens)"
    if not units:
        label, model_tokens, scale = razdel, False, 1.0
    else:
        label = ", ".join(_unit_label(u) for u in units)
        model_tokens, scale = True, WORD_TO_BPE
        if counted:
            label += (f" ({len(measured) - counted} rows); {counted} rows have no token count and were measured in "
                      f"razdel word-tokens × {WORD_TO_BPE:g} (an assumed BPE ratio)")
    prompt = [round(p * (scale if u is None else 1)) for p, _, u in measured]
    completion = [round(c * (scale if u is None else 1)) for _, c, u in measured]
    return {"rows": len(measured), "tokenizer": label, "model_tokens": model_tokens,
            "prompt": _quantiles(prompt), "completion": _quantiles(completion),
            "total": _quantiles([a + b for a, b in zip(prompt, completion)])}


def _unit_label(unit: str) -> str:
    if unit.startswith("estimate"):
        return f"`{unit}` (an estimate of model tokens, not the model's tokenizer)"
    return f"the tokenizer `{unit}`"


def _round_up(n: float, step: int = 256) -> int:
    return max(step, int(-(-n // step) * step))


def trl_limits(lengths: dict[str, Any]) -> dict[str, int]:
    """``max_length`` (SFT) and ``max_completion_length`` (GRPO) covering the longest rows of the sample."""
    factor = 1.0 if lengths["model_tokens"] else WORD_TO_BPE
    # chat-template markup adds a few tokens per message; 64 covers a long multi-turn row
    return {"max_length": _round_up(lengths["total"]["max"] * factor + 64),
            "max_completion_length": _round_up(lengths["completion"]["max"] * factor + 16, 128)}


def trl_note(lengths: dict[str, Any], kind: str = "sft") -> str:
    limits = trl_limits(lengths)
    how = ("lengths are model tokens" if lengths["model_tokens"] else
           f"lengths are razdel word-tokens, multiplied by an assumed {WORD_TO_BPE:g} BPE tokens per word-token — "
           "give `filter.length` your model's tokenizer (`tokenizer: <local dir>`) to have them exact")
    if kind != "sft":
        return (f"`max_completion_length={limits['max_completion_length']}` lets a policy answer as long as the "
                f"longest reference answer here; {how}. The longest prompt (tools included) is "
                f"{lengths['prompt']['max']} — keep the model's context (and vLLM's `max_model_len`) above prompt "
                "plus completion.")
    return (f"`max_length={limits['max_length']}` keeps the longest row (tools included) uncut; {how}. "
            "Rows longer than `max_length` are truncated by TRL, and a truncated completion teaches the model to "
            "stop mid-answer.")


def trl_snippet(kind: str, fmt: str, lengths: dict[str, Any], expert: str | None) -> str:
    """Copyable TRL code for this export (the loading line of ``fmt``, the limits of ``lengths``)."""
    limits = trl_limits(lengths)
    load = {"hf": 'ds = load_from_disk("<this directory>")',
            "parquet": 'ds = load_dataset("parquet", data_files="<this directory>/data/*.parquet", split="train")',
            "jsonl": 'ds = load_dataset("json", data_files="<this directory>/data/*.jsonl", split="train")'}[fmt]
    imports = "from datasets import load_from_disk" if fmt == "hf" else "from datasets import load_dataset"
    if kind == "sft":
        return "\n".join([
            imports, "from trl import SFTConfig, SFTTrainer", "", load,
            "args = SFTConfig(",
            '    output_dir="out/sft",',
            f"    max_length={limits['max_length']},  # longest row of this export, tools included",
            "    completion_only_loss=True,  # loss on the assistant targets only (prompt turns are context)",
            ")",
            'trainer = SFTTrainer(model="<base model>", args=args, train_dataset=ds)',
            "trainer.train()",
        ])
    if expert == "fc":
        reward = ["from fabrika.rewards.fc import fc_reward  # exact match of the calls (ground_truth)"]
        funcs = "fc_reward"
    else:
        reward = ["from fabrika.train.grpo import expert_reward, load_grpo_config",
                  f'reward = expert_reward(load_grpo_config("{expert or "general"}", overrides={{',
                  '    "model_name_or_path": "<base model>", "dataset_path": "<this directory>"}))'
                  + ("  # verifiers run in the sandbox" if expert == "if" else "")]
        funcs = "reward"
    return "\n".join([
        imports, "from trl import GRPOConfig, GRPOTrainer", *reward, "", load,
        "args = GRPOConfig(",
        '    output_dir="out/grpo",',
        f"    max_completion_length={limits['max_completion_length']},  # longest reference answer here",
        "    num_generations=8,",
        ")",
        f'trainer = GRPOTrainer(model="<base model>", reward_funcs={funcs}, args=args, train_dataset=ds)',
        "trainer.train()",
        f"# or: fabrika train grpo --expert {expert or 'general'} --set dataset_path=<this directory>",
    ])
