"""A sandbox infrastructure failure in ``if.consistency`` leaves the item pending: no row, no
"verifier broken" — and a healthy pool's answer for the same item is written as usual."""

from __future__ import annotations

import json
from typing import Any

from fabrika.errors import SandboxInfrastructureError
from fabrika.generators.instruct.verifiers import ConsistencyConfig, ConsistencyStage
from fabrika.pipeline.execute import process_item
from fabrika.sandbox import Verdict
from fabrika.testing import stage_context

GOOD = "def evaluate(response):\n    return response.islower()"


class FlakyPool:
    """Raises what SandboxPool raises after its retries on fresh workers, ``failures`` times."""

    isolation = "fake"

    def __init__(self, failures: int) -> None:
        self.failures = failures

    async def run(self, code: str, responses: list[str]) -> list[Verdict]:
        if self.failures:
            self.failures -= 1
            raise SandboxInfrastructureError("sandbox (bwrap) gave no verdict in 3 tries on fresh workers: eof")
        return [Verdict("true") if r.islower() else Verdict("false") for r in responses]


def _row() -> dict[str, Any]:
    cases = [{"response": r, "label": y} for r, y in [("аб", True), ("Аб", False), ("вг", True), ("ДЕ", False)]]
    return {"id": "c1", "text": "строчные", "verifiers": json.dumps(
        [{"sample_index": i, "code": GOOD + "\n" * i, "cases": cases} for i in range(3)], ensure_ascii=False)}


async def test_infrastructure_failure_leaves_the_item_pending_then_the_retry_writes_it():
    pool = FlakyPool(failures=1)
    stage = ConsistencyStage(ConsistencyConfig(input="v"), stage_context(resources={"sandbox": pool}, seed=1))
    await stage.setup()
    first = await process_item(stage, _row(), "c1", "sim")
    # transient (the runner's taxonomy): nothing written, not a bug, retried within the run then pending
    assert first.rows is None and first.failure is None and first.transient is not None
    assert first.transient.kind == "transient" and "no verdict in 3 tries" in first.transient.error
    again = await process_item(stage, _row(), "c1", "sim")  # the next run (the host recovered)
    assert again.rows is not None and again.state.pending is None
    [row] = again.rows
    assert row["status"] == "ok" and row["n_broken_functions"] == 0 and row["max_function_accuracy"] == 1.0
