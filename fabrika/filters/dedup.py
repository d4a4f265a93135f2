"""Near-duplicate scorer: MinHash LSH over word shingles (datasketch).

Each text becomes a set of ``shingle``-word shingles of normalised razdel
tokens; MinHash signatures go into an LSH index at a Jaccard ``threshold``;
candidate pairs whose estimated Jaccard clears the threshold are unioned into
clusters. The cluster id is the smallest row id in it, and that row is the
representative, so the result does not depend on input order (contract 7).

Samples cut from one episode (one per assistant step) repeat the same user
turns, so by default rows are grouped into *units* by ``meta.episode_id``: a
unit's text is its longest row's text and its id its smallest row id, units are
clustered, and every row of a unit shares its verdict — a duplicate episode goes as a whole, and steps of a
kept episode are never each other's duplicates. Rows without the key are
units of their own.

Scores: ``dup_cluster`` (str), ``dup_is_representative`` (bool), ``dup_cluster_size``
(units in the cluster). A global stage: it needs every row at once.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any, AsyncIterator, ClassVar, Iterator, Sequence

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from fabrika.filters.text import SampleRow, norm_tokens, row_text, text_columns
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.pipeline.columns import Column, Contract
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage

SCORE_COLUMNS = ("dup_cluster", "dup_is_representative", "dup_cluster_size")
#: MinHash permutation seed of ``filter.dedup`` (fixed: part of what a cluster means)
SEED = 1
#: datasketch's permutation scheme, pinned (its default since 2.0): signatures made on a worker and
#: rebuilt in the driver must agree on it, and hash values do not record it
SCHEME = "affine32"


def shingles(text: str, k: int) -> set[bytes]:
    """``k``-token shingles of the normalised tokens (the whole text when shorter than ``k``)."""
    toks = norm_tokens(text)
    if len(toks) <= k:
        return {" ".join(toks).encode("utf-8")} if toks else set()
    return {" ".join(toks[i:i + k]).encode("utf-8") for i in range(len(toks) - k + 1)}


def _find(parent: dict[str, str], x: str) -> str:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def minhash_signature(text: str, shingle: int = 3, num_perm: int = 128, seed: int = 1) -> np.ndarray | None:
    """The MinHash signature of ``text``'s shingles (``num_perm`` hash values, a numpy array), or None for a text
    without tokens (nobody's duplicate). A pure per-row function: ``ctx.map_cpu`` may run it on workers;
    the array pickles compactly and :func:`clusters_from_signatures` rebuilds the sketch from it."""
    sh = shingles(text, shingle)
    if not sh:
        return None
    from datasketch import MinHash  # imported on use: it pulls scipy (~0.4 s of every process's start)

    m = MinHash(num_perm=num_perm, seed=seed, scheme=SCHEME)
    m.update_batch(list(sh))
    return m.hashvalues


def clusters_from_signatures(ids: Sequence[str], signatures: Sequence[np.ndarray | None], threshold: float = 0.8,
                             num_perm: int = 128, seed: int = 1) -> list[dict[str, Any]]:
    """Cluster rows by their signatures (:func:`minhash_signature`, same ``num_perm``/``seed``): LSH candidates
    whose estimated Jaccard clears ``threshold`` are unioned, rows taken in id order; one
    ``{id, dup_cluster, dup_is_representative, dup_cluster_size}`` per input."""
    if len(ids) != len(signatures):
        raise ValueError(f"ids ({len(ids)}) and signatures ({len(signatures)}) differ in length")
    if len(set(ids)) != len(ids):
        raise ValueError("near-duplicate clustering needs unique ids")
    from datasketch import LeanMinHash, MinHashLSH

    from fabrika.pipeline.progress import phase  # the running stage's progress line shows it

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    sigs: dict[str, LeanMinHash] = {}
    parent = {i: i for i in ids}
    for n, (rid, hv) in enumerate(sorted(zip(ids, signatures), key=lambda p: p[0])):
        if n % 2048 == 0:
            phase("minhash lsh", n, len(ids))
        if hv is None:
            continue  # empty texts are nobody's duplicate
        m = LeanMinHash(seed=seed, hashvalues=hv, scheme=SCHEME)
        for other in lsh.query(m):
            if m.jaccard(sigs[other]) >= threshold:
                a, b = _find(parent, rid), _find(parent, other)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        lsh.insert(rid, m)
        sigs[rid] = m
    roots = {i: _find(parent, i) for i in ids}
    sizes: dict[str, int] = {}
    for r in roots.values():
        sizes[r] = sizes.get(r, 0) + 1
    # union keeps the smaller root, so each root is its cluster's smallest id
    return [{"id": i, "dup_cluster": roots[i], "dup_is_representative": roots[i] == i,
             "dup_cluster_size": sizes[roots[i]]} for i in ids]


def near_duplicate_clusters(ids: Sequence[str], texts: Sequence[str], threshold: float = 0.8,
                            num_perm: int = 128, shingle: int = 3, seed: int = 1) -> list[dict[str, Any]]:
    """Cluster ``texts`` in this process; one ``{id, dup_cluster, dup_is_representative, dup_cluster_size}`` per input."""
    if len(ids) != len(texts):
        raise ValueError(f"ids ({len(ids)}) and texts ({len(texts)}) differ in length")
    sigs = [minhash_signature(t, shingle, num_perm, seed) for t in texts]
    return clusters_from_signatures(ids, sigs, threshold, num_perm, seed)


def unit_key(row: Row, field: str | None) -> str | None:
    """The unit a row belongs to: a column value or ``meta.<key>`` (``meta`` may be a JSON string)."""
    if field is None:
        return None
    if field.startswith("meta."):
        meta = SampleRow.of(row).meta
        if isinstance(meta, str):
            try:
                meta = json.loads(meta) if meta else {}
            except json.JSONDecodeError:
                return None
        value = meta.get(field[5:]) if isinstance(meta, dict) else None
    else:
        value = row.get(field)
    return None if value is None else f"{field}:{value}"


class DedupConfig(StageConfig):
    """``filter.dedup``: MinHash LSH parameters."""

    text_field: str = Field(default="user", description="'prompt', 'completion', 'user' or a column name.")
    threshold: float = Field(default=0.8, gt=0, le=1, description="Jaccard similarity at which rows are duplicates.")
    num_perm: int = Field(default=128, ge=16, le=1024, description="MinHash permutations (accuracy vs speed).")
    shingle: int = Field(default=3, ge=1, le=16, description="Words per shingle.")
    unit: str | None = Field(default="meta.episode_id",
                             description="Rows sharing this column (or 'meta.<key>') form one unit judged together; "
                             "None = every row alone.")
    out_chunk: int = Field(default=10000, ge=1, description="Annotation rows per written chunk.")


@register_stage
class DedupScorer(Stage[DedupConfig]):
    """Global annotating stage: clusters all input rows, then streams annotations out."""

    kind = "filter.dedup"
    writes = (Column("dup_cluster", str), Column("dup_is_representative", bool), Column("dup_cluster_size", int))

    @classmethod
    def contract(cls, config: DedupConfig) -> Contract:
        unit = config.unit
        key = Column("meta" if unit is None or unit.startswith("meta.") else unit, Any, required=False)
        return Contract(reads=(*text_columns(config.text_field), key), writes=cls.writes)
    global_stage: ClassVar[bool] = True
    annotates: ClassVar[bool] = True

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        cfg = self.config
        row_units: list[tuple[str, str]] = []
        unit_text: dict[str, str] = {}
        unit_id: dict[str, str] = {}  # a unit is named by its smallest row id
        from fabrika.pipeline.progress import phase

        phase("reading rows")
        for row in rows:
            rid = self.item_id(row)
            unit = unit_key(row, cfg.unit) or f"row:{rid}"
            text = row_text(row, cfg.text_field)
            row_units.append((rid, unit))
            if unit not in unit_text or len(text) > len(unit_text[unit]):
                unit_text[unit] = text
            unit_id[unit] = min(rid, unit_id.get(unit, rid))
        units = sorted(unit_text, key=unit_id.__getitem__)
        # the per-text signatures are the CPU-heavy part: on the worker actors under executor: ray
        sigs = await self.ctx.map_cpu(partial(minhash_signature, shingle=cfg.shingle, num_perm=cfg.num_perm, seed=SEED),
                                      [unit_text[u] for u in units], label="minhash signatures")
        found = clusters_from_signatures([unit_id[u] for u in units], sigs, cfg.threshold, cfg.num_perm, SEED)
        verdict = {u: r for u, r in zip(units, found)}
        out = [ok(rid, dup_cluster=verdict[u]["dup_cluster"], dup_is_representative=verdict[u]["dup_is_representative"],
                  dup_cluster_size=verdict[u]["dup_cluster_size"]) for rid, u in row_units]
        for start in range(0, len(out), cfg.out_chunk):
            yield out[start:start + cfg.out_chunk]


# gate group ``filters.dedup``: thresholds on the columns above (scores are data, thresholds are config)


class DedupGate(BaseModel):
    """``filters.dedup``."""

    model_config = ConfigDict(extra="forbid")

    keep_representatives_only: bool = Field(default=True, description="Keep one row (smallest id) per cluster.")


def _dedup(p: DedupGate) -> list[GatePredicate]:
    if not p.keep_representatives_only:
        return []
    return [GatePredicate("dedup.keep_representatives_only", pl.col("dup_is_representative"),
                          ("dup_is_representative",), keep_null=True)]


register_gate_group("dedup", DedupGate, _dedup)
