"""Export: mixing, conversion to TRL chat records, HF ``datasets`` / parquet / jsonl, validation, report.

    from fabrika.export import ExportConfig, MixConfig, export, open_version
    result = export(open_version("runs/fc"), ExportConfig(kind="sft", out="out/sft",
                                                          mix=MixConfig(size=10_000)))

Never calls an LLM (DESIGN: ``export`` must not).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabrika.export.mix import MixConfig, MixDimension, MixInfeasibleError, MixReport, mix, reference_dimensions
    from fabrika.export.records import grpo_record, to_record
    from fabrika.export.settings import ExportSettings, validate_export_section
    from fabrika.export.source import ExportSource, open_files, open_version
    from fabrika.export.validate import ValidationReport, check_record, validate_pairs, validate_records
    from fabrika.export.writer import ExportConfig, ExportResult, export, read_export

#: Where each public name lives: imported on first use, so a submodule (``fabrika browse``'s explorer
#: server) does not pay for the writer, the mixer and ``datasets`` before it answers.
_WHERE = {
    "grpo_record": "records", "to_record": "records", "ExportSettings": "settings",
    "validate_export_section": "settings", "ExportSource": "source", "open_files": "source",
    "open_version": "source", "ValidationReport": "validate", "check_record": "validate",
    "validate_pairs": "validate", "validate_records": "validate", "ExportConfig": "writer",
    "ExportResult": "writer", "export": "writer", "read_export": "writer",
    "MixConfig": "mix", "MixDimension": "mix", "MixInfeasibleError": "mix", "MixReport": "mix", "mix": "mix",
    "reference_dimensions": "mix",
}


class _Package(types.ModuleType):
    """``mix`` is both a name here and a submodule: the function wins whichever is imported first (importing
    the submodule sets the package's attribute to the module; this sets the function instead)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "mix" and isinstance(value, types.ModuleType):
            value = value.mix
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fabrika.export' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fabrika.export.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "ExportConfig",
    "ExportResult",
    "ExportSettings",
    "ExportSource",
    "MixConfig",
    "MixDimension",
    "MixInfeasibleError",
    "MixReport",
    "ValidationReport",
    "check_record",
    "export",
    "grpo_record",
    "mix",
    "open_files",
    "open_version",
    "read_export",
    "reference_dimensions",
    "to_record",
    "validate_pairs",
    "validate_export_section",
    "validate_records",
]
