"""Export: mixing, conversion to TRL chat records, HF ``datasets`` / parquet / jsonl, validation, report.

    from fabrika.export import ExportConfig, MixConfig, export, open_version
    result = export(open_version("runs/fc"), ExportConfig(kind="sft", out="out/sft",
                                                          mix=MixConfig(size=10_000)))

Never calls an LLM (DESIGN: ``export`` must not).
"""

from fabrika.export.mix import MixConfig, MixDimension, MixInfeasibleError, MixReport, mix, reference_dimensions
from fabrika.export.records import grpo_record, to_record
from fabrika.export.settings import ExportSettings, validate_export_section
from fabrika.export.source import ExportSource, open_files, open_version
from fabrika.export.validate import ValidationReport, check_record, validate_pairs, validate_records
from fabrika.export.writer import ExportConfig, ExportResult, export, read_export

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
