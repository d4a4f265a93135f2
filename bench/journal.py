"""What the item-atomic, checksummed journal and storage sanitising cost, side by side.

Three pairs, each on the same rows (``--items`` items of three rows, ~1.5 KB of Russian text per
row, a nested column), best of ``--rounds``:

* append: the previous journal (one JSON line per row through a buffered text file) vs
  :class:`fabrika.store.journal.StageJournal` (one ``fj2`` record per item: blake2b-64 checksum,
  one ``os.write`` loop per item); both fsync once at the end;
* read back: the previous reader (``json.loads`` per line) vs :func:`fabrika.store.journal.scan`
  (checksum per record, then ``json.loads``);
* shard write: :func:`fabrika.store.shards.write_shard` (frame, parquet, fsync, rename) with
  :func:`clean_text` and the footer's content checksum vs the same with the identity for
  ``clean_text`` and no checksum (a shard as it was written before).

Run::

    .venv/bin/python bench/journal.py
    .venv/bin/python bench/journal.py --items 20000 --rounds 5

Prints seconds and the new/old ratio of each pair.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import fabrika.store.shards as shards
from fabrika.store.journal import JOURNAL, StageJournal, scan

TEXT = ("Пользователь спрашивает, как вернуть товар, купленный в интернет-магазине; ассистент "
        "отвечает по шагам, называет сроки и документы. ") * 10


def make_items(n: int) -> list[list[dict[str, Any]]]:
    return [[{"id": f"it{i}-{k}", "input_id": f"it{i}", "status": "ok", "reason": None, "llm_backend": "sim",
              "text": f"{i}.{k} {TEXT}", "meta": {"tags": ["ru", str(k)], "score": k / 3}}
             for k in range(3)] for i in range(n)]


def old_append(path: Path, items: list[list[dict[str, Any]]]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        for rows in items:
            fh.write("".join(json.dumps(shards.flatten_row(r), ensure_ascii=False, separators=(",", ":"),
                                        default=str) + "\n" for r in rows))
        fh.flush()
        os.fsync(fh.fileno())


def new_append(path: Path, items: list[list[dict[str, Any]]]) -> None:
    j = StageJournal(path.parent, sync_s=1e9)
    for rows in items:
        j.append(rows)
    j.close(remove=False)


def old_read(path: Path) -> int:
    n = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            n += isinstance(json.loads(line), dict)
    return n


def best(fn: Callable[[], Any], rounds: int, before: Callable[[], None] = lambda: None) -> float:
    times = []
    for _ in range(rounds):
        before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    items = make_items(args.items)
    rows = [r for item in items for r in item]
    with tempfile.TemporaryDirectory() as tmp:
        old_p, new_p = Path(tmp) / "old" / JOURNAL, Path(tmp) / "new" / JOURNAL
        old_p.parent.mkdir()
        new_p.parent.mkdir()
        results = [
            ("append", best(lambda: old_append(old_p, items), args.rounds, lambda: old_p.unlink(missing_ok=True)),
             best(lambda: new_append(new_p, items), args.rounds, lambda: new_p.unlink(missing_ok=True))),
            ("read back", best(lambda: old_read(old_p), args.rounds), best(lambda: scan(new_p), args.rounds)),
        ]
        assert old_read(old_p) == len(rows) and scan(new_p).rows == len(rows)
        sizes = (old_p.stat().st_size, new_p.stat().st_size)
        out = Path(tmp) / "shards"
        sanitised = best(lambda: shards.write_shard(out, rows, seq=0), args.rounds)
        real, real_tag = shards.clean_text, shards.content_tag
        shards.clean_text = lambda s: s  # type: ignore[assignment]  # the previous writer, side by side
        shards.content_tag = lambda frame: {}  # type: ignore[assignment]
        try:
            plain = best(lambda: shards.write_shard(out, rows, seq=0), args.rounds)
        finally:
            shards.clean_text, shards.content_tag = real, real_tag  # type: ignore[assignment]
    results.append(("shard write", plain, sanitised))
    print(f"{args.items} items x 3 rows, best of {args.rounds}; journal bytes old {sizes[0]:,} new {sizes[1]:,} "
          f"({sizes[1] / sizes[0]:.3f}x)")
    print(f"{'step':<12} {'old s':>8} {'new s':>8} {'new/old':>8}")
    for name, old, new in results:
        print(f"{name:<12} {old:8.3f} {new:8.3f} {new / old:8.2f}")


if __name__ == "__main__":
    main()
