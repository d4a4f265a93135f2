"""The dataset card's TRL snippet: valid code whose config arguments the installed TRL accepts, with
a max_length that covers the data's longest row; the length tokenizer and sandbox mode are named."""

from __future__ import annotations

import ast
from pathlib import Path

from fabrika.export.card import length_stats, render_card, trl_limits, trl_snippet
from fabrika.export.source import open_version
from fabrika.filters.text import count_tokens, messages_text
from tests.export.export_fixtures import make_rows, make_run


def _config_kwargs(snippet: str, name: str) -> dict:
    tree = ast.parse(snippet)  # the snippet is valid Python
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name)
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords}


def test_sft_snippet_runs_against_the_installed_trl_and_covers_the_longest_row(tmp_path: Path):
    rows = make_rows(24)
    long_text = " ".join(["слово"] * 900)
    assert "Готово" in rows[3]["completion"]  # a text target
    rows[3]["completion"] = rows[3]["completion"].replace("Готово", long_text)
    source = open_version(make_run(tmp_path, rows))
    lengths = length_stats(source, "sft")
    assert lengths is not None and "razdel" in lengths["tokenizer"]
    longest = max(count_tokens(messages_text(r["prompt"])) + count_tokens(r["tools"] or "")
                  + count_tokens(messages_text(r["completion"], with_calls=True)) for r in rows)
    assert lengths["total"]["max"] == longest > 900
    snippet = trl_snippet("sft", "hf", lengths, "fc")
    kwargs = _config_kwargs(snippet, "SFTConfig")
    assert kwargs["max_length"] >= 2 * longest and kwargs["max_length"] % 256 == 0
    from trl import SFTConfig

    cfg = SFTConfig(**{**kwargs, "output_dir": str(tmp_path / "o"), "report_to": "none", "use_cpu": True,
                       "bf16": False})
    assert cfg.max_length == kwargs["max_length"] and cfg.completion_only_loss is True


def test_grpo_snippet_uses_the_fc_reward_and_a_valid_grpo_config(tmp_path: Path):
    source = open_version(make_run(tmp_path, make_rows(12)))
    lengths = length_stats(source, "grpo")
    snippet = trl_snippet("grpo", "parquet", lengths, "fc")
    assert "from fabrika.rewards.fc import fc_reward" in snippet and "reward_funcs=fc_reward" in snippet
    kwargs = _config_kwargs(snippet, "GRPOConfig")
    assert kwargs["max_completion_length"] >= trl_limits(lengths)["max_completion_length"] > 0
    from trl import GRPOConfig

    GRPOConfig(**{**kwargs, "output_dir": str(tmp_path / "g"), "report_to": "none", "per_device_train_batch_size": 8,
                  "use_cpu": True, "bf16": False})


def test_card_names_the_tokenizer_the_sandbox_and_the_shares(tmp_path: Path):
    source = open_version(make_run(tmp_path, make_rows(12)))
    source.manifest["sandbox_isolation"] = "rlimits"
    source.manifest.setdefault("config", {})["stages"] = []
    card = render_card(source, "sft", "hf", 12, {"lang": {"ru": 6, "en": 6}, "expert": {"if": 12}}, "apache-2.0")
    assert "## Lengths" in card and "razdel word-tokens" in card and "max_length=" in card
    assert "sandbox isolation `rlimits`" in card and "weaker than bubblewrap" in card
    assert "- lang: ru: 6 (50.0%), en: 6 (50.0%)" in card
