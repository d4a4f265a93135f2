"""Run by ``test_non_root.py`` as a non-root user: the pool in both modes, the wave-3 attack corpus.

Prints one JSON object: the uid, and per mode whether the pool started (its self-test), the
verdicts of the honest verifiers and of concurrent calls of a stateful one (grouped), and per
attack of the corpus the problems its raw form caused (empty: contained). Asserts nothing itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal

from fabrika.errors import SandboxError
from fabrika.sandbox import SandboxConfig, SandboxPool
from tests.sandbox import test_attacks_w3 as corpus
from tests.sandbox.test_grouping import CALLS, STATEFUL


def signature(verdicts) -> list[str]:
    return [v.status if v.status != "error" else f"error:{v.error_kind}" for v in verdicts]


def one_mode(mode: str, urg: list[int]) -> dict:
    out: dict = {}
    try:
        pool = SandboxPool(SandboxConfig(workers=1, timeout_s=0.3, isolation=mode))
    except SandboxError as exc:
        return {"self_test": str(exc)}
    with pool:
        out["self_test"], out["isolation"] = "ok", pool.isolation
        out["honest"] = {name: signature(pool.run_sync(code, responses))
                         for name, (code, responses, _) in corpus.HONEST.items()}

        async def together():
            return await asyncio.gather(*(pool.run(STATEFUL, c) for c in CALLS))

        out["grouped"] = [signature(v) for v in asyncio.run(together())]
        out["one_by_one"] = [signature(pool.run_sync(STATEFUL, c)) for c in CALLS]
    with SandboxPool(SandboxConfig(workers=1, timeout_s=1.0, isolation=mode, precheck=False)) as raw:
        out["attacks"] = {name: corpus.containment_problems(raw, name, raw_code, allowed, urg)
                          for name, _cls, _lint, raw_code, allowed in corpus.ATTACKS}
    return out


def main() -> None:
    urg: list[int] = []
    signal.signal(signal.SIGURG, lambda *_: urg.append(1))
    result = {"uid": os.getuid(), "modes": {}}
    try:
        for mode in ("bwrap", "rlimits"):
            result["modes"][mode] = one_mode(mode, urg)
    finally:
        shutil.rmtree(corpus.RUN, ignore_errors=True)
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
