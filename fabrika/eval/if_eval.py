"""IFEval-style scoring with fabrika's constraint library: strict and loose, prompt- and instruction-level.

Cases come from fabrika's IF samples (``ground_truth.constraints`` with
``library_id`` and ``params``; constraints without a trusted library verifier
are counted as ``unverifiable`` and left out) or are generated: a ruIFEval-like
set pairs each query of a pool with 1–3 compatible library constraints
(:func:`fabrika.constraints.sample_combination`), rendered as a numbered list
after the query.

* strict — the library verifier on the answer (reasoning blocks removed);
* loose — the library's IFEval-style relaxed verdict (without the first/last
  line, markdown stripped; :meth:`SeedConstraint.verify_loose`);
* prompt-level — all instructions of a prompt pass; instruction-level — share
  of instructions that pass. Pass rates per constraint id are reported too.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from fabrika.constraints import get, render_combination, sample_combination
from fabrika.errors import ConfigError, InputError
from fabrika.eval.answers import strip_reasoning
from fabrika.eval.logs import read_jsonl
from fabrika.llm import ChatRequest, ChatResponse
from fabrika.schemas import stable_id
from fabrika.schemas.chat import messages_to_chat

IF_TAG = "eval.if"


def read_if_samples(path: Path) -> list[dict[str, Any]]:
    """Items from fabrika IF sample rows (export JSONL)."""
    items = []
    for n, row in read_jsonl(path):
        where = f"{path}:{n}"
        gt = row.get("ground_truth")
        gt = json.loads(gt) if isinstance(gt, str) else gt
        if not isinstance(gt, dict) and isinstance(row.get("constraints"), list):
            gt = {"constraints": row["constraints"]}  # a GRPO export lifts them out
        if not isinstance(gt, dict) or not isinstance(gt.get("constraints"), list):
            raise InputError(f"{where}: an IF sample needs ground_truth.constraints (a list); export IF samples "
                             f"with kind grpo (SFT records carry no constraints)")
        constraints, unverifiable = [], 0
        for c in gt["constraints"]:
            lib = c.get("library_id")
            if not lib:
                unverifiable += 1
                continue
            try:
                seed = get(lib)
            except ConfigError:
                raise InputError(f"{where}: unknown library constraint {lib!r}") from None
            params = dict(c.get("params") or {})
            problems = seed.check_params(params)
            if problems:  # caught before any request is sent
                raise InputError(f"{where}: {'; '.join(problems)}")
            constraints.append([seed.id, params])
        prompt = row.get("prompt")
        messages = messages_to_chat(prompt)
        if not messages:
            raise InputError(f"{where}: an IF sample needs 'prompt' messages")
        items.append({"id": str(row.get("id", f"L{n}")), "messages": messages, "constraints": constraints,
                      "unverifiable": unverifiable})
    if not items:
        raise InputError(f"{path}: no IF samples")
    return items


def generate_if_set(queries: list[str], *, n: int, seed: int = 0, k_min: int = 1, k_max: int = 3,
                    lang: str = "ru") -> list[dict[str, Any]]:
    """``n`` prompts: a query (cycled through the pool) plus 1–3 compatible library constraints."""
    if not queries:
        raise ConfigError("the query pool is empty; pass --queries with at least one query")
    rng = random.Random(seed)
    items = []
    for i in range(n):
        query = queries[i % len(queries)]
        combo = sample_combination(rng, k_min, k_max)
        text = f"{query}\n\n{render_combination(combo, lang=lang)}"
        items.append({"id": stable_id(query, combo, i, prefix="if-"), "messages": [{"role": "user", "content": text}],
                      "constraints": [[cid, params] for cid, params in combo], "unverifiable": 0})
    return items


def if_requests(item: dict[str, Any], *, temperature: float = 0.0, max_tokens: int | None = None) -> list[ChatRequest]:
    return [ChatRequest(messages=tuple(item["messages"]), temperature=temperature, max_tokens=max_tokens, tag=IF_TAG)]


def score_if(item: dict[str, Any], resp: ChatResponse) -> dict[str, Any]:
    text = strip_reasoning(resp.text)
    strict, loose = [], []
    for cid, params in item["constraints"]:
        c = get(cid)
        strict.append(c.verify(text, params) if text else False)
        loose.append(c.verify_loose(text, params) if text else False)
    return {"constraints": [cid for cid, _ in item["constraints"]], "strict": strict, "loose": loose,
            "unverifiable": item.get("unverifiable", 0), "empty": not text,
            "truncated": bool(resp.choices and resp.choices[0].truncated), "response": text[:500]}


def if_report(records: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [r for r in records if r["constraints"]]
    if not scored:
        return {"n": 0}
    per: dict[str, dict[str, list[bool]]] = defaultdict(lambda: {"strict": [], "loose": []})
    for r in scored:
        for cid, s, lo in zip(r["constraints"], r["strict"], r["loose"]):
            per[cid]["strict"].append(s)
            per[cid]["loose"].append(lo)
    inst_s = [s for r in scored for s in r["strict"]]
    inst_l = [s for r in scored for s in r["loose"]]
    return {
        "n": len(scored),
        "prompt_strict": sum(all(r["strict"]) for r in scored) / len(scored),
        "prompt_loose": sum(all(r["loose"]) for r in scored) / len(scored),
        "instruction_strict": sum(inst_s) / len(inst_s),
        "instruction_loose": sum(inst_l) / len(inst_l),
        "unverifiable": sum(r["unverifiable"] for r in records),
        "empty": sum(r["empty"] for r in records),
        "truncated": sum(r["truncated"] for r in records),
        "per_constraint": {cid: {"n": len(v["strict"]), "strict": sum(v["strict"]) / len(v["strict"]),
                                 "loose": sum(v["loose"]) / len(v["loose"])} for cid, v in sorted(per.items())},
    }
