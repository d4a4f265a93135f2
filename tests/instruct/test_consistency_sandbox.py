"""``if.consistency`` on a real sandbox pool: one isolated batch per function (``run_probed``), and
exactly the rows the two-call path (a one-case probe, then the rest) gives — stateful and hanging
verifiers included (issue 26, item 4: fewer batches may change no verdict)."""

from __future__ import annotations

import json
from typing import Any

from fabrika.generators.instruct.verifiers import ConsistencyConfig, ConsistencyStage
from fabrika.sandbox import SandboxConfig, SandboxPool, Verdict
from fabrika.testing import stage_context

GOOD = "def evaluate(response):\n    return response.islower()\n"
STATEFUL = "COUNT = 0\ndef evaluate(response):\n    global COUNT\n    COUNT += 1\n    return COUNT == 1 or response.islower()\n"
HANGS = "def evaluate(response):\n    while True:\n        pass\n"
CASES = [("аб", True), ("Аб", False), ("вг", True), ("ДЕ", False), ("ёж", True)]


class TwoCallPool:
    """The same pool without ``run_probed``: the stage falls back to a probe call and a call with the rest."""

    def __init__(self, pool: SandboxPool) -> None:
        self.pool, self.isolation = pool, pool.isolation

    async def run(self, code: str, responses: list[str]) -> list[Verdict]:
        return await self.pool.run(code, responses)


def _row() -> dict[str, Any]:
    cases = [{"response": r, "label": y} for r, y in CASES]
    return {"id": "c1", "text": "строчные", "verifiers": json.dumps(
        [{"sample_index": i, "code": code, "cases": cases} for i, code in enumerate((GOOD, STATEFUL, HANGS))],
        ensure_ascii=False)}


async def _process(pool: Any) -> dict[str, Any]:
    stage = ConsistencyStage(ConsistencyConfig(input="v"), stage_context(resources={"sandbox": pool}, seed=1))
    await stage.setup()
    [out] = await stage.process(_row())
    return out


async def test_one_batch_per_function_and_the_rows_of_the_two_call_path():
    config = SandboxConfig(workers=1, timeout_s=0.3, isolation="rlimits")
    with SandboxPool(config) as pool:
        two_calls = await _process(TwoCallPool(pool))
    with SandboxPool(config) as pool:
        probed = await _process(pool)
        batches = pool.stats["batches"]
        # the same row again: HANGS never reads its response, so its timeout is known and costs no batch
        again = await _process(pool)
        batches_again = pool.stats["batches"] - batches
    assert probed == two_calls == again
    funcs = {f["sample_index"]: f for f in json.loads(probed["functions"])}
    assert funcs[0]["accuracy"] == 1.0 and funcs[2]["error"] == "timeout"
    assert funcs[1]["accuracy"] < 1.0  # the stateful one: "Аб" passes as its call's first case
    assert batches == 3, "one isolated batch per function (the two-call path needs two for each runnable one)"
    assert batches_again == 2
