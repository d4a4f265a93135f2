"""The pipeline YAML's ``export:`` section: defaults for ``fabrika export``.

    export:
      kind: sft
      format: hf
      license: apache-2.0
      mix: {size: 10000, seed: 0}            # reference recipe shares
      # mix: {size: 10000, dimensions: [...]} # or your own

Command-line options win over the section; the section wins over built-in
defaults. :func:`validate_export_section` returns every problem as a
``(field, message)`` pair so ``fabrika validate`` can report it before a run.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fabrika.errors import ConfigError
from fabrika.export.mix import MixConfig


class ExportSettings(BaseModel):
    """Export defaults stored with the pipeline (``export:`` in YAML)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["sft", "grpo"] = Field(default="sft", description="'sft' or 'grpo'.")
    format: Literal["hf", "parquet", "jsonl"] = Field(default="hf", description="'hf', 'parquet' or 'jsonl'.")
    license: str = Field(default="other", description="License field of the dataset card.")
    mix: MixConfig | None = Field(default=None, description="Exact size, seed and shares; None = every kept row.")
    validate_rows: int | None = Field(default=None, ge=0, description="Rows rendered with the chat template; "
                                      "None = all, 0 = skip.")
    template: str | None = Field(default=None, description="Chat template .jinja path; None = packaged Qwen3.")
    stages: dict[Literal["sft", "grpo"], list[str]] = Field(
        default_factory=dict,
        description="Dataset stages each kind reads, e.g. {sft: [fc.samples, if_samples], grpo: [fc.samples, if_grpo]}; "
        "a kind not listed reads every dataset stage.")


def _key_path(loc: tuple[Any, ...]) -> str:
    """``export.mix.dimensions[0].shares``: the same key-path style as the rest of ``fabrika validate``."""
    out = "export"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def validate_export_section(data: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """Every problem of an ``export:`` section as ``("export.<key path>", message)``."""
    if data is not None and not isinstance(data, Mapping):
        return [("export", f"expected a mapping of export settings, got {data!r}")]
    try:
        ExportSettings.model_validate(dict(data or {}))
    except ValidationError as exc:
        out = []
        for err in exc.errors():
            if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
                msg = f"unknown key; allowed: {', '.join(ExportSettings.model_fields)}"
            elif err["type"] == "extra_forbidden":
                msg = "unknown key"
            else:
                msg = f"{err['msg']} (got {err.get('input')!r})"
            out.append((_key_path(tuple(err["loc"])), msg))
        return out
    return []


def settings_from_manifest(manifest: Mapping[str, Any]) -> ExportSettings:
    """The run's ``export:`` section (from the manifest's config), checked."""
    section = (manifest.get("config") or {}).get("export") or {}
    problems = validate_export_section(section)
    if problems:
        field, msg = problems[0]
        raise ConfigError(f"{field}: {msg} (in the run's pipeline config); fix the YAML or pass the option on the command line")
    return ExportSettings.model_validate(section)
