"""Agreement of ``eval fc --checker bfcl`` with BFCL's own ``multi_turn_checker`` on BFCL v4's multi-turn data.

Needs ``bfcl-eval`` (the Makefile's dev install: ``pip install --no-deps bfcl-eval==2026.3.23 mpmath``); the
data is the package's own. Two parts, printed as Markdown tables (docs/EVAL.md quotes them):

1. *checker* — every case of the four categories, the ground truth and the perturbations of
   ``tests/eval/bfcl_multi_harness.py``, each checked by fabrika's checker and by BFCL's
   (``tests/eval/test_bfcl_multi_sim.py`` runs every 20th case of the same);
2. *whole path* (``--whole-path``) — ``fabrika eval fc --checker bfcl`` on the package's data directory
   against the fake OpenAI server answering a scripted transcript (each case's ground truth, one step per
   turn; for every third case the last call of the first turn that calls something is dropped); then
   BFCL's checker on the calls the CLI recorded, compared with the CLI's verdict case by case.

    python bench/bfcl_multi_agreement.py [--every N] [--whole-path]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.eval.bfcl_multi_harness import CATEGORIES, agreement, as_dicts, bfcl_verdict, load_cases  # noqa: E402


def checker_table(every: int) -> None:
    disagreements: list[Any] = []
    started = time.perf_counter()
    table = agreement(every=every, on_disagree=lambda *a: disagreements.append(a))
    print(f"## checker: fabrika vs BFCL's multi_turn_checker ({time.perf_counter() - started:.0f} s)\n")
    print("| category | cases | answers | valid by BFCL | same verdict | same error type | ground truth valid |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    total: Counter[str] = Counter()
    for category, row in table.items():
        print(f"| {category} | {row['cases']} | {row['answers']} | {row['bfcl_valid']} | "
              f"{row['agree']}/{row['answers']} ({100 * row['agree'] / row['answers']:.1f} %) | "
              f"{row['agree_error_type']}/{row['answers']} | {row['ground_truth_valid']}/{2 * row['cases']} |")
        total.update({k: v for k, v in row.items() if isinstance(v, int)})
    print(f"| all | {total['cases']} | {total['answers']} | {total['bfcl_valid']} | {total['agree']}/{total['answers']} "
          f"({100 * total['agree'] / total['answers']:.1f} %) | {total['agree_error_type']}/{total['answers']} | "
          f"{total['ground_truth_valid']}/{2 * total['cases']} |\n")
    kinds: dict[str, list[int]] = {}
    for row in table.values():
        for kind, (n, valid, agree) in row["by_kind"].items():
            k = kinds.setdefault(kind, [0, 0, 0])
            k[0] += n
            k[1] += valid
            k[2] += agree
    print("| answer | n | valid by BFCL | same verdict |")
    print("|---|---:|---:|---:|")
    for kind, (n, valid, agree) in kinds.items():
        print(f"| {kind} | {n} | {valid} | {agree}/{n} |")
    print(f"\ndisagreements: {len(disagreements)}")
    for d in disagreements[:20]:
        print("  ", d)


def whole_path() -> None:
    from importlib import resources

    from typer.testing import CliRunner

    from fabrika.cli.app import app
    from fabrika.testing import FakeOpenAIServer

    data = Path(str(resources.files("bfcl_eval") / "data"))
    cases = {c["id"]: c for cat in CATEGORIES for c in load_cases(cat)}
    plans: dict[tuple[str, int], list[list[dict[str, Any]]]] = {}
    wrong = set()
    for n, (cid, case) in enumerate(cases.items()):
        plan = as_dicts(case)
        if n % 3 == 2:
            t = next((i for i, calls in enumerate(plan) if calls), None)
            if t is not None:
                plan[t] = plan[t][:-1]
                wrong.add(cid)
        plans[cid] = plan

    # the categories share questions case by case: the server tells cases apart by category (the tools
    # differ for miss_func; long_context and base by the scenario size seen in tool results is not
    # reliable), so each category runs as its own eval against its own transcript
    runner = CliRunner()
    print("## whole path: eval fc --checker bfcl on the fake server, then BFCL's checker on the recorded calls\n")
    print("| category | cases | accuracy (CLI) | same verdict as BFCL | requests | seconds |")
    print("|---|---:|---:|---:|---:|---:|")
    for category in CATEGORIES:
        mine = {cid: c for cid, c in cases.items() if c["id"].rsplit("_", 1)[0] == category}
        by_first = {}
        for cid, c in mine.items():
            users_per_turn = [max(1, sum(m["role"] == "user" for m in turn)) for turn in c["question"]]
            ends = [sum(users_per_turn[:t + 1]) for t in range(len(users_per_turn))]
            first = next(m["content"] for m in c["question"][0] if m["role"] == "user")
            by_first.setdefault(first, []).append((plans[cid], ends))

        def respond(req: dict[str, Any], by_first: dict[str, Any] = by_first) -> Any:
            msgs = req["messages"]
            users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
            (plan, ends), *_ = by_first[msgs[users[0]]["content"]]
            turn, step = ends.index(len(users)), sum(m["role"] == "assistant" for m in msgs[users[-1]:])
            if step == 0 and plan[turn]:
                return {"tool_calls": [{"name": k, "arguments": json.dumps(a)} for c in plan[turn] for k, a in c.items()]}
            return "Готово."

        ambiguous = sum(len(v) > 1 for v in by_first.values())
        with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(models=["m"]) as server:
            server.script(tag="eval.fc.multi", responder=respond)
            out = Path(tmp) / "fc"
            started = time.perf_counter()
            res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(data / f"BFCL_v4_{category}.json"),
                                      "--answers", str(data / "possible_answer" / f"BFCL_v4_{category}.json"),
                                      "--checker", "bfcl", "--base-url", server.base_url, "--model", "m"])
            seconds = time.perf_counter() - started
            assert res.exit_code == 0, res.output
            recs = [json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
            same = sum((r["correct"], r["bfcl_error"]) == bfcl_verdict(mine[r["id"]], r["calls"], f"whole_{r['id']}")
                       for r in recs)
            acc = sum(r["correct"] for r in recs) / len(recs)
            print(f"| {category} | {len(recs)} | {acc:.3f} | {same}/{len(recs)} | {server.served} | {seconds:.0f} |"
                  + (f" ({ambiguous} first messages shared by cases)" if ambiguous else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every", type=int, default=1, help="check every N-th case (default: all)")
    ap.add_argument("--whole-path", action="store_true", help="also run eval fc end to end on the fake server")
    ap.add_argument("--skip-checker", action="store_true", help="only the whole-path part")
    args = ap.parse_args()
    if not args.skip_checker:
        checker_table(args.every)
    if args.whole_path:
        whole_path()


if __name__ == "__main__":
    main()
