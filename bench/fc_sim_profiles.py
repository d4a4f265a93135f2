"""FC demo funnel under the basic sim and the realistic sim profile, side by side.

The realistic profile (``fabrika.generators.fc.sim_realistic``) wraps answers in
``<think>`` blocks and prose, truncates some, inflects and paraphrases the user's
free-text values and makes the assistant canonicalise them. The same demo
config (``configs/fc_demo.yaml``, its filter block included) runs under each
profile in a fresh run directory; printed per profile:

* plans accepted, episodes accepted (of approved plans) and the top rejection reasons;
* share of tool-call rounds that needed no injection (and that were right at the first try);
* samples per accepted episode (training turns) and messages per episode;
* the language gate on Russian tool-call samples (kept share) and irrelevance samples
  that follow a clarification (must be 0).

    .venv/bin/python bench/fc_sim_profiles.py [--plans-per-topic 6]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEMO = ROOT / "configs" / "fc_demo.yaml"


def run(run_dir: Path, plans_per_topic: int) -> dict:
    from fabrika.filters.language import LanguageGate, _language
    from fabrika.pipeline.config import validate_data
    from fabrika.pipeline.runner import run_pipeline
    from fabrika.store.run import RunStore

    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["run_dir"] = str(run_dir)
    for stage in data["stages"]:
        if stage["kind"] == "fc.plans":
            stage["plans_per_topic"] = plans_per_topic
    config, issues = validate_data(data, str(DEMO), DEMO.parent)
    assert config is not None, [str(i) for i in issues]
    run_pipeline(config, resume=False, progress=False)
    store = RunStore(run_dir)
    plans = store.scan_raw("fc.plans").collect()
    episodes = store.scan_raw("fc.dialogues").collect()
    ok_eps = episodes.filter(pl.col("status") == "ok")
    rounds = first_try = injected = repeated = 0
    n_messages = 0
    for raw in ok_eps["dialogue"]:
        d = json.loads(raw)
        n_messages += len(d["messages"])
        tool_targets = [t for t in d["meta"]["targets"] if t["target_type"] == "tool_call"]
        flags = [m["flag"] for m in d["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
        inj, rep = flags.count("injected"), flags.count("repeat")
        rounds += len(tool_targets) + inj + rep
        injected += inj
        repeated += rep
        first_try += sum(1 for t in tool_targets if d["messages"][t["index"]].get("flag") is None)
    samples = store.scan_raw("fc.samples").collect().filter(pl.col("status") == "ok")
    scores = store.scan_raw("fc_language").collect()
    joined = samples.select("id", "lang", "target_type").join(scores, on="id", how="left")
    gate = LanguageGate(**((config.filters or {}).get("language") or {}))
    keep = pl.lit(True)
    for pred in _language(gate):
        keep = keep & (pred.expr.fill_null(True) if pred.keep_null else pred.expr)
    ru_calls = joined.filter((pl.col("lang") == "ru") & (pl.col("target_type") == "tool_call"))
    kept = ru_calls.select(keep.alias("k"))["k"].sum() if ru_calls.height else 0
    irr = store.scan_raw("fc.irrelevance").collect().filter(pl.col("status") == "ok")
    after_clarification = sum(1 for m in irr["meta"] if json.loads(m).get("answers_clarification"))
    reasons = collections.Counter((r or "").split(":")[0] for r in
                                  episodes.filter(pl.col("status") == "rejected")["reason"])
    plan_reasons = collections.Counter((r or "").split(":")[0] for r in
                                       plans.filter(pl.col("status") == "rejected")["reason"])
    from fabrika.store.versions import read_version

    funnel = read_version(run_dir, store.read_manifest()["latest_version"])["funnel"]["gates"]
    dataset_rows = sum(funnel[t]["out"] for t in ("fc.samples", "fc.irrelevance"))
    return {
        "plans": f"{plans.filter(pl.col('status') == 'ok').height}/{plans.height}",
        "plan_rejections": dict(plan_reasons.most_common(3)),
        "episodes_accepted": f"{ok_eps.height}/{episodes.height}",
        "episode_rejections": dict(reasons.most_common(4)),
        "tool_rounds_no_injection": round(1 - injected / rounds, 3) if rounds else None,
        "tool_rounds_first_try": round(first_try / rounds, 3) if rounds else None,
        "tool_rounds_repeat": repeated,
        "samples_per_episode": round(samples.height / max(1, ok_eps.height), 2),
        "dataset_rows_after_gates": dataset_rows,
        "training_turns_per_plan_after_gates": round(dataset_rows / max(1, plans.height), 2),
        "messages_per_episode": round(n_messages / max(1, ok_eps.height), 2),
        "irrelevance_samples": irr.height,
        "irrelevance_after_clarification": after_clarification,
        "ru_tool_call_samples_kept_by_language_gate": f"{kept}/{ru_calls.height}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans-per-topic", type=int, default=6)
    args = ap.parse_args()
    from fabrika.generators.fc import sim_realistic, sim_responders

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        sim_responders.register_fc_sim_responders()
        out["basic"] = run(Path(tmp) / "basic", args.plans_per_topic)
        sim_realistic.use_realistic_profile()
        out["realistic"] = run(Path(tmp) / "realistic", args.plans_per_topic)
        sim_responders.register_fc_sim_responders()
    keys = list(out["basic"])
    width = max(len(k) for k in keys)
    print(f"{'':{width}}  {'basic':>28}  {'realistic':>28}")
    for k in keys:
        b, r = out["basic"][k], out["realistic"][k]
        if isinstance(b, dict):
            print(f"{k:{width}}  basic={json.dumps(b, ensure_ascii=False)}\n{'':{width}}  "
                  f"realistic={json.dumps(r, ensure_ascii=False)}")
        else:
            print(f"{k:{width}}  {b!s:>28}  {r!s:>28}")


if __name__ == "__main__":
    main()
