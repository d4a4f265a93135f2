"""`fabrika train sft|grpo|merge|tiny`: argument parsing over :mod:`fabrika.train`.

Every command reads a YAML config (see ``configs/train/``), applies
``--set FIELD=VALUE`` overrides (values parsed as YAML), and maps fabrika's
config/input errors to exit code 2 with a one-line message. torch, TRL and
mergekit are imported only when a command runs, so ``fabrika --help`` stays fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from fabrika.errors import ConfigError, InputError

train_app = typer.Typer(no_args_is_help=True, help="Thin TRL training: SFT, GRPO experts, SLERP merge.")
_out = Console() if sys.stdout.isatty() else Console(width=160)
_err = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=240)

_YAML11_WORDS = frozenset({"yes", "no", "on", "off", "y", "n"})

SetOption = Annotated[Optional[list[str]], typer.Option(
    "--set", help="FIELD=VALUE override of the YAML (value parsed as YAML; repeatable).")]
NoPreset = Annotated[bool, typer.Option("--no-preset", help="Start from TRL defaults, not the reference recipe.")]
ConfigArg = Annotated[Path, typer.Argument(help="Training YAML (see configs/train/).")]


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["a=1", "b=x"]`` → ``{"a": 1, "b": "x"}``; a missing ``=`` is a ConfigError naming the item."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r} must look like FIELD=VALUE, e.g. --set learning_rate=1e-6")
        # YAML 1.1 reads yes/no/on/off as booleans; TRL wants e.g. save_strategy=no as the string.
        out[key.strip()] = value if value.lower() in _YAML11_WORDS else (yaml.safe_load(value) if value else "")
    return out


def _guard(action: Callable[[], Any]) -> Any:
    try:
        return action()
    except (ConfigError, InputError) as exc:
        for line in str(exc).splitlines() or [""]:
            _err.print(f"[red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


@train_app.command()
def sft(config: ConfigArg, set_: SetOption = None, no_preset: NoPreset = False) -> None:
    """Supervised fine-tuning on an exported prompt–completion dataset (loss on the completion only)."""

    def go() -> None:
        from fabrika.train.sft import load_sft_config, run_sft

        cfg = load_sft_config(config, parse_overrides(set_), use_preset=not no_preset)
        trainer = run_sft(cfg)
        _out.print(f"sft: {trainer.state.global_step} steps, model saved to {cfg.output_dir}", markup=False)

    _guard(go)


@train_app.command()
def grpo(
    config: ConfigArg,
    expert: Annotated[str, typer.Option("--expert", help="Expert to train: if, fc or general.")],
    set_: SetOption = None,
    no_preset: NoPreset = False,
    allow_no_rm_correction: Annotated[bool, typer.Option(
        "--allow-no-rm-correction", help="IF expert: accept a config whose if_reward_kwargs turn the RM correction "
        "off (refused otherwise: without it an untrained policy's garbage scores high).")] = False,
) -> None:
    """GRPO for one expert with its reward (IF verifiers, FC exact match, General RM × length)."""

    def go() -> None:
        from fabrika.train.grpo import load_grpo_config, run_grpo

        overrides = parse_overrides(set_)
        if allow_no_rm_correction:
            overrides["allow_no_rm_correction"] = True
        cfg = load_grpo_config(expert, config, overrides, use_preset=not no_preset)
        trainer = run_grpo(cfg)
        _out.print(f"grpo {expert}: {trainer.state.global_step} steps, model saved to {cfg.output_dir}", markup=False)

    _guard(go)


@train_app.command()
def merge(config: ConfigArg, set_: SetOption = None) -> None:
    """Two-stage SLERP of the experts (or the scored grid search when `grid` is set)."""

    def go() -> None:
        from fabrika.train.merge import load_merge_config, run_merge_config

        cfg = load_merge_config(config, parse_overrides(set_))
        path = run_merge_config(cfg)
        if cfg.grid is not None:
            import polars as pl

            table = pl.read_csv(path / "scores.csv")
            scored = table.filter(pl.col("score").is_not_nan()).height
            best = json.loads((path / "best.json").read_text(encoding="utf-8"))
            _out.print(f"merge grid: {scored} of {table.height} candidates scored; best attn_t={best['attn_t']:g} "
                       f"(score {best['score']:g}) at {best['model_dir']}; table at {path / 'scores.csv'}",
                       markup=False)
        else:
            _out.print(f"merge: model written to {path}", markup=False)

    _guard(go)


@train_app.command()
def tiny(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the tiny model to.")],
    seed: Annotated[int, typer.Option(help="Weight seed.")] = 0,
    rm: Annotated[bool, typer.Option("--rm", help="Build a 1-label sequence classifier (a toy RM).")] = False,
) -> None:
    """Build a tiny random Qwen2 + BPE tokenizer locally (smoke runs, no download)."""
    from fabrika.train.tiny import save_tiny

    path = save_tiny(out_dir, seed=seed, num_labels=1 if rm else None)
    _out.print(f"tiny model written to {path}", markup=False)


def register(app: typer.Typer) -> None:
    """Add the ``train`` sub-app to the main ``fabrika`` command."""
    app.add_typer(train_app, name="train")
