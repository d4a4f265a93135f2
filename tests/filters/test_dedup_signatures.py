"""filter.dedup's signatures through ``ctx.map_cpu``: the clusters equal the single-loop MinHash LSH the stage
used before (full MinHash objects built and queried one by one), and ``map_cpu`` refuses what cannot travel."""

from __future__ import annotations

from functools import partial

import pytest
from datasketch import MinHash, MinHashLSH

from fabrika.filters.dedup import DedupConfig, DedupScorer, clusters_from_signatures, minhash_signature, near_duplicate_clusters, shingles
from fabrika.pipeline.cpu_map import NotImportableError, cpu_function
from fabrika.testing import stage_context
from tests.filters.dedup_corpus import corpus


def _reference(ids, texts, threshold, num_perm=128, shingle=3, seed=1):
    """The stage's algorithm before signatures were split out: one loop building, querying, inserting."""
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    sigs, parent = {}, {i: i for i in ids}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for rid, text in sorted(zip(ids, texts)):
        sh = shingles(text, shingle)
        if not sh:
            continue
        m = MinHash(num_perm=num_perm, seed=seed)
        m.update_batch(list(sh))
        for other in lsh.query(m):
            if m.jaccard(sigs[other]) >= threshold:
                a, b = find(rid), find(other)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        lsh.insert(rid, m)
        sigs[rid] = m
    return {i: find(i) for i in ids}


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_signature_clusters_equal_the_single_loop_on_russian_and_english(threshold):
    rows = corpus(1200)
    ids, texts = [i for i, _ in rows], [t for _, t in rows]
    want = _reference(ids, texts, threshold)
    got = near_duplicate_clusters(ids, texts, threshold=threshold)
    assert {r["id"]: r["dup_cluster"] for r in got} == want
    merged = sum(r["dup_cluster"] != r["id"] for r in got)
    assert merged > 100  # the corpus' inflected / re-punctuated copies were found, not a trivial all-singletons
    assert len({r["dup_cluster"] for r in got}) > 50


def test_a_signature_is_a_compact_array_rebuilt_to_the_same_clusters():
    rows = corpus(300, seed=3)
    ids, texts = [i for i, _ in rows], [t for _, t in rows]
    sigs = [minhash_signature(t, 3, 64, 1) for t in texts]
    assert all(s is None or (s.shape == (64,) and s.nbytes <= 64 * 8) for s in sigs)
    assert any(s is None for s in sigs)  # the empty prompts
    by_id = {r["id"]: r for r in clusters_from_signatures(ids, sigs, 0.7, 64, 1)}
    assert {i: r["dup_cluster"] for i, r in by_id.items()} == _reference(ids, texts, 0.7, num_perm=64)


async def test_stage_reports_where_its_signatures_ran():
    rows = [{"id": i, "text": t} for i, t in corpus(200)]
    ctx = stage_context()
    stage = DedupScorer(DedupConfig(text_field="text", unit=None), ctx)
    flat = [r for c in [c async for c in stage.run_all(iter(rows))] for r in c]
    want = _reference([r["id"] for r in rows], [r["text"] for r in rows], 0.8)
    assert {r["id"]: r["dup_cluster"] for r in flat} == want
    facts = ctx.reports["cpu_map"]["minhash signatures"]
    assert facts["on"] == "driver" and facts["items"] == 200


def _square(x: int, plus: int = 0) -> int:
    return x * x + plus


async def test_map_cpu_keeps_order_and_refuses_functions_that_cannot_travel():
    ctx = stage_context()
    assert await ctx.map_cpu(partial(_square, plus=1), list(range(5000))) == [x * x + 1 for x in range(5000)]

    def nested(x):
        return x

    for fn in (lambda x: x, nested):
        with pytest.raises(NotImportableError, match="not importable by name"):
            await ctx.map_cpu(fn, [1, 2])
    assert cpu_function(partial(partial(_square, 2), plus=3)).load()() == 7
