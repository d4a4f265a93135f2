"""``fc.plans``' similar-distractor index: the vectorised ranking picks exactly what the per-pair one did.

The reference below is the earlier code path (``MinHash.jaccard`` per candidate, whole sorted lists), kept
here only as the oracle; the stage now compares signature rows in one pass and keeps ``similar_distractors``.
"""

from __future__ import annotations

import random
import re
import zlib
from types import SimpleNamespace

import pytest
from datasketch import MinHash, MinHashLSH

from fabrika.generators.fc.plans import PlansStage
from fabrika.schemas import FunctionSpec, Tool
from fabrika.schemas.fc import ToolSpec

WORDS = ["поезд", "билет", "казань", "студент", "доставка", "пицца", "отель", "номер", "врач", "запись",
         "такси", "аэропорт", "кино", "сеанс", "ночной", "детский", "банк", "карта", "погода", "прогноз"]


def _pool(n_topics: int, seed: int) -> tuple[dict[str, list[bytes]], dict[str, list[str]]]:
    """Topics whose tools share many words (so LSH candidates are many and Jaccard ties are common)."""
    rng = random.Random(seed)
    by_topic: dict[str, list[bytes]] = {}
    by_lang: dict[str, list[str]] = {"ru": []}
    for i in range(n_topics):
        topic = f"t{i:03d}"
        blobs = []
        for j in range(rng.randint(1, 3)):
            words = rng.sample(WORDS, rng.randint(2, 5))
            name = "_".join(["tool", *rng.sample(["search", "book", "cancel", "get"], 1), str(i % 7)])
            desc = " ".join(words)
            spec = ToolSpec(id=f"{topic}-{j}", topic_id=topic, lang="ru",
                            tool=Tool(function=FunctionSpec(name=name, description=desc,
                                                            parameters={"type": "object", "properties": {}})),
                            tiers=[desc, desc, desc, desc])
            blobs.append(zlib.compress(spec.model_dump_json().encode()))
        by_topic[topic] = blobs
        by_lang["ru"].append(topic)
    return by_topic, by_lang


def _reference(by_topic: dict[str, list[bytes]], by_lang: dict[str, list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for topics in by_lang.values():
        lsh = MinHashLSH(threshold=0.15, num_perm=64)
        sigs: dict[str, MinHash] = {}
        for topic_id in topics:
            words: set[str] = set()
            for blob in by_topic[topic_id]:
                spec = ToolSpec.model_validate_json(zlib.decompress(blob))
                words |= set(re.findall(r"\w{3,}", f"{spec.name.replace('_', ' ')} {spec.tiers[1]}".lower()))
            m = MinHash(num_perm=64, seed=1)
            for w in sorted(words):
                m.update(w.encode("utf-8"))
            sigs[topic_id] = m
            lsh.insert(topic_id, m)
        for topic_id, m in sigs.items():
            near = [t for t in lsh.query(m) if t != topic_id]
            out[topic_id] = sorted(near, key=lambda t: (-m.jaccard(sigs[t]), t))
    return out


def _stage(index: tuple[dict[str, list[bytes]], dict[str, list[str]]], keep: int) -> PlansStage:
    stage = PlansStage.__new__(PlansStage)  # only the index is exercised: no run context needed
    stage.__dict__["_index"] = index
    stage.config = SimpleNamespace(similar_distractors=keep)  # type: ignore[assignment]
    return stage


@pytest.mark.parametrize("keep", [0, 1, 3, 20])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_vectorised_index_keeps_the_reference_s_first_choices(keep: int, seed: int) -> None:
    index = _pool(120, seed)
    want = _reference(*index)
    got = _stage(index, keep)._similar
    assert set(got) == set(want)
    assert any(len(v) > 20 for v in want.values()), "the pool should give long candidate lists"
    for topic, ranked in want.items():
        assert got[topic] == ranked[:keep], topic


def test_the_partial_ranking_keeps_exactly_the_full_sorts_first_k() -> None:
    """``_most_similar`` sorts only the candidates that can make the cut; the full sort is the oracle
    (many equal counts, so the cut value itself is tied across the boundary)."""
    import numpy as np

    from fabrika.generators.fc.plans import _most_similar

    rng = random.Random(7)
    for _ in range(2000):
        n, keep = rng.randint(0, 80), rng.randint(1, 9)
        near = [f"t{rng.randint(0, 999):03d}-{j}" for j in range(n)]
        same = np.array([rng.randint(0, 4) for _ in range(n)], dtype=np.intp)
        full = sorted(range(n), key=lambda i: (-int(same[i]), near[i]))[:keep]
        assert _most_similar(near, same, keep) == [near[i] for i in full]


# -- built once per run, shared by every process of it ---------------------------------------------


def _stored_stage(index: tuple[dict[str, list[bytes]], dict[str, list[str]]], keep: int, run_dir: object,
                  builds: list[int]) -> PlansStage:
    """A stage with a run store (as in the driver or an LLM worker) that counts its index builds."""
    stage = _stage(index, keep)
    stage.ctx = SimpleNamespace(store=SimpleNamespace(run_dir=run_dir))  # type: ignore[assignment]
    build = stage._build_similar

    def counted() -> dict[str, list[str]]:
        builds.append(1)
        return build()

    stage._build_similar = counted  # type: ignore[method-assign]
    return stage


def test_the_index_is_built_once_per_run_and_pool_and_loaded_with_the_same_picks(tmp_path) -> None:
    index = _pool(80, 3)
    want = _stage(index, 2)._similar  # in memory, no store
    builds: list[int] = []
    first = _stored_stage(index, 2, tmp_path, builds)._similar
    second = _stored_stage(index, 2, tmp_path, builds)._similar  # another worker, a retried one, a resume
    assert builds == [1] and first == second == want
    assert len(list((tmp_path / "index").glob("fc.plans-similar-*.json"))) == 1
    assert _stored_stage(index, 3, tmp_path, builds)._similar == _stage(index, 3)._similar  # its own index
    changed = _pool(80, 4)  # another pool (fc.tools redone): never the old file
    assert _stored_stage(changed, 2, tmp_path, builds)._similar == _stage(changed, 2)._similar
    assert builds == [1, 1, 1] and len(list((tmp_path / "index").glob("fc.plans-similar-*.json"))) == 3


def test_workers_that_need_the_index_at_once_wait_for_one_build(tmp_path) -> None:
    """The LLM workers of fc.plans start together: one builds under the lock, the others load its file."""
    import threading

    index = _pool(60, 5)
    builds: list[int] = []
    stages = [_stored_stage(index, 1, tmp_path, builds) for _ in range(4)]
    got: list[dict[str, list[str]]] = []
    threads = [threading.Thread(target=lambda s=s: got.append(s._similar)) for s in stages]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [1] and len(got) == 4 and all(g == got[0] for g in got)
    assert got[0] == _stage(index, 1)._similar
    assert not list((tmp_path / "index").glob(".*.tmp"))  # written under a temporary name, then renamed
