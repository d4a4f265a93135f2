"""The IF response gates see the answer, not the reasoning: Qwen3-style teacher answers through if.responses."""

from __future__ import annotations

import json

from fabrika.generators.instruct.responses import ResponsesConfig, ResponsesStage
from fabrika.sandbox import Verdict
from fabrika.testing import ScriptedLLM, stage_context

ANSWERS = [
    "<think>\n\n</think>\n\nМой кот обычно спит на тёплом диване у окна.",  # thinking off: passes
    "<think>Надо без запятых, а, б, в.</think>Мой кот обычно спит на тёплом диване у окна.",  # commas only in the reasoning: passes
    "<think>The user wants Russian. Let me write it.</think>Мой кот ест, спит и играет весь день у окна.",  # the answer has commas
    "<think>Мой кот обычно спит на тёплом диване у окна.",  # cut off while thinking: no answer
    "<think>hmm</think>",  # reasoning only
]
NO_COMMAS = "def evaluate(response):\n    return ',' not in response"


class Pool:
    isolation = "test"

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def run(self, code: str, responses: list[str]) -> list[Verdict]:
        self.seen.extend(responses)
        return [Verdict("true" if "," not in r else "false") for r in responses]


async def test_verifiers_library_and_sft_target_see_only_the_answer() -> None:
    pool = Pool()
    teacher = ScriptedLLM(lambda r: ANSWERS[r.sample_index])
    stage = ResponsesStage(ResponsesConfig(k=len(ANSWERS)), stage_context(teacher, resources={"sandbox": pool}))
    await stage.setup()
    row = {"id": "q1", "constraint_id": "c1", "query": "Опишите кота.", "placement": "end",
           "messages": json.dumps([{"role": "user", "content": "Опишите кота. Не используйте запятых."}],
                                  ensure_ascii=False),
           "constraints": json.dumps([{"id": "c1", "text": "Не используйте запятых."}], ensure_ascii=False),
           "library_constraints": json.dumps([["ru.punct.no_commas", {}]]),
           "verifiers": json.dumps([{"sample_index": 0, "code": NO_COMMAS, "accuracy": 1.0}])}
    out = {r["sample_index"]: r for r in await stage.process(row)}
    assert out[0]["status"] == out[1]["status"] == out[2]["status"] == "ok"
    assert out[0]["response"] == out[1]["response"] == "Мой кот обычно спит на тёплом диване у окна."  # what SFT trains on
    assert out[0]["if_library_pass"] is True and out[1]["if_library_pass"] is True
    assert out[1]["n_verifiers_passed"] == 1 and out[1]["max_failed_verifier_accuracy"] == -1.0
    assert out[2]["if_library_pass"] is False and out[2]["max_failed_verifier_accuracy"] == 1.0
    assert out[3]["status"] == "rejected" and out[3]["reason"].startswith("no_answer")
    assert out[4]["status"] == "rejected" and out[4]["reason"] == "empty_answer: reasoning only"
    assert not any("<think>" in r or "Надо" in r for r in pool.seen)  # the sandbox never saw reasoning
