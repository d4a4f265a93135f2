"""What digesting input files for the fingerprint costs (fabrika.pipeline.input_digest), beside reading them.

Writes a synthetic corpus of ``--rows`` Russian records (the 300K-row FC run's corpus size) under a temp
dir and prints, side by side: the first digest of the file (blake2b of its bytes), a second one (the
per-process cache: a stat), ``stage_fingerprints`` of ``configs/demo.yaml`` (every shipped input it names),
and the stage's own read of the same corpus (``fabrika.inputs.iter_records``), as ratios of that read.

    .venv/bin/python bench/input_digest.py --rows 300000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from fabrika.inputs import iter_records
from fabrika.pipeline.config import load_config
from fabrika.pipeline.fingerprint import stage_fingerprints
from fabrika.pipeline.input_digest import clear_cache, file_digest

REPO = Path(__file__).resolve().parents[1]
WORDS = ("город", "заказ", "доставка", "погода", "билет", "врач", "запись", "счёт", "перевод", "ремонт")


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        with corpus.open("w", encoding="utf-8") as fh:
            for i in range(args.rows):
                text = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(40)) + f" №{i}"
                fh.write(json.dumps({"text": text, "lang": "ru"}, ensure_ascii=False) + "\n")
        size_mb = corpus.stat().st_size / 1e6
        clear_cache()
        first = timed(lambda: file_digest(corpus))
        cached = timed(lambda: file_digest(corpus))
        read = timed(lambda: sum(1 for _ in iter_records(corpus, what="corpus")))
    cfg = load_config(REPO / "configs" / "demo.yaml")
    stage_fingerprints(cfg)  # the code/prompt lineage digests warm: what is left is the input files
    clear_cache()
    demo_cold = timed(lambda: stage_fingerprints(cfg))
    demo_warm = timed(lambda: stage_fingerprints(cfg))
    print(f"corpus: {args.rows} rows, {size_mb:.1f} MB")
    print(f"{'what':<40} {'seconds':>10} {'/ stage read':>13}")
    for what, secs in [("stage's own read (iter_records)", read), ("first digest (blake2b)", first),
                       ("second digest (cached: stat)", cached),
                       ("demo stage_fingerprints, files cold", demo_cold), ("demo stage_fingerprints, warm", demo_warm)]:
        print(f"{what:<40} {secs:>10.4f} {secs / read:>13.4f}")


if __name__ == "__main__":
    main()
