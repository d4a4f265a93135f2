"""Near-duplicate scorer: MinHash LSH over word shingles (datasketch).

Each text becomes a set of ``shingle``-word shingles of normalised razdel
tokens; MinHash signatures go into an LSH index at a Jaccard ``threshold``;
candidate pairs whose estimated Jaccard clears the threshold are unioned into
clusters. The cluster id is the smallest row id in it, and that row is the
representative, so the result does not depend on input order (contract 7).

Scores: ``dup_cluster`` (str), ``dup_is_representative`` (bool), ``dup_cluster_size``.
A global stage: it needs every row at once.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, ClassVar, Iterator, Sequence

from datasketch import MinHash, MinHashLSH
from pydantic import Field

from fabrika.filters.text import norm_tokens, row_text
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage

SCORE_COLUMNS = ("dup_cluster", "dup_is_representative", "dup_cluster_size")


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


def near_duplicate_clusters(ids: Sequence[str], texts: Sequence[str], threshold: float = 0.8,
                            num_perm: int = 128, shingle: int = 3, seed: int = 1) -> list[dict[str, Any]]:
    """Cluster ``texts``; one ``{id, dup_cluster, dup_is_representative, dup_cluster_size}`` per input."""
    if len(ids) != len(texts):
        raise ValueError(f"ids ({len(ids)}) and texts ({len(texts)}) differ in length")
    if len(set(ids)) != len(ids):
        raise ValueError("near-duplicate clustering needs unique ids")
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    sigs: dict[str, MinHash] = {}
    parent = {i: i for i in ids}
    for rid, text in sorted(zip(ids, texts)):
        sh = shingles(text, shingle)
        if not sh:
            continue  # empty texts are nobody's duplicate
        m = MinHash(num_perm=num_perm, seed=seed)
        m.update_batch(list(sh))
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


class DedupConfig(StageConfig):
    """``filter.dedup``: MinHash LSH parameters."""

    kind: str = Field(default="filter.dedup", description="Stage kind.")
    text_field: str = Field(default="user", description="'prompt', 'completion', 'user' or a column name.")
    threshold: float = Field(default=0.8, gt=0, le=1, description="Jaccard similarity at which rows are duplicates.")
    num_perm: int = Field(default=128, ge=16, le=1024, description="MinHash permutations (accuracy vs speed).")
    shingle: int = Field(default=3, ge=1, le=16, description="Words per shingle.")
    out_chunk: int = Field(default=10000, ge=1, description="Annotation rows per written chunk.")


@register_stage
class DedupScorer(Stage):
    """Global annotating stage: clusters all input rows, then streams annotations out."""

    kind: ClassVar[str] = "filter.dedup"
    Config: ClassVar[type[StageConfig]] = DedupConfig
    global_stage: ClassVar[bool] = True
    annotates: ClassVar[bool] = True

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        cfg: DedupConfig = self.config  # type: ignore[assignment]
        ids: list[str] = []
        texts: list[str] = []
        for row in rows:
            ids.append(str(row["id"]))
            texts.append(row_text(row, cfg.text_field))
        result = near_duplicate_clusters(ids, texts, cfg.threshold, cfg.num_perm, cfg.shingle)
        for start in range(0, len(result), cfg.out_chunk):
            yield [ok(**r) for r in result[start:start + cfg.out_chunk]]
