"""Real-model-shaped verifiers (tests/sandbox/data/verifier_corpus.jsonl) pass the lint and run.

The corpus is written the way Qwen3 and GPT-4 answer the verifier prompt: reasoning or prose
around the JSON, ```json and ```python fences, ``from typing import List``, annotations,
docstrings, helpers, module constants, ``global`` counters, ``if __name__ == "__main__":``
self-tests, razdel and pymorphy3. Wave 2's deny-list refused most of it for style.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabrika.sandbox import SandboxConfig, SandboxPool, precheck
from fabrika.textutil.answers import is_failure, parse_verifier_answer

CORPUS = Path(__file__).with_name("data") / "verifier_corpus.jsonl"


def _rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def _codes() -> list[tuple[str, str, str, str]]:
    out = []
    for row in _rows():
        parsed = parse_verifier_answer(row["answer"])
        assert not is_failure(parsed), (row["id"], parsed)
        out.append((row["id"], parsed.code, row["good"], row["bad"]))
    return out


def test_corpus_is_big_and_real_model_shaped():
    rows = _rows()
    assert len(rows) >= 100
    text = "\n".join(r["answer"] for r in rows)
    for habit in ("from typing import List", "from __future__ import annotations", "except ImportError",
                  'if __name__ == \\"__main__\\"', '\\"\\"\\"', "global CALLS",
                  "```json", "```python", "<think>", "razdel", "pymorphy3"):
        assert habit in text, habit


def test_at_least_98_percent_pass_the_lint():
    codes = _codes()
    refused = {name: precheck(code) for name, code, _, _ in codes if precheck(code)}
    assert len(refused) <= 0.02 * len(codes), refused


def test_the_corpus_runs_and_decides_in_the_sandbox():
    """Accepted is not enough: typing imports, main guards and helpers must also *run* (one verdict
    per verifier on its own passing and failing example; rlimits, so it runs everywhere)."""
    codes = _codes()
    with SandboxPool(SandboxConfig(workers=1, isolation="rlimits", timeout_s=2.0)) as pool:
        wrong = {}
        for name, code, good, bad in codes:
            verdicts = pool.run_sync(code, [good, bad])
            got = [v.status if v.status != "error" else f"error:{v.error_kind}:{v.message}" for v in verdicts]
            if got != ["true", "false"]:
                wrong[name] = got
    assert not wrong, wrong


@pytest.mark.parametrize("code", [
    "from typing import List\n\ndef evaluate(response: str) -> bool:\n    words: List[str] = response.split()\n"
    "    return len(words) > 1\n",
    "def evaluate(response):\n    return helper(response)\n\ndef helper(text):\n    \"\"\"Docs mention __init__.\"\"\"\n"
    "    return bool(text)\n\nif __name__ == '__main__':\n    import sys\n    print(evaluate('x'), file=sys.stderr)\n",
    "SEEN = 0\n\ndef evaluate(response):\n    global SEEN\n    SEEN += 1\n    marker = object()\n"
    "    return isinstance(response, object) and marker is not None\n",
    "def evaluate(response):\n    return '{} слов'.format(len(response.split())) != '' and f'{response!r}' != ''\n",
])
def test_harmless_constructs_are_accepted(code):
    assert precheck(code) == []
