"""The demo's own data, end to end: `configs/demo.yaml` → GRPO export → each expert trains one CPU step on it;
and the length scorer's token counts equal a real tokenizer's count of the rendered template on demo rows."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from fabrika.export.source import open_version
from fabrika.export.writer import ExportConfig, export
from fabrika.pipeline.config import load_config
from fabrika.pipeline.runner import RunResult, run_pipeline

pytestmark = [pytest.mark.train, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CPU = {"bf16": False, "use_cpu": True, "use_vllm": False, "num_generations": 4, "per_device_train_batch_size": 4,
       "gradient_accumulation_steps": 1, "max_completion_length": 8, "max_steps": 1, "learning_rate": 1e-3,
       "report_to": "none", "save_strategy": "no", "logging_steps": 1, "seed": 0, "log_completions": False}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_run_result: RunResult) -> dict[str, Path]:
    """`make demo` without make: configs/demo.yaml's run (shared, read-only: tests/conftest.py) exported as GRPO
    (HF format) with its settings."""
    root = tmp_path_factory.mktemp("demo")
    result = demo_run_result
    from fabrika.export.settings import settings_from_manifest

    settings = settings_from_manifest(open_version(result.run_dir).manifest)
    grpo = export(open_version(result.run_dir, None, settings.stages.get("grpo")),
                  ExportConfig(kind="grpo", out=root / "grpo", validate_rows=0))
    assert grpo.rows > 0
    return {"run": result.run_dir, "grpo": root / "grpo"}


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fabrika.train.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("rm") / "rm", seed=1, num_labels=1)


@pytest.mark.parametrize("expert", ["fc", "if", "general"])
def test_each_expert_trains_one_step_on_the_demo_export(demo: dict[str, Path], tiny_model: Path, tiny_rm: Path,
                                                        expert: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from fabrika.train.grpo import build_grpo_trainer, load_grpo_config

    extra: dict[str, Any] = {}
    if expert == "general":
        extra["rm_path"] = str(tiny_rm)
    if expert == "if":
        # the demo's IF rows carry α from its packaged stand-in RM: train with that same RM, correction on
        extra["rm_path"] = "sim"
    cfg = load_grpo_config(expert, overrides={"model_name_or_path": str(tiny_model), "dataset_path": str(demo["grpo"]),
                                              "output_dir": str(tmp_path / expert), **CPU, **extra})
    trainer = build_grpo_trainer(cfg)
    printed = capsys.readouterr().out
    assert f"GRPO data for expert {expert!r}" in printed
    experts = set(trainer.train_dataset["expert"])
    assert experts == ({"general", None} & experts or {None} if expert == "general" else {expert})
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 1
    rewards = [h for h in trainer.state.log_history if "reward" in h]
    assert rewards and all(r["reward"] == r["reward"] for r in rewards)  # the reward ran: a number, not NaN
    if expert == "general":  # an RM score varies within a group: a real gradient (a random policy never
        # matches an FC call or an IF constraint, so those groups have zero advantage and an exact-zero step)
        changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())]
        assert changed, "one optimizer step changed no parameter"


def test_if_expert_refuses_the_demo_export_with_another_rm(demo: dict[str, Path], tiny_model: Path,
                                                           tiny_rm: Path, tmp_path: Path) -> None:
    from fabrika.errors import InputError
    from fabrika.rewards.general import rm_identity
    from fabrika.train.grpo import build_grpo_trainer, load_grpo_config

    cfg = load_grpo_config("if", overrides={"model_name_or_path": str(tiny_model), "dataset_path": str(demo["grpo"]),
                                            "output_dir": str(tmp_path / "if"), "rm_path": str(tiny_rm), **CPU})
    with pytest.raises(InputError, match=f"α was scored by RM sim@v1 but rm_path is {rm_identity(tiny_rm)}"):
        build_grpo_trainer(cfg)


def test_length_tokens_equal_the_tokenizer_count_of_the_rendered_template(demo: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    from fabrika.filters.length import hf_token_counter, score_lengths
    from fabrika.schemas.template import load_template
    from fabrika.train.tiny import build_tokenizer

    tok = build_tokenizer()
    tok.save_pretrained(tmp_path / "tok")
    qwen3 = (ROOT / "fabrika" / "schemas" / "templates" / "qwen3.jinja").read_text("utf-8")
    data = demo["run"] / "versions" / "v1" / "data"
    rows = []
    for stage in ("fc.samples", "fc.irrelevance", "if_samples", "if_grpo", "general_answers"):
        frame = pl.read_parquet(data / f"{stage}.parquet")
        rows += frame.head(15).to_dicts()
    assert any(r.get("tools") not in (None, "[]") for r in rows)
    assert any('"tool_calls"' in (r.get("prompt") or "") for r in rows)  # histories with tool calls
    got = score_lengths(rows, hf_token_counter(str(tmp_path / "tok")), load_template(None), "hf:tok")

    from fabrika.schemas.chat import sft_record

    for row, lengths in zip(rows, got):
        rec = sft_record(row)
        tools = rec["tools"] or None
        # an independent count: transformers renders the same Qwen3 template and tokenizes it itself
        want_prompt = len(tok.apply_chat_template(rec["prompt"], tools=tools, chat_template=qwen3, tokenize=True,
                                                  add_generation_prompt=True, return_dict=True)["input_ids"])
        assert lengths["len_prompt_tokens"] == want_prompt, row["id"]
        if rec["completion"]:
            want_total = len(tok.apply_chat_template(rec["prompt"] + rec["completion"], tools=tools,
                                                     chat_template=qwen3, tokenize=True,
                                                     return_dict=True)["input_ids"])
            assert lengths["len_total_tokens"] == want_total, row["id"]
            assert lengths["len_completion_tokens"] == want_total - want_prompt
        else:
            assert lengths["len_total_tokens"] == want_prompt and lengths["len_completion_tokens"] is None
    # the system turn with tool schemas dominates FC rows: far more than the bare message text
    fc = [(r, g) for r, g in zip(rows, got) if r.get("expert") == "fc" and r.get("tools") not in (None, "[]")]
    text = sum(len(json.dumps(json.loads(r["prompt"]), ensure_ascii=False)) for r, _ in fc)
    assert sum(g["len_prompt_chars"] for _, g in fc) > text


def test_loosening_language_match_never_admits_unscored_rows(demo: dict[str, Path], tmp_path: Path) -> None:
    """The demo drops a few FC rows on language.require_match before dedup and length score them."""
    import shutil

    from fabrika.errors import StoreError
    from fabrika.store.versions import refilter

    run = tmp_path / "run"
    shutil.copytree(demo["run"], run)
    funnel = json.loads((run / "versions" / "v1" / "funnel.json").read_text(encoding="utf-8"))
    dropped = funnel["gates"]["fc.samples"].get("dropped_language.require_match", 0)
    try:
        refilter(run, ["filters.language.require_match=false"])
        refused = False
    except StoreError as exc:  # rows the language gate dropped at run time were never scored by dedup/length
        refused = True
        assert re.search(r"keep rows of 'fc.samples' that a scorer never saw .*by fc_dedup.*"
                         r"--set filters.language.require_match=false", str(exc)), str(exc)
        assert sorted(p.name for p in (run / "versions").iterdir() if not p.name.startswith(".")) == ["v1"]
    assert refused == (dropped > 0), (refused, dropped)  # refused exactly when loosening would admit unscored rows
    # the command it names: run again with the loosened gate (cached answers, scorers see the rows), then refilter
    config = load_config(ROOT / "configs" / "demo.yaml")
    filters = {**config.filters, "language": {"require_match": False}}
    run_pipeline(config.model_copy(update={"run_dir": run, "filters": filters}), progress=False, cache_only=True)
    info, _ = refilter(run, ["filters.language.require_match=false"])
    kept = pl.read_parquet(info.path / "data" / "fc.samples.parquet")
    assert info.funnel["gates"]["fc.samples"].get("dropped_language.require_match", 0) == 0
    assert kept.height > 0
    assert kept["dup_is_representative"].null_count() == 0 and kept["len_total_tokens"].null_count() == 0
