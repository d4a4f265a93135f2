"""Memory of the resume set at 1M ids: ``DoneIds`` (sorted 16-byte digests) vs a Python ``set`` of strings.

Both are built from the same 1M ids shaped like fabrika's (``prompt-`` + 16 hex
digits), fed in batches as ``RunStore.done_ids`` reads them from shards; memory
is the tracemalloc peak and the retained size after building (numpy reports its
buffers to tracemalloc), then 1M lookups are timed.

Run::

    .venv/bin/python bench/done_ids.py                 # 1,000,000 ids
    .venv/bin/python bench/done_ids.py --ids 3000000

Goal: ≤ 50 MB at 1M ids.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import time
import tracemalloc
from typing import Callable, Iterator

from fabrika.store.done_ids import DoneIds


def ids(n: int) -> Iterator[str]:
    for i in range(n):
        yield "prompt-" + hashlib.sha1(str(i).encode()).hexdigest()[:16]


def measure(name: str, build: Callable[[], object], n: int) -> None:
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    obj = build()
    built = time.perf_counter() - t0
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    probe = list(ids(min(n, 200_000)))
    t0 = time.perf_counter()
    hits = sum(1 for i in probe if i in obj)  # type: ignore[operator]
    per = (time.perf_counter() - t0) / len(probe) * 1e6
    assert hits == len(probe)
    print(f"  {name:8s} retained {retained / 2**20:7.1f} MB  peak {peak / 2**20:7.1f} MB  "
          f"build {built:5.2f} s  lookup {per:5.2f} µs")
    del obj


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--ids", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    print(f"{args.ids:,} ids")
    measure("DoneIds", lambda: DoneIds(ids(args.ids)), args.ids)
    measure("set", lambda: set(ids(args.ids)), args.ids)


if __name__ == "__main__":
    main()
