"""The set of input ids a stage has done, in bounded memory.

A Python ``set`` of 1M id strings takes well over 100 MB; this keeps a sorted
numpy array of 16-byte BLAKE2b digests (16 MB per million ids) plus a small
buffer of recent additions merged into it in batches. 128-bit digests make a
false "done" (a silently skipped item) about as likely as a hardware error
(≈ 10⁻²⁷ for a million ids). Measured in ``bench/done_ids.py``.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

import numpy as np

_DTYPE = "S16"
#: Recent additions are merged into the sorted array once the buffer holds this many.
MERGE_EVERY = 65_536


def digest(item_id: str) -> bytes:
    return hashlib.blake2b(item_id.encode("utf-8"), digest_size=16).digest()


def _sorted_unique(arr: np.ndarray) -> np.ndarray:
    """``np.unique`` without its extra copies: sort in place, keep the first of each run."""
    arr.sort()
    if len(arr) < 2:
        return arr
    keep = np.empty(len(arr), dtype=bool)
    keep[0] = True
    np.not_equal(arr[1:], arr[:-1], out=keep[1:])
    return arr if keep.all() else arr[keep]


class DoneIds:
    """Membership and insertion of string ids; memory ≈ 16 bytes per id (+ a bounded buffer)."""

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._sorted = np.empty(0, dtype=_DTYPE)
        self._recent: set[bytes] = set()
        self.extend(ids)

    def extend(self, ids: Iterable[str], batch: int = MERGE_EVERY) -> None:
        chunk: list[bytes] = []
        parts = [self._sorted]
        for i in ids:
            chunk.append(digest(i))
            if len(chunk) >= batch:
                parts.append(np.array(chunk, dtype=_DTYPE))
                chunk = []
        if chunk:
            parts.append(np.array(chunk, dtype=_DTYPE))
        del chunk
        if len(parts) > 1:
            merged = np.concatenate(parts)
            parts.clear()
            self._sorted = _sorted_unique(merged)

    def __contains__(self, item_id: object) -> bool:
        if not isinstance(item_id, str):
            return False
        d = digest(item_id)
        if d in self._recent:
            return True
        arr = self._sorted
        if not len(arr):
            return False
        i = int(np.searchsorted(arr, d))
        return i < len(arr) and arr[i] == d.rstrip(b"\x00")  # numpy strips trailing NULs on read

    def add(self, item_id: str) -> None:
        self._recent.add(digest(item_id))
        if len(self._recent) >= MERGE_EVERY:
            self._merge()

    def _merge(self) -> None:
        if self._recent:
            fresh = np.array(list(self._recent), dtype=_DTYPE)
            self._sorted = _sorted_unique(np.concatenate([self._sorted, fresh]))
            self._recent.clear()

    def __len__(self) -> int:
        self._merge()
        return len(self._sorted)

    @property
    def nbytes(self) -> int:
        """Bytes held by the sorted array (the buffer adds at most ``MERGE_EVERY`` digests)."""
        return int(self._sorted.nbytes)
