"""Same config, same dataset: the demo's dataset hash under CPU load, locally and on Ray.

Run: ``.venv/bin/python bench/determinism.py [--config configs/demo.yaml] [--hogs 0,2,4]
[--executors local,ray] [--tmp-venv] [--keep DIR]``

``--tmp-venv`` adds one more local run (no hogs) whose interpreter is a copy of this venv under
``/tmp`` (``cp -a``; fabrika itself is imported from the checkout), the case where a fresh ``/tmp``
in the sandbox used to hide the interpreter.

Each run is ``fabrika run CONFIG --no-resume`` into a fresh run directory, with N CPU-burning
processes alongside (bounded: they stop by themselves after ``--hog-limit`` seconds, and are
killed when the run ends). The dataset hash is a content hash of the materialised version's rows,
order independent: every row of every ``versions/<v>/data/*.parquet`` file is serialised as
canonical JSON (sorted keys), the row digests are sorted per file, and the file names with their
sorted digests are hashed together. ``input_id`` is kept: it is derived from inputs (contract 1).

Prints one line per run (executor, hogs, exit code, rows, wall seconds, hash) and whether all
hashes are equal. Exit 0 when they are, 1 when not (so CI can run it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def dataset_hash(run_dir: Path) -> tuple[str, int]:
    """Order-independent content hash of the materialised version rows of ``run_dir``, and the row count."""
    import polars as pl

    versions = sorted((run_dir / "versions").glob("*/data"))
    if not versions:
        return "no-version", 0
    top = hashlib.sha256()
    rows = 0
    for data in versions:
        for path in sorted(data.glob("*.parquet")):
            frame = pl.read_parquet(path)
            digests = sorted(hashlib.sha256(json.dumps(r, sort_keys=True, ensure_ascii=False, default=str).encode())
                             .hexdigest() for r in frame.to_dicts())
            rows += len(digests)
            top.update(f"{data.parent.name}/{path.name}\n".encode())
            for d in digests:
                top.update(d.encode())
    return top.hexdigest()[:16], rows


def start_hogs(n: int, limit_s: float) -> list[subprocess.Popen[bytes]]:
    burn = f"import time\nend = time.monotonic() + {limit_s}\nwhile time.monotonic() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(n)]  # noqa: S603


def run_once(config: Path, run_dir: Path, executor: str, hogs: int, hog_limit: float,
             timeout_s: float, python: str = sys.executable) -> tuple[int, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [python, "-m", "fabrika", "run", str(config), "--no-resume", "--no-progress",
           "--set", f"run_dir={run_dir}", "--executor", executor]
    procs = start_hogs(hogs, hog_limit)
    t0 = time.monotonic()
    try:
        log = run_dir.with_suffix(".log")
        with log.open("wb") as out:
            code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO,  # noqa: S603
                                  timeout=timeout_s, check=False).returncode
    except subprocess.TimeoutExpired:
        code = 124
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return code, time.monotonic() - t0


def _data_library_versions() -> dict[str, str]:
    """The releases of the row-deciding libraries: a hash is a function of the config, the code and these."""
    sys.path.insert(0, str(REPO))
    from fabrika.pipeline.lineage_libraries import DATA_LIBRARIES, installed_version

    return {d: installed_version(d) for ds in DATA_LIBRARIES.values() for d in ds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "demo.yaml")
    parser.add_argument("--hogs", default="0,2,4", help="comma-separated numbers of CPU hogs per run")
    parser.add_argument("--executors", default="local,ray", help="comma-separated: local, ray")
    parser.add_argument("--hog-limit", type=float, default=3600, help="seconds after which a hog stops by itself")
    parser.add_argument("--timeout", type=float, default=7200, help="seconds one run may take")
    parser.add_argument("--tmp-venv", action="store_true", help="one more local run with this venv copied under /tmp")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run dirs here (default: a temp dir, removed)")
    args = parser.parse_args()
    hogs = [int(h) for h in args.hogs.split(",")]
    executors = args.executors.split(",")
    base = args.keep or Path(tempfile.mkdtemp(prefix="fabrika-determinism-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"config={args.config} hogs={hogs} executors={executors} cpus={os.cpu_count()} python={sys.executable}")
    print("libraries: " + " ".join(f"{d}=={v}" for d, v in _data_library_versions().items()))
    print(f"{'executor':<9}{'hogs':>5}{'exit':>6}{'rows':>8}{'wall_s':>9}  hash")
    hashes = []
    try:
        for executor in executors:
            for n in hogs:
                run_dir = base / f"{executor}-{n}"
                shutil.rmtree(run_dir, ignore_errors=True)
                code, wall = run_once(args.config, run_dir, executor, n, args.hog_limit, args.timeout)
                digest, rows = dataset_hash(run_dir)
                hashes.append(digest)
                print(f"{executor:<9}{n:>5}{code:>6}{rows:>8}{wall:>9.1f}  {digest}", flush=True)
        if args.tmp_venv:
            venv = Path(tempfile.mkdtemp(prefix="fabrika-venv-", dir="/tmp")) / "venv"
            shutil.copytree(sys.prefix, venv, symlinks=True)
            try:
                run_dir = base / "local-tmp-venv"
                python = str(venv / "bin" / Path(sys.executable).name)
                code, wall = run_once(args.config, run_dir, "local", 0, args.hog_limit, args.timeout, python)
                digest, rows = dataset_hash(run_dir)
                hashes.append(digest)
                print(f"{'tmp-venv':<9}{0:>5}{code:>6}{rows:>8}{wall:>9.1f}  {digest}   (python {python})", flush=True)
            finally:
                shutil.rmtree(venv.parent, ignore_errors=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    equal = len(set(hashes)) == 1
    print(f"all equal: {'yes' if equal else 'NO'} ({len(set(hashes))} distinct hash(es) in {len(hashes)} runs)")
    sys.exit(0 if equal else 1)


if __name__ == "__main__":
    main()
