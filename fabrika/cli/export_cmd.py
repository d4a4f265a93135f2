"""``fabrika export RUN``: write a materialised version as an SFT or GRPO dataset.

Logic lives in :mod:`fabrika.export` (callable without the CLI); this module
parses options, prints the result and maps errors to exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
import yaml

if TYPE_CHECKING:
    from fabrika.export.records import ExportKind
    from fabrika.export.writer import ExportFormat

_KINDS: dict[str, ExportKind] = {"sft": "sft", "grpo": "grpo"}
_FORMATS: dict[str, ExportFormat] = {"hf": "hf", "parquet": "parquet", "jsonl": "jsonl"}


def _mix_config(mix: str | None, size: int | None, seed: int | None, default: Any):  # noqa: ANN202
    """``--mix/--size/--seed`` over the run's ``export.mix`` (``default``); None = no mixing."""
    from fabrika.errors import ConfigError
    from fabrika.export.mix import MixConfig

    if mix is None and size is None:
        if default is not None and seed is not None:
            return default.model_copy(update={"seed": seed})
        return default
    size = size if size is not None else (default.size if default is not None else None)
    if size is None:
        raise ConfigError("--mix needs --size N (the exact number of output rows)")
    seed = seed if seed is not None else (default.seed if default is not None else 0)
    if mix is None:
        return default.model_copy(update={"size": size, "seed": seed})
    if mix in ("default", "reference"):
        return MixConfig(size=size, seed=seed)
    path = Path(mix)
    if not path.is_file():
        raise ConfigError(f"--mix {mix!r}: not a file; give a YAML file with `dimensions:` or 'default'")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    dims = data.get("dimensions", data) if isinstance(data, dict) else data
    try:
        return MixConfig(size=size, seed=seed, dimensions=dims)
    except ValueError as exc:
        raise ConfigError(f"--mix {mix}: {exc}") from exc


def _kind_shares(text: str) -> dict[str, float]:
    """``general=0.5,if=0.25,fc=0.25`` → shares (checked to sum to 1 by :class:`MixConfig`)."""
    from fabrika.errors import ConfigError

    shares: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        kind, sep, value = part.partition("=")
        try:
            shares[kind.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not kind.strip():
            raise ConfigError(f"--mix-kinds: {part!r} is not KIND=SHARE; write e.g. general=0.5,if=0.25,fc=0.25")
    return shares


def _with_kinds(cfg: Any, mix_kinds: str | None, mix: str | None, size: int | None, seed: int | None) -> Any:
    """``--mix-kinds`` over the mix built from ``--mix``/``--size``/``--seed`` (FC dimensions apply inside fc)."""
    from fabrika.errors import ConfigError
    from fabrika.export.mix import MixConfig

    if mix_kinds is None:
        return cfg
    size = size if size is not None else (cfg.size if cfg is not None else None)
    if size is None:
        raise ConfigError("--mix-kinds needs --size N (the exact number of output rows)")
    base = cfg if cfg is not None else MixConfig(size=size)
    dims = [] if mix == "none" else base.dimensions
    try:
        return MixConfig(size=size, seed=seed if seed is not None else base.seed, dimensions=dims,
                         kinds=_kind_shares(mix_kinds), kind_column=base.kind_column,
                         dimensions_kind=base.dimensions_kind)
    except ValueError as exc:
        from pydantic import ValidationError

        why = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors()) \
            if isinstance(exc, ValidationError) else str(exc)
        raise ConfigError(f"--mix-kinds {mix_kinds}: {why}") from exc


def register(app: typer.Typer) -> None:
    """Add ``export`` to the fabrika app."""

    @app.command("export")
    def export_command(
        run_dir: Annotated[Path, typer.Argument(help="Run directory (runs/<name>).")],
        kind: Annotated[Optional[str], typer.Option("--kind", help="sft or grpo (default: the run's export.kind, "
                                                    "else sft).")] = None,
        fmt: Annotated[Optional[str], typer.Option("--format", help="hf (save_to_disk), parquet or jsonl (default: "
                                                   "export.format, else hf).")] = None,
        out_dir: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path("export"),
        version: Annotated[Optional[str], typer.Option("--version", help="Version to export (default latest).")] = None,
        stages: Annotated[Optional[str], typer.Option("--stages", help="Comma-separated dataset stages to export "
                                                      "(default export.stages.<kind>, else all).")] = None,
        mix: Annotated[Optional[str], typer.Option("--mix", help="'default' (70/30 en/ru, 80/20 call/text, "
                                                   "10% irrelevance) or a YAML file of dimensions.")] = None,
        mix_kinds: Annotated[Optional[str], typer.Option("--mix-kinds", help="Exact shares across data kinds, e.g. "
                                                         "general=0.5,if=0.25,fc=0.25 (needs --size); --mix "
                                                         "dimensions apply inside fc ('--mix none': no FC shares).")] = None,
        size: Annotated[Optional[int], typer.Option("--size", help="Exact output size when mixing.")] = None,
        seed: Annotated[Optional[int], typer.Option("--seed", help="Mix seed (default export.mix.seed, else 0).")] = None,
        validate_rows: Annotated[Optional[int], typer.Option(
            "--validate-rows", help="Rows to render with the chat template (default all; 0 skips).")] = None,
        template: Annotated[Optional[Path], typer.Option("--template", help="Chat template .jinja (default Qwen3).")] = None,
        overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --out.")] = False,
        license_: Annotated[Optional[str], typer.Option("--license", help="License field of the dataset card "
                                                        "(default export.license, else other).")] = None,
        push_to_hub: Annotated[Optional[str], typer.Option("--push-to-hub", help="HF repo id (needs --token).")] = None,
        token: Annotated[Optional[str], typer.Option("--token", help="HF token for --push-to-hub.", envvar="HF_TOKEN")] = None,
    ) -> None:
        """Export a version to HF datasets / parquet / jsonl, validated against a chat template."""
        from fabrika.cli.app import err, fail, out
        from fabrika.errors import ConfigError, InputError, StoreError
        from fabrika.export.settings import settings_from_manifest
        from fabrika.export.source import open_version
        from fabrika.export.writer import ExportConfig, export

        if kind is not None and kind not in _KINDS:
            fail(f"--kind must be 'sft' or 'grpo', got {kind!r}")
        if fmt is not None and fmt not in _FORMATS:
            fail(f"--format must be 'hf', 'parquet' or 'jsonl', got {fmt!r}")
        if push_to_hub and not token:
            fail("--push-to-hub needs --token (or HF_TOKEN); nothing was pushed")
        try:
            base = settings_from_manifest(open_version(run_dir, version).manifest)
            export_kind = _KINDS[kind] if kind else base.kind
            chosen = [s.strip() for s in stages.split(",") if s.strip()] if stages else base.stages.get(export_kind)
            source = open_version(run_dir, version, chosen)
            export_format = _FORMATS[fmt] if fmt else base.format
            if mix_kinds is None and mix == "none":
                raise ConfigError("--mix none only goes with --mix-kinds (kind shares without FC shares)")
            if mix_kinds is not None:
                mix_cfg = base.mix if mix in (None, "none") else _mix_config(mix, size, seed, base.mix)
            else:
                mix_cfg = _mix_config(mix, size, seed, base.mix)
            cfg = ExportConfig(kind=export_kind, format=export_format, out=out_dir,
                               mix=_with_kinds(mix_cfg, mix_kinds, mix, size, seed),
                               validate_rows=validate_rows if validate_rows is not None else base.validate_rows,
                               template=str(template) if template else base.template, overwrite=overwrite,
                               license=license_ or base.license, push_to_hub=push_to_hub, token=token)
            from fabrika.store.lock import hold_run_dir

            with hold_run_dir(run_dir, f"fabrika export {run_dir}"):  # not while a run rewrites its versions
                result = export(source, cfg)
        except (ConfigError, InputError, StoreError, FileNotFoundError) as exc:
            fail(str(exc))
        out.print(f"exported {result.rows} rows ({export_kind}, {export_format}) to {result.out} in {result.seconds:.1f}s")
        for warning in result.warnings:
            err.print(f"warning: {warning}", highlight=False, soft_wrap=True)
        for reason, n in result.left_out_for_kind.items():
            out.print(f"  left out {n} rows for {export_kind} by {reason} (a gate scoped to {export_kind} exports)")
        if result.skipped_prompt_only:
            out.print(f"  skipped {result.skipped_prompt_only} prompt-only rows (GRPO prompts have no SFT target)")
        if result.mix is not None:
            if result.mix.kinds is not None:
                out.print("  kinds: " + ", ".join(f"{k['kind']} {k['rows']} ({k['achieved_share']:.1%})"
                                                   for k in result.mix.kinds))
            for dim, shares in result.mix.achieved_shares.items():
                out.print(f"  {dim}: " + ", ".join(f"{k} {v:.1%}" for k, v in shares.items()))
        if result.validation is not None:
            v = result.validation
            (out if v.ok else err).print(v.summary(), highlight=False, soft_wrap=True)
            if not v.ok:
                fail(f"{v.failed} row(s) fail chat-template validation; the export is written but must not be trained on")
        if result.pushed_to:
            out.print(f"pushed to https://huggingface.co/datasets/{result.pushed_to}")
