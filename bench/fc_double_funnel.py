"""configs/fc_demo.yaml against the FC model double (fabrika.testing.fc_double): yield and what kept faults out.

    PYTHONPATH=$PWD .venv/bin/python bench/fc_double_funnel.py [seed ...]

Per seed: plans, episodes (rejected and why), raw samples, dataset rows, training turns
per plan, the faults injected, how many raw rows carried a faulted completion and how
many dataset rows do (must be 0), and the gates that dropped rows.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.testing.test_fc_double import _completion_text, _user_texts, run_against_double  # noqa: E402


def main(seeds: list[int]) -> None:
    for seed in seeds:
        with tempfile.TemporaryDirectory() as tmp:
            out = run_against_double(Path(tmp), seed=seed)
        double = out["double"]
        bad_a, bad_u = double.fault_texts(["fc.assistant"]), double.fault_texts(["fc.user"])
        raw_bad = sum(_completion_text(s) in bad_a for s in out["raw"])
        kept_bad = sum(_completion_text(s) in bad_a or any(t in bad_u for t in _user_texts(s)) for s in out["kept"])
        eps = out["episodes"]
        reasons = Counter(r.split(":")[0] for r in eps.filter(eps["status"] == "rejected")["reason"].to_list())
        drops = {k: v for k, v in out["funnel"]["gates"]["fc.samples"].items() if k.startswith("dropped_") and v}
        print(f"seed {seed}: {out['plans']} plans, {eps.height} episodes, rejected {dict(reasons)}")
        print(f"  raw samples {len(out['raw'])}, dataset rows {len(out['kept'])} "
              f"= {len(out['kept']) / max(1, out['plans']):.2f} training turns per plan")
        print(f"  faults {dict(sorted(double.counts().items()))}")
        print(f"  raw rows with a faulted completion {raw_bad}, dataset rows carrying a fault {kept_bad}")
        print(f"  fc.samples gate drops {drops}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [5, 11])
