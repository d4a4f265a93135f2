"""Write an export: HF ``datasets`` on disk, parquet or jsonl, plus a dataset card.

Nested fields never become Arrow structs: struct unification merges keys across
rows and fills ``null`` for the missing ones, so two tools with different
parameters (or two calls with different arguments) would come back corrupted.
Per format:

* ``hf``: ``datasets.save_to_disk`` with ``prompt``/``completion``/``tools`` as
  ``List(Json())`` (one JSON value per message/tool) and ``ground_truth`` /
  ``constraints`` as ``Json()``; loading gives back exactly the dicts written.
  The Arrow table is built column-wise (no per-row feature encoding), batch by
  batch into a staging Arrow file, so memory is bounded by ``batch_rows``.
* ``parquet``: the same columns, nested ones as JSON strings (``ensure_ascii=False``)
  for consumers that want plain strings.
* ``jsonl``: one JSON object per line with real nested values.

The output is built in a temporary sibling directory and renamed into place
(contract 5). ``push_to_hub`` runs only when both a repo id and a token are given.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import polars as pl
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from fabrika.errors import ConfigError, InputError
from fabrika.export.card import render_card
from fabrika.export.mix import MixConfig, MixReport, mix
from fabrika.export.records import (
    DERIVED_COLUMNS,
    GRPO_OPTIONAL_COLUMNS,
    LIST_FIELDS,
    NESTED_FIELDS,
    ExportKind,
    ref_length_columns,
    to_record,
)
from fabrika.export.source import ExportSource, iter_batches
from fabrika.export.validate import ValidationReport, validate_pairs
from fabrika.schemas.chat import message_elements, tool_elements, tools_to_chat
from fabrika.schemas.fastjson import dumps as fast_dumps
from fabrika.schemas.fastjson import loads
from fabrika.schemas.template import load_template

ExportFormat = Literal["hf", "parquet", "jsonl"]
SCALAR_TYPES: dict[str, pa.DataType] = {
    "id": pa.string(), "expert": pa.string(), "lang": pa.string(), "target_type": pa.string(),
    "teacher_rm_mean": pa.float64(), "teacher_rm_k": pa.int64(), "rm_id": pa.string(), "rm_score": pa.float64(),
    "ref_length": pa.float64(), "difficulty_pass_rate": pa.float64(), "ref_length_k": pa.int64(),
}
_PL_TYPES = {pa.float64(): pl.Float64, pa.int64(): pl.Int64}


class ExportConfig(BaseModel):
    """What ``fabrika export`` writes."""

    model_config = ConfigDict(extra="forbid")

    kind: ExportKind = Field(description="'sft' (prompt/completion/tools) or 'grpo' (prompt/ground_truth/...).")
    format: ExportFormat = Field(default="hf", description="'hf' (save_to_disk), 'parquet' or 'jsonl'.")
    out: Path = Field(description="Output directory (replaced atomically when `overwrite`).")
    mix: MixConfig | None = Field(default=None, description="Target shares and exact size; None = every kept row.")
    validate_rows: int | None = Field(default=None, ge=0,
                                      description="Rows to render with the chat template; None = all, 0 = skip.")
    template: str | None = Field(default=None, description="Chat template .jinja path; None = packaged Qwen3.")
    batch_rows: int = Field(default=50_000, ge=1, description="Rows converted per batch (memory bound).")
    overwrite: bool = Field(default=False, description="Replace an existing output directory.")
    license: str = Field(default="other", description="License field of the dataset card.")
    push_to_hub: str | None = Field(default=None, description="HF repo id to push to (needs `token`).")
    token: str | None = Field(default=None, description="HF token for `push_to_hub`; never written to disk.", repr=False)
    private: bool = Field(default=True, description="Create the hub repo as private.")
    max_length: int | None = Field(default=32768, ge=1, description="The trainer's max_length (tokens; the SFT "
                                   "preset's 32768 by default): rows whose stored `len_total_tokens` (the length "
                                   "scorer's rendered-template count) exceed it are counted in a warning, since "
                                   "TRL truncates them. None = no check.")


class ExportResult(BaseModel):
    """What an export wrote."""

    out: Path
    rows: int
    files: list[str]
    seconds: float
    mix: MixReport | None = None
    validation: ValidationReport | None = None
    pushed_to: str | None = None
    skipped_prompt_only: int = 0
    left_out_for_kind: dict[str, int] = Field(default_factory=dict,
                                              description="Rows gates scoped to this export kind left out, by gate.")
    warnings: list[str] = Field(default_factory=list)


def _records(lf: pl.LazyFrame, kind: ExportKind, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
    for batch in iter_batches(lf, batch_rows):
        yield [to_record(r, kind) for r in batch]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _list_array(elements: Iterator[Sequence[str]]) -> pa.Array:
    offsets: list[int] = [0]
    flat: list[str] = []
    for items in elements:
        flat.extend(items)
        offsets.append(len(flat))
    items_arr = pa.ExtensionArray.from_storage(pa.json_(), pa.array(flat, pa.string()))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items_arr)


def _json_array(values: Iterator[str | None]) -> pa.Array:
    return pa.ExtensionArray.from_storage(pa.json_(), pa.array(list(values), pa.string()))


def _json_text(value: Any) -> str | None:
    """A stored JSON value as JSON text, checked (a broken string would only fail when a trainer loads it)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            loads(value)
        except ValueError as exc:
            raise InputError(f"ground_truth holds invalid JSON {value[:80]!r}: {exc}; fix the producing stage") from exc
        return value
    return fast_dumps(value)


def _gt_constraints(value: Any) -> str | None:
    gt = loads(value) if isinstance(value, str) and value else value
    return fast_dumps(gt["constraints"]) if isinstance(gt, dict) and gt.get("constraints") is not None else None


def arrow_batch(frame: pl.DataFrame, kind: ExportKind, columns: list[str]) -> pa.Table:
    """Stored rows → export Arrow table, column-wise, without building per-row record dicts.

    List fields become ``list<json>`` (one JSON text per message/tool), other
    nested fields ``json``; the same conversion as :func:`fabrika.export.records.to_record`.
    """
    arrays: dict[str, pa.Array] = {}
    names = set(frame.columns)
    for col in columns:
        if col in ("prompt", "completion"):
            values = frame[col].to_list() if col in names else [None] * frame.height
            role = "assistant" if col == "completion" else "user"
            arrays[col] = _list_array(message_elements(v, role) for v in values)
        elif col == "tools":
            values = frame[col].to_list() if col in names else [None] * frame.height
            arrays[col] = _list_array(tool_elements(v) if isinstance(v, str) else
                                      tuple(fast_dumps(t) for t in tools_to_chat(v)) for v in values)
        elif col == "ground_truth":
            values = frame[col].to_list() if col in names else [None] * frame.height
            arrays[col] = _json_array(_json_text(v) for v in values)
        elif col in DERIVED_COLUMNS:
            parts = [frame[n].to_list() if n in names else [None] * frame.height
                     for n in ("ref_length", "completion", "length_unit", "teacher_usable")]
            derived = [ref_length_columns(*v) for v in zip(*parts)]
            arrays[col] = pa.array([d[col] for d in derived], SCALAR_TYPES.get(col, pa.string()))
        elif col == "constraints":
            values = frame["ground_truth"].to_list() if "ground_truth" in names else [None] * frame.height
            arrays[col] = _json_array(_gt_constraints(v) for v in values)
        else:
            typ = SCALAR_TYPES.get(col, pa.string())
            arrays[col] = frame[col].to_arrow().cast(typ) if col in names else pa.nulls(frame.height, typ)
    return pa.table(arrays)


def _features(kind: ExportKind, columns: list[str]) -> Any:
    from datasets import Features, Json, List, Value

    feats = {}
    for col in columns:
        if col in NESTED_FIELDS[kind]:
            feats[col] = List(Json()) if col in LIST_FIELDS else Json()
        else:
            typ = SCALAR_TYPES.get(col)
            feats[col] = Value("float64") if typ == pa.float64() else Value("int64") if typ == pa.int64() \
                else Value("string")
    return Features(feats)


def _columns(lf: pl.LazyFrame, kind: ExportKind) -> list[str]:
    names = set(lf.collect_schema().names())
    scalars = [c for c in ("id", "expert", "lang", "target_type") if c in names]
    if kind != "grpo":
        return scalars + list(NESTED_FIELDS[kind])
    # ref_length is derived from the reference completion when the source has none (general expert's L0)
    optional = [c for c in GRPO_OPTIONAL_COLUMNS if c in names or (c in DERIVED_COLUMNS and "completion" in names)
                or (c == "ref_length_k" and "ref_length" in names)]
    return scalars + list(NESTED_FIELDS[kind]) + optional


def _write_hf(tmp: Path, lf: pl.LazyFrame, kind: ExportKind, columns: list[str], batch_rows: int) -> int:
    """Stream batches into one Arrow file (memory bounded by a batch), then ``save_to_disk`` from the mmap."""
    import datasets
    from datasets.arrow_writer import ArrowWriter

    features = _features(kind, columns)
    staging = tmp.parent / f"{tmp.name}.arrow"
    try:
        writer = ArrowWriter(features=features, path=str(staging))
        try:
            wrote = False
            for frame in lf.collect_batches(chunk_size=batch_rows):
                if frame.height:
                    writer.write_table(arrow_batch(frame, kind, columns))
                    wrote = True
            if not wrote:
                writer.write_table(arrow_batch(lf.head(0).collect(), kind, columns))
        finally:
            writer.finalize()
        ds = datasets.Dataset.from_file(str(staging), info=datasets.DatasetInfo(features=features))
        ds.save_to_disk(str(tmp))
        return ds.num_rows
    finally:
        staging.unlink(missing_ok=True)


def _write_flat(tmp: Path, batches: Iterator[list[dict[str, Any]]], kind: ExportKind, columns: list[str],
                fmt: ExportFormat) -> int:
    data = tmp / "data"
    data.mkdir(parents=True)
    n = 0
    for i, batch in enumerate(batches):
        n += len(batch)
        if fmt == "jsonl":
            with (data / f"part-{i:05d}.jsonl").open("w", encoding="utf-8") as fh:
                for r in batch:
                    fh.write(_dumps({c: r.get(c) for c in columns}) + "\n")
        else:
            nested = NESTED_FIELDS[kind]
            frame = pl.DataFrame({c: [(_dumps(r.get(c)) if c in nested and r.get(c) is not None else r.get(c))
                                      for r in batch] for c in columns},
                                 schema={c: _PL_TYPES.get(SCALAR_TYPES.get(c, pa.string()), pl.String)
                                         for c in columns})
            frame.write_parquet(data / f"part-{i:05d}.parquet")
    return n


def read_export(out: str | Path, fmt: ExportFormat) -> Iterator[dict[str, Any]]:
    """Read an export back as records with nested values (what a consumer sees)."""
    out = Path(out)
    if fmt == "hf":
        import datasets

        yield from datasets.load_from_disk(str(out))
        return
    for path in sorted((out / "data").glob(f"part-*.{fmt}")):
        if fmt == "jsonl":
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    yield json.loads(line)
        else:
            for row in pl.read_parquet(path).iter_rows(named=True):
                yield {k: (json.loads(v) if isinstance(v, str) and k in ("prompt", "completion", "tools",
                                                                        "ground_truth", "constraints") else v)
                       for k, v in row.items()}


def export(source: ExportSource, config: ExportConfig) -> ExportResult:
    """Convert, (mix), write, validate and describe one export."""
    start = time.perf_counter()
    out = Path(config.out)
    if out.exists() and any(out.iterdir()) and not config.overwrite:
        raise ConfigError(f"export --out {str(out)!r} exists and is not empty; pass --overwrite or another path")
    lf, scoped_out = source.for_kind(config.kind)
    skipped = 0
    if config.kind == "sft" and "completion" in lf.collect_schema().names():
        # prompt-only rows (GRPO prompts such as if.grpo) have no target: nothing to fine-tune on
        empty = pl.col("completion").is_null() | pl.col("completion").is_in(["", "[]", "null"])
        skipped = int(lf.filter(empty).select(pl.len()).collect().item())
        lf = lf.filter(~empty)
    mix_report: MixReport | None = None
    if config.mix is not None:
        lf, mix_report = mix(lf, config.mix)
    columns = _columns(lf, config.kind)
    warnings = _length_warnings(lf, config.max_length)
    tmp = out.parent / f".tmp-export-{out.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        if config.format == "hf":
            rows = _write_hf(tmp, lf, config.kind, columns, config.batch_rows)
        else:
            rows = _write_flat(tmp, _records(lf, config.kind, config.batch_rows), config.kind, columns, config.format)
        validation = _validate(tmp, lf, config) if config.validate_rows != 0 else None
        stats = _stats(lf)
        (tmp / "README.md").write_text(
            render_card(source, config.kind, config.format, rows, stats, config.license, mix_report, validation,
                        frame=lf),
            encoding="utf-8")
        _ship_name_mapping(tmp, source)
        old = out.parent / f".old-export-{out.name}-{os.getpid()}"
        if out.exists():
            os.replace(out, old)  # a crash from here on leaves the old export under .old-*, never half a new one
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    pushed = _push(out, config) if config.push_to_hub and config.token else None
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    return ExportResult(out=out, rows=rows, files=files, seconds=round(time.perf_counter() - start, 3),
                        mix=mix_report, validation=validation, pushed_to=pushed, skipped_prompt_only=skipped,
                        left_out_for_kind=scoped_out, warnings=warnings)


def _ship_name_mapping(tmp: Path, source: ExportSource) -> None:
    """``tool_names.json`` of renamed imported tools (``fc.tools_import`` ``rename: true``) beside the data."""
    from fabrika.generators.fc.tools_import import MAPPING_FILE, run_name_mappings

    names = run_name_mappings(source.run_dir) if source.run_dir is not None else {}
    if names:
        (tmp / MAPPING_FILE).write_text(json.dumps(names, ensure_ascii=False, indent=1, sort_keys=True) + "\n",
                                        encoding="utf-8")


def _validate(tmp: Path, lf: pl.LazyFrame, config: ExportConfig) -> ValidationReport:
    """Read the written export back and render it, comparing null keys with the source rows."""
    template = load_template(config.template)
    limit = config.validate_rows

    def pairs() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        written = read_export(tmp, config.format)
        for batch in iter_batches(lf if limit is None else lf.head(limit), config.batch_rows):
            for row in batch:
                yield next(written), to_record(row, config.kind)

    return validate_pairs(pairs(), template)


def _length_warnings(lf: pl.LazyFrame, max_length: int | None) -> list[str]:
    """A warning when rows exceed the trainer's ``max_length`` (or carry no token count at all)."""
    names = lf.collect_schema().names()
    if max_length is None:
        return []
    if "len_total_tokens" not in names:
        return ["rows carry no token counts (no filter.length scorer on these stages): cannot check them "
                f"against max_length={max_length}"]
    col = pl.col("len_total_tokens")
    over, longest, unknown, total = lf.select((col > max_length).sum().alias("over"), col.max().alias("longest"),
                                              col.is_null().sum().alias("unknown"), pl.len()).collect().row(0)
    out = []
    if over:
        out.append(f"{over} of {total} rows are longer than max_length={max_length} tokens (longest {longest}); "
                   "TRL truncates them (a completion past the limit is cut or fully masked) — raise the trainer's "
                   "max_length or refilter with --set filters.length.max_tokens=N")
    if unknown:
        out.append(f"{unknown} of {total} rows have no token count (filter.length did not score them)")
    return out


def _stats(lf: pl.LazyFrame) -> dict[str, Any]:
    names = lf.collect_schema().names()
    stats: dict[str, Any] = {}
    for col in ("lang", "target_type", "expert", "llm_backend", "len_tokenizer", "rm_id"):
        if col in names:
            counts = lf.group_by(col).len().sort(col).collect()
            stats[col] = {str(k): int(v) for k, v in counts.iter_rows()}
    return stats


def _push(out: Path, config: ExportConfig) -> str:
    """Upload the export (HF format through ``Dataset.push_to_hub``, others as a folder)."""
    repo = str(config.push_to_hub)
    if config.format == "hf":
        import datasets

        datasets.load_from_disk(str(out)).push_to_hub(repo, token=config.token, private=config.private)
    else:
        from huggingface_hub import HfApi

        api = HfApi(token=config.token)
        api.create_repo(repo, repo_type="dataset", private=config.private, exist_ok=True)
        api.upload_folder(folder_path=str(out), repo_id=repo, repo_type="dataset")
    return repo
