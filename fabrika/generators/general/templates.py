"""Template clusters of a prompt pool, so that a few templated services do not dominate it.

Production logs hold many prompts built from one template ("Переведи на английский:
{text}", a service's fixed system prompt + a filled form). :func:`template_clusters`
groups such prompts with MinHash LSH (datasketch) over word shingles of a *template
view* of the prompt: the system turn plus the first ``head_words`` words of the last
user turn, digits folded to ``0`` — the part a template fixes, not the part it fills.
When records carry a ``task`` (or ``service``) field, that field is the template
instead (the service said what it is).

Each prompt gets ``template_id`` (the cluster's smallest prompt id) and
``template_rank`` (its rank inside the cluster by ``sha256(seed:id)``, so which
prompts survive a cap does not depend on file order); the ``general.max_per_template``
gate keeps ``template_rank < cap``, which a refilter can change offline.

This is a small stand-in: the evaluation sampler's template clustering should replace
it once it exists, so that pool and evaluation agree on what a template is.
Memory: one MinHash per prompt (``num_perm`` × 8 bytes) during the pass.
"""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

from datasketch import MinHash, MinHashLSH

from fabrika.filters.dedup import shingles

_DIGITS = re.compile(r"\d+")


def template_view(messages: Sequence[dict[str, str]], head_words: int = 12) -> str:
    """The part of a prompt a template fixes: system turn + the first words of the last user turn."""
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    head = " ".join(user.split()[:head_words])
    return _DIGITS.sub("0", f"{system} {head}".lower())


def _rank(seed: int, rid: str) -> bytes:
    return hashlib.sha256(f"{seed}:{rid}".encode()).digest()


def template_clusters(ids: Sequence[str], views: Sequence[str], keys: Sequence[str | None], *,
                      threshold: float = 0.6, num_perm: int = 64, shingle: int = 2,
                      seed: int = 0) -> dict[str, tuple[str, int]]:
    """``id → (template_id, template_rank)``; a non-null ``keys[i]`` (task/service) overrides MinHash."""
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    cluster: dict[str, str] = {}
    by_key: dict[str, str] = {}
    for rid, view, key in zip(ids, views, keys, strict=True):
        if key is not None:
            cluster[rid] = by_key.setdefault(key, rid)
            continue
        sh = shingles(view, shingle)
        if not sh:
            cluster[rid] = rid
            continue
        m = MinHash(num_perm=num_perm, seed=1)
        m.update_batch(list(sh))
        hits = sorted(cluster[h] for h in lsh.query(m))
        cluster[rid] = hits[0] if hits else rid
        lsh.insert(rid, m)
    members: dict[str, list[str]] = {}
    for rid, root in cluster.items():
        members.setdefault(root, []).append(rid)
    out: dict[str, tuple[str, int]] = {}
    for group in members.values():
        tid = min(group)
        for rank, rid in enumerate(sorted(group, key=lambda r: _rank(seed, r))):
            out[rid] = (tid, rank)
    return out
