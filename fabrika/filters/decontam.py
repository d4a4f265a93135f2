"""Decontamination scorer: n-gram overlap with benchmark prompts.

Benchmarks are files the user names (jsonl or parquet) with the field holding
the prompt text. Each benchmark item becomes its set of ``n``-grams over
normalised tokens (an item shorter than ``n`` tokens is one n-gram of its own
length). A row's overlap with an item is the share of the item's n-grams found
in the row — so a benchmark question pasted into a longer prompt scores 1.0.

Scores: ``decontam_max_overlap`` (max over all items, 0 when nothing matches)
and ``decontam_benchmark`` (name of the benchmark of that item, null when 0).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from fabrika.errors import InputError
from fabrika.filters.text import norm_tokens, row_text, text_columns
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.inputs import iter_records, where
from fabrika.pipeline.columns import Column, Contract
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage

SCORE_COLUMNS = ("decontam_max_overlap", "decontam_benchmark")


class BenchmarkSource(BaseModel):
    """One benchmark file to decontaminate against."""

    model_config = ConfigDict(extra="forbid")

    path: Path = Field(description="A .jsonl or .parquet file of benchmark items.")
    field: str = Field(default="prompt", description="Column/key holding the prompt text.")
    name: str | None = Field(default=None, description="Name in scores; defaults to the file stem.")


def _ngrams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def load_benchmark_texts(source: BenchmarkSource) -> list[str]:
    """Texts of one benchmark file; :class:`InputError` names the file and field when they are wrong."""
    path = Path(source.path)
    texts = []
    hint = "fix `benchmarks[].path` / `benchmarks[].field`"
    for n, item in iter_records(path, what="benchmark file", hint=hint, columns=[source.field]):
        if source.field not in item:
            raise InputError(f"{where(path, n)}: no key {source.field!r}; fix `benchmarks[].field`")
        if item[source.field] is not None:
            texts.append(str(item[source.field]))
    return texts


class NgramIndex:
    """Inverted index n-gram → benchmark items, for overlap queries."""

    def __init__(self, n: int = 8) -> None:
        self.n = n
        self.items: list[tuple[str, int]] = []  # (benchmark name, number of n-grams)
        self.index: dict[tuple[str, ...], list[int]] = {}
        self.sizes: set[int] = set()

    def add(self, benchmark: str, text: str) -> None:
        toks = norm_tokens(text)
        if not toks:
            return
        size = min(self.n, len(toks))
        grams = _ngrams(toks, size)
        item = len(self.items)
        self.items.append((benchmark, len(grams)))
        self.sizes.add(size)
        for g in grams:
            self.index.setdefault(g, []).append(item)

    def max_overlap(self, text: str) -> tuple[float, str | None]:
        """Highest share of one item's n-grams found in ``text``, and that item's benchmark."""
        toks = norm_tokens(text)
        hits: Counter[int] = Counter()
        for size in self.sizes:
            for g in _ngrams(toks, size):
                for item in self.index.get(g, ()):
                    hits[item] += 1
        best, name = 0.0, None
        for item, count in sorted(hits.items()):
            share = count / self.items[item][1]
            if share > best:
                best, name = share, self.items[item][0]
        return best, name


def build_index(sources: Sequence[BenchmarkSource], n: int = 8) -> NgramIndex:
    index = NgramIndex(n)
    for src in sources:
        name = src.name or Path(src.path).stem
        for text in load_benchmark_texts(src):
            index.add(name, text)
    return index


def score_texts(texts: Sequence[str], index: NgramIndex) -> list[dict[str, Any]]:
    out = []
    for text in texts:
        overlap, name = index.max_overlap(text)
        out.append({"decontam_max_overlap": round(overlap, 6), "decontam_benchmark": name})
    return out


class DecontamConfig(StageConfig):
    """``filter.decontam``: benchmark files and n-gram size."""

    text_field: str = Field(default="prompt", description="'prompt', 'completion', 'user' or a column name.")
    benchmarks: list[BenchmarkSource] = Field(min_length=1, description="Benchmark files to check against.")
    ngram: int = Field(default=8, ge=1, le=64, description="n of the n-grams over normalised tokens.")


@register_stage
class DecontamScorer(Stage[DecontamConfig]):
    """Annotating stage: benchmark overlap per row (the index is built once per run)."""

    kind = "filter.decontam"
    writes = (Column("decontam_max_overlap", float), Column("decontam_benchmark", str, required=False))
    input_files = (InputFile("benchmarks[].path", "benchmark file", field_keys=("field",),
                             fix="give a jsonl/parquet of benchmark items with the prompt in benchmarks[].field"),)

    @classmethod
    def contract(cls, config: DecontamConfig) -> Contract:
        return Contract(reads=text_columns(config.text_field), writes=cls.writes)
    calls_llm: ClassVar[bool] = False
    annotates: ClassVar[bool] = True

    def _index(self) -> NgramIndex:
        cfg = self.config
        pipeline = getattr(self.ctx, "pipeline", None)
        sources = [src.model_copy(update={"path": pipeline.resolve_path(src.path)}) if pipeline is not None else src
                   for src in cfg.benchmarks]  # paths are relative to the config file
        return self.ctx.resource(f"decontam:{self.name}", lambda: build_index(sources, cfg.ngram))

    async def setup(self) -> None:
        self._index()

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        (scores,) = score_texts([row_text(row, cfg.text_field)], self._index())
        return [ok(self.item_id(row), **scores)]


# gate group ``filters.decontam``: thresholds on the columns above (scores are data, thresholds are config)


class DecontamGate(BaseModel):
    """``filters.decontam``."""

    model_config = ConfigDict(extra="forbid")

    max_overlap: float = Field(default=0.5, ge=0, le=1,
                               description="Maximum share of a benchmark item's n-grams found in the row.")


def _decontam(p: DecontamGate) -> list[GatePredicate]:
    return [GatePredicate("decontam.max_overlap", pl.col("decontam_max_overlap") <= p.max_overlap,
                          ("decontam_max_overlap",), keep_null=True)]


register_gate_group("decontam", DecontamGate, _decontam)
