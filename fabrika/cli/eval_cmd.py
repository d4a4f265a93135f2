"""``fabrika eval …``: eval-set sampling, judge calibration, FC/IF scoring on an endpoint, failure labelling.

Logic lives in :mod:`fabrika.eval`; this module parses flags, prints tables
and maps errors to exit codes (2: bad input or flags; 1: some items could not
be answered — the finished ones are kept, rerun the same command to resume).
"""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from rich.table import Table

from fabrika.errors import ConfigError, InputError, StoreError

eval_app = typer.Typer(add_completion=False, no_args_is_help=True,
                       help="Evaluation: sample an eval set from logs, calibrate a judge, score FC/IF on a model.")


@eval_app.callback()
def _needs_eval_extra() -> None:
    """Evaluation: sample an eval set from logs, calibrate a judge, score FC/IF on a model."""
    import importlib.util

    missing = [m for m in ("sklearn", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        _fail(f"fabrika eval needs {' and '.join(missing)}; install them with: pip install 'fabrika[eval]'")

BaseUrl = Annotated[Optional[str], typer.Option("--base-url", help="OpenAI-compatible endpoint, e.g. http://host:8000/v1.")]
Model = Annotated[Optional[str], typer.Option("--model", help="Model name sent to the endpoint.")]
ApiKeyEnv = Annotated[Optional[str], typer.Option("--api-key-env", help="Environment variable holding the API key.")]
LLMFile = Annotated[Optional[Path], typer.Option("--llm-config", help="YAML with an llm: block (fabrika's LLMConfig).")]
Retries = Annotated[Optional[int], typer.Option("--max-retries", help="Retries per request for retryable errors.")]
OutDir = Annotated[Path, typer.Option("--out", help="Eval directory: results.jsonl, cache.sqlite, report.json (resumable).")]


def _fail(message: str, code: int = 2) -> None:
    from fabrika.cli.app import fail

    fail(message, code)


def _print(obj: Any) -> None:
    from fabrika.cli.app import out

    out.print(obj)


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _llm(base_url: str | None, model: str | None, api_key_env: str | None, llm_config: Path | None,
         max_retries: int | None):
    from fabrika.eval.runstore import make_llm_config

    return make_llm_config(base_url=base_url, model=model, api_key_env=api_key_env, config_file=llm_config,
                           max_retries=max_retries)


def _run(out_dir: Path, settings: dict[str, Any], llm, items: list[dict[str, Any]], make_requests: Callable,
         finish: Callable, report: Callable[[list[dict[str, Any]]], dict[str, Any]],
         runner: Callable | None = None) -> dict[str, Any]:
    """Run the items (resuming), write report.json when all finished; exit 1 (partial report) otherwise.
    ``runner`` (default :func:`fabrika.eval.runstore.run_items`) has run_items' signature."""
    from fabrika.cli.app import stopped
    from fabrika.eval.runstore import REPORT, ResultStore, run_items, write_json_atomic
    from fabrika.pipeline.stopping import RunStopped, stoppable

    store = ResultStore(out_dir, settings)
    try:  # SIGTERM / SIGINT stop it whatever it is doing; finished items are saved (stopping.py)
        outcome = asyncio.run(stoppable((runner or run_items)(store, llm, items, make_requests, finish)))
    except KeyboardInterrupt as exc:
        store.close()
        how = f"stopped by {exc.signal_name}" if isinstance(exc, RunStopped) else "interrupted"
        stopped(f"{how}: finished items are saved; rerun the same command to resume",
                exc.exit_code if isinstance(exc, RunStopped) else 130)
    store.close()
    ids = [it["id"] for it in items]
    records = [store.done[i] for i in ids if i in store.done]
    doc = report(records)
    doc["model"] = llm.model
    doc["finished"] = len(records)
    doc["total"] = len(items)
    if outcome.failed:
        write_json_atomic(out_dir / "report.partial.json", doc)
        _print(f"{len(records)}/{len(items)} items finished; partial report: {out_dir / 'report.partial.json'}")
        reasons = sorted({f["reason"] for f in outcome.failed})[:3]
        _fail(f"{len(outcome.failed)} item(s) got no answer ({'; '.join(reasons)}); rerun the same command to "
              f"retry them", code=1)
    write_json_atomic(out_dir / REPORT, doc)
    (out_dir / "report.partial.json").unlink(missing_ok=True)
    return doc


# -- sampling -------------------------------------------------------------------
@eval_app.command("synth-log")
def synth_log(out: Annotated[Path, typer.Argument(help="Output JSONL.")],
              rows: Annotated[int, typer.Option("--rows", min=1)] = 20_000,
              seed: Annotated[int, typer.Option("--seed")] = 0,
              regime: Annotated[str, typer.Option("--regime", help="gateway (many services, rich variables) | "
                                                  "templated (92 % of rows from four templates)")] = "gateway") -> None:
    """Write the synthetic request log (templated services, Zipf tail, several models, free-form chat; ru+en)."""
    from fabrika.eval.synthlog import REGIMES, write

    if regime not in REGIMES:
        _fail(f"--regime must be one of {', '.join(sorted(REGIMES))}, got {regime!r}")
    _print(f"{write(out, rows, seed, regime)} rows -> {out}")


def _read_logs(path: Path):
    from fabrika.eval.logs import read_logs

    try:
        return read_logs(path)
    except InputError as exc:
        _fail(str(exc))


METRIC_COLS = (("dist", "Dist. ↑"), ("js_model", "JS model ↓"), ("js_length", "JS length ↓"),
               ("js_service", "JS service ↓"), ("js_task_type", "JS task ↓"))


@eval_app.command("sample")
def sample(
    logs: Annotated[Path, typer.Argument(help="Request log (JSONL: prompt or messages; model, service, task_type).")],
    budget: Annotated[int, typer.Option("--budget", help="Rows to select.")],
    method: Annotated[str, typer.Option("--method", help="template | random | maxmin | tags")] = "template",
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the selected rows here (JSONL).")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    threshold: Annotated[float, typer.Option("--threshold", help="MinHash LSH Jaccard threshold for one template.")] = 0.6,
    min_template_share: Annotated[float, typer.Option("--min-template-share",
                                                      help="Clusters below this share of the log form the tail.")] = 0.001,
    length_strata: Annotated[int, typer.Option("--length-strata", min=0, help="template: allocate the budget over "
                                               "N prompt-length quantiles of the log first (0: off).")] = 0,
) -> None:
    """Select an evaluation set from a request log and print its Dist. / JS metrics."""
    from fabrika.eval.metrics import SampleScorer
    from fabrika.eval.sampling import run_sampler

    records = _read_logs(logs)
    kwargs: dict[str, Any] = {"seed": seed}
    if method == "template":
        kwargs.update(threshold=threshold, min_template_share=min_template_share, strata=length_strata)
    elif length_strata:
        _fail("--length-strata applies to --method template only")
    try:
        sel = run_sampler(method, records, budget, **kwargs)
    except ConfigError as exc:
        _fail(str(exc))
    scores = SampleScorer(records).score(sel.indices)
    table = Table(title=f"{method}: {len(sel.indices)} of {len(records)} rows")
    for _, title in METRIC_COLS:
        table.add_column(title, justify="right")
    table.add_row(*[_fmt(scores[k]) for k, _ in METRIC_COLS])
    _print(table)
    if method == "template":
        info = sel.info
        _print(f"templates: {info['templates']}, tail rows: {info['tail_rows']} (budget {info['tail_budget']})")
    if out is not None:
        labels = sel.info.get("labels")
        clusters = {records[i].id: labels[i] for i in sel.indices} if isinstance(labels, list) else None
        _write_selection(logs, out, [records[i].id for i in sel.indices], clusters)
        _print(f"sample: {out}")


def _write_selection(logs: Path, out: Path, ids: list[str], clusters: dict[str, Any] | None) -> None:
    """The selected rows as they are in the log (messages and all), in selection order, written atomically."""
    from fabrika.eval.logs import read_jsonl

    wanted = set(ids)
    rows: dict[str, dict[str, Any]] = {}
    for n, row in read_jsonl(logs):
        rid = str(row.get("id", f"L{n}"))
        if rid in wanted:
            rows[rid] = row if clusters is None else {**row, "template_cluster": clusters[rid]}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for rid in ids:
            fh.write(json.dumps(rows[rid], ensure_ascii=False, default=str) + "\n")
    tmp.replace(out)


@eval_app.command("compare")
def compare(
    logs: Annotated[Path, typer.Argument(help="Request log (JSONL).")],
    budget: Annotated[int, typer.Option("--budget")],
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Run each sampler with seeds 0..N-1; mean ± sd.")] = 3,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the numbers as JSON.")] = None,
    length_strata: Annotated[int, typer.Option("--length-strata", min=0, help="Also run the template sampler with "
                                               "length-stratified allocation over N quantiles (0: not).")] = 0,
) -> None:
    """Run all four samplers on one log: the Table-1-style comparison (Dist. and JS distances)."""
    import time

    from fabrika.eval.metrics import SampleScorer
    from fabrika.eval.runstore import write_json_atomic
    from fabrika.eval.sampling import SAMPLERS, run_sampler

    records = _read_logs(logs)
    scorer = SampleScorer(records)
    results: dict[str, Any] = {}
    recovery = None
    variants: list[tuple[str, str, dict[str, Any]]] = [(name, name, {}) for name in SAMPLERS]
    if length_strata:
        variants.append((f"template+strata{length_strata}", "template", {"strata": length_strata}))
    for name, sampler, extra in variants:
        runs = []
        t0 = time.perf_counter()
        for s in range(seeds):
            try:
                sel = run_sampler(sampler, records, budget, seed=s, **extra)
            except ConfigError as exc:
                _fail(str(exc))
            runs.append(scorer.score(sel.indices))
            if name == "template" and recovery is None and all("template_id" in r.extra for r in records):
                recovery = _template_recovery([r.extra["template_id"] for r in records], sel.info["labels"])
        agg: dict[str, Any] = {}
        for k, _ in METRIC_COLS:
            vals = [v for v in (r[k] for r in runs) if v is not None]
            agg[k] = {"mean": statistics.fmean(vals), "sd": statistics.pstdev(vals)} if vals else None
        agg["seconds_per_run"] = (time.perf_counter() - t0) / seeds
        results[name] = agg
    table = Table(title=f"{len(records)} rows, budget {budget}, {seeds} seed(s): mean ± sd")
    table.add_column("sampler")
    for _, title in METRIC_COLS:
        table.add_column(title, justify="right")
    for name, agg in results.items():
        table.add_row(name, *["—" if agg[k] is None else f"{agg[k]['mean']:.3f} ± {agg[k]['sd']:.3f}"
                              for k, _ in METRIC_COLS])
    _print(table)
    if recovery is not None:
        _print(f"template recovery (rows with a ground-truth template_id other than 'free'): {recovery['true_templates']} "
               f"true templates, {recovery['found_clusters']} clusters over their rows, adjusted Rand "
               f"{recovery['ari']:.3f}, homogeneity {recovery['homogeneity']:.3f}, completeness "
               f"{recovery['completeness']:.3f}")
    if json_out is not None:
        write_json_atomic(json_out, {"log": str(logs), "rows": len(records), "budget": budget, "seeds": seeds,
                                     "results": results, "template_recovery": recovery})


def _template_recovery(truth: list[Any], labels: Any) -> dict[str, Any]:
    """How well the LSH clusters recover a synthetic log's ground-truth templates (free-form rows excluded)."""
    from sklearn.metrics import adjusted_rand_score, completeness_score, homogeneity_score

    pairs = [(str(t), int(lab)) for t, lab in zip(truth, labels) if t != "free"]
    t, lab = [p[0] for p in pairs], [p[1] for p in pairs]
    return {"true_templates": len(set(t)), "found_clusters": len(set(lab)), "ari": adjusted_rand_score(t, lab),
            "homogeneity": homogeneity_score(t, lab), "completeness": completeness_score(t, lab)}


@eval_app.command("tag")
def tag(
    logs: Annotated[Path, typer.Argument(help="Request log (JSONL).")],
    out: OutDir,
    base_url: BaseUrl = None, model: Model = None, api_key_env: ApiKeyEnv = None, llm_config: LLMFile = None,
    max_retries: Retries = None,
) -> None:
    """Tag every request with an LLM (InsTag-like); writes DIR/tagged.jsonl for `sample --method tags`."""
    from fabrika.eval.runstore import file_digest
    from fabrika.eval.tagging import finish_tags, tag_requests

    records = _read_logs(logs)
    items = [{"id": r.id, "text": r.text} for r in records]
    try:
        llm = _llm(base_url, model, api_key_env, llm_config, max_retries)
        doc = _run(out, {"kind": "tag", "model": llm.model, "input": file_digest(logs)}, llm, items, tag_requests,
                   finish_tags, lambda recs: {"n": len(recs), "rejected": sum(r["tags"] is None for r in recs),
                                              "distinct_tags": len({t for r in recs for t in r["tags"] or []})})
    except (ConfigError, InputError, StoreError) as exc:
        _fail(str(exc))
    done = {json.loads(line)["id"]: json.loads(line) for line in
            (out / "results.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()}
    from fabrika.eval.logs import read_jsonl

    target = out / "tagged.jsonl"
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for n, row in read_jsonl(logs):
            rid = str(row.get("id", f"L{n}"))
            tags = (done.get(rid) or {}).get("tags")
            if tags is not None:
                row = {**row, "tags": tags}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(target)
    _print(f"{doc['n']} requests tagged ({doc['rejected']} unreadable answers keep the rule-set tags), "
           f"{doc['distinct_tags']} distinct tags -> {target}")


# -- calibration ------------------------------------------------------------------
@eval_app.command("calibrate")
def calibrate(
    labels: Annotated[Path, typer.Argument(help="Human SBS labels (JSONL: prompt, response_a, response_b, label).")],
    out: OutDir,
    schemes: Annotated[Optional[Path], typer.Option("--schemes", help="YAML: default + task_types → scheme.")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=100, help="Bootstrap resamples for the CIs.")] = 1000,
    base_url: BaseUrl = None, model: Model = None, api_key_env: ApiKeyEnv = None, llm_config: LLMFile = None,
    max_retries: Retries = None,
) -> None:
    """Judge every labelled pair in both orders; κ per task type (with CIs), weighted κ, confusion, swap rate."""
    import yaml
    from pydantic import ValidationError

    from fabrika.eval.calibrate import calibration_report, make_finish, make_requests, read_labels
    from fabrika.eval.judge import JudgeConfig
    from fabrika.eval.runstore import file_digest

    try:
        raw = yaml.safe_load(schemes.read_text(encoding="utf-8")) if schemes else {}
        cfg = JudgeConfig.model_validate(raw or {})
    except FileNotFoundError:
        _fail(f"--schemes {schemes}: no such file")
    except ValidationError as exc:
        e = exc.errors()[0]
        _fail(f"--schemes {schemes}: {'.'.join(map(str, e['loc']))}: {e['msg']}")
    except yaml.YAMLError as exc:
        _fail(f"--schemes {schemes}: not valid YAML ({str(exc).splitlines()[0]})")
    try:
        rows = read_labels(labels, cfg)
        llm = _llm(base_url, model, api_key_env, llm_config, max_retries)
        settings = {"kind": "calibrate", "model": llm.model, "input": file_digest(labels),
                    "schemes": cfg.model_dump(mode="json")}
        doc = _run(out, settings, llm, rows, make_requests(cfg), make_finish(cfg),
                   lambda recs: calibration_report(recs, iterations=bootstrap))
    except (ConfigError, InputError, StoreError) as exc:
        _fail(str(exc))
    table = Table(title=f"judge {doc['model']} vs people: {doc['n']} pairs ({doc['rejected']} unreadable verdicts)")
    for col in ("task type", "scheme", "n", "κ", "95% CI", "κ first order", "order-swap disagreement", "accuracy"):
        table.add_column(col, justify="right" if col != "task type" else "left")
    for task, per in doc["per_group"].items():
        ci = per["ci"]
        table.add_row(task, str(per["scheme"]), str(per["n"]), _fmt(per["kappa"]),
                      "—" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]", _fmt(per["kappa_first_order"]),
                      _fmt(per["order_swap_disagreement"]), _fmt(per["accuracy"]))
    ci = doc["kappa_weighted_ci"]
    table.add_row("weighted", "", str(doc["n"]), _fmt(doc["kappa_weighted"]),
                  "—" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]", _fmt(doc["kappa_first_order"]),
                  _fmt(doc["order_swap_disagreement"]), "")
    _print(table)
    _print(f"report: {out / 'report.json'} (confusion matrices: rows human, columns judge, order {doc['labels']})")


# -- FC / IF -----------------------------------------------------------------------
@eval_app.command("fc")
def fc(
    out: OutDir,
    bfcl: Annotated[Optional[list[Path]], typer.Option("--bfcl", help="BFCL question file, or a BFCL data directory "
                                                       "(pairs each file with possible_answer/<same name>); repeatable.")] = None,
    answers: Annotated[Optional[list[Path]], typer.Option("--answers", help="BFCL possible_answer file, one per --bfcl "
                                                          "(same order; irrelevance files need none: pass '-').")] = None,
    samples: Annotated[Optional[Path], typer.Option("--samples", help="fabrika FC samples (export JSONL).")] = None,
    mode: Annotated[str, typer.Option("--mode", help="fc: tools through the API (needs the server's tool parser) | "
                                      "prompt: functions described in the system prompt, calls read from the text")] = "fc",
    strings: Annotated[str, typer.Option("--strings", help="exact (as the FC reward) | bfcl (BFCL's lenient "
                                         "case/punctuation-insensitive string match)")] = "exact",
    checker: Annotated[str, typer.Option("--checker", help="fabrika (the FC reward's matcher) | bfcl (BFCL's AST "
                                         "checker semantics on BFCL files; --strings is ignored; multi-turn "
                                         "categories run on BFCL's simulators from the bfcl-eval package)")] = "fabrika",
    base_url: BaseUrl = None, model: Model = None, api_key_env: ApiKeyEnv = None, llm_config: LLMFile = None,
    max_retries: Retries = None,
) -> None:
    """Function calling on a model endpoint: BFCL-style AST accuracy per category with its components."""
    from fabrika.eval.fc_cases import read_bfcl, read_samples
    from fabrika.eval.fc_eval import COMPONENTS, fc_report, fc_requests, score_case
    from fabrika.eval.runstore import file_digest

    if not bfcl and samples is None:
        _fail("pass --bfcl FILE [--answers FILE] or --samples FILE")
    if mode not in ("fc", "prompt"):
        _fail(f"--mode must be 'fc' or 'prompt', got {mode!r}")
    if strings not in ("exact", "bfcl"):
        _fail(f"--strings must be 'exact' or 'bfcl', got {strings!r}")
    if checker not in ("fabrika", "bfcl"):
        _fail(f"--checker must be 'fabrika' or 'bfcl', got {checker!r}")
    if checker == "bfcl" and samples is not None:
        _fail("--checker bfcl scores BFCL files only; --samples needs --checker fabrika")
    answers = list(answers or [])
    if bfcl and answers and len(answers) != len(bfcl):
        _fail(f"--answers must be given once per --bfcl ({len(bfcl)}), got {len(answers)}; use '-' for none")
    from fabrika.eval.bfcl_multi_data import is_multi_turn
    from fabrika.eval.fc_cases import bfcl_category

    try:
        cases = []
        pairs: list[tuple[Path, Path | None]] = []
        for i, q in enumerate(bfcl or []):
            if q.is_dir() and checker == "bfcl":
                from fabrika.eval.bfcl_data import data_dir_pairs

                found, skipped = data_dir_pairs(q)
                pairs += found
                if skipped:
                    from fabrika.eval.bfcl_data import NEEDS_BFCL_EVAL
                    from fabrika.eval.bfcl_sim import INSTALL

                    _print(f"--checker bfcl skips {len(skipped)} categories it does not score: {', '.join(skipped)}")
                    if any(s.endswith(NEEDS_BFCL_EVAL) for s in skipped):
                        _print(f"BFCL's multi-turn categories run on BFCL's simulators; install them with: {INSTALL}")
                continue
            if q.is_dir():  # a BFCL data directory: every category file with its possible_answer twin
                files = sorted(q.glob("BFCL_v*_*.json"))
                if not files:
                    raise InputError(f"--bfcl {q}: no BFCL_v*_<category>.json files in this directory")
                multi = [f for f in files if is_multi_turn(bfcl_category("", f))]
                if multi:
                    _print(f"the fabrika checker skips {len(multi)} multi-turn categories (they need --checker bfcl): "
                           f"{', '.join(bfcl_category('', f) for f in multi)}")
                for f in files:
                    twin = q / "possible_answer" / f.name
                    if f not in multi:
                        pairs.append((f, twin if twin.is_file() else None))
                continue
            a = answers[i] if i < len(answers) else None
            pairs.append((q, None if a is None or str(a) == "-" else a))
        bfcl_items: list[dict[str, Any]] = []
        for q, a in pairs:
            multi_turn = is_multi_turn(bfcl_category("", q))
            if multi_turn and checker != "bfcl":
                raise InputError(f"--bfcl {q}: multi-turn categories are scored with --checker bfcl (BFCL's "
                                 f"state-based checking on its own API simulators)")
            if multi_turn and mode != "fc":
                raise InputError(f"--bfcl {q}: multi-turn categories run with --mode fc only (tools through the API)")
            if multi_turn:
                from fabrika.eval.bfcl_multi_data import read_multi_items

                bfcl_items += read_multi_items(q, a)
            elif checker == "bfcl":
                from fabrika.eval.bfcl_data import read_items

                bfcl_items += read_items(q, a)
            else:
                cases += read_bfcl(q, a)
        if samples is not None:
            cases += read_samples(samples)
        if not cases and not bfcl_items:
            raise InputError("the FC input files hold no cases")
        ids = [c.id for c in cases] + [it["id"] for it in bfcl_items]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise InputError(f"duplicate case id {dup!r} across the input files; ids must be unique")
        llm = _llm(base_url, model, api_key_env, llm_config, max_retries)
        paths = [p for q, a in pairs for p in (q, a) if p is not None] + ([samples] if samples else [])
        settings = {"kind": "fc", "model": llm.model, "input": file_digest(*paths), "strings": strings,
                    "mode": mode}
        items = [{**c.as_item(), "strings": strings, "mode": mode} for c in cases]
        score = score_case
        runner = None
        if checker == "bfcl":
            from fabrika.eval.bfcl_multi_eval import run_fc_items
            from fabrika.eval.bfcl_score import score_bfcl

            settings["checker"] = "bfcl"
            if any(it.get("kind") == "multi_turn" for it in bfcl_items):  # the simulators are part of the run
                from importlib.metadata import version

                settings["bfcl_eval"] = version("bfcl-eval")
            items = [{**it, "mode": mode} for it in bfcl_items]
            score = score_bfcl
            runner = run_fc_items
        doc = _run(out, settings, llm, items, fc_requests, lambda item, resps: score(item, resps[0]), fc_report,
                   runner=runner)
    except (ConfigError, InputError, StoreError) as exc:
        _fail(str(exc))
    table = Table(title=f"FC: {doc['model']} on {doc['finished']} cases")
    cols = ("accuracy", *COMPONENTS[:-1])
    table.add_column("category")
    table.add_column("n", justify="right")
    for c in cols:
        table.add_column(c, justify="right")
    rows = list(doc["per_category"].items()) + [("overall", doc["overall"])]
    for name, s in rows:
        table.add_row(name, str(s["n"]), *[_fmt(s[c]) for c in cols])
    _print(table)
    _print(f"report: {out / 'report.json'}")


@eval_app.command("if")
def if_(
    out: OutDir,
    samples: Annotated[Optional[Path], typer.Option("--samples", help="fabrika IF samples (export JSONL).")] = None,
    generate: Annotated[Optional[int], typer.Option("--generate", min=1, help="Generate N ruIFEval-like prompts.")] = None,
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Query pool (JSONL with 'text'); default: "
                                                    "fabrika's Russian pool.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the generated set.")] = 0,
    k_max: Annotated[int, typer.Option("--k-max", min=1, help="Most constraints per generated prompt.")] = 3,
    base_url: BaseUrl = None, model: Model = None, api_key_env: ApiKeyEnv = None, llm_config: LLMFile = None,
    max_retries: Retries = None,
) -> None:
    """Instruction following on a model endpoint: IFEval-style strict/loose, prompt- and instruction-level."""
    from fabrika.eval.if_eval import generate_if_set, if_report, if_requests, read_if_samples, score_if
    from fabrika.eval.runstore import file_digest, write_json_atomic

    if (samples is None) == (generate is None):
        _fail("pass exactly one of --samples FILE or --generate N")
    try:
        if samples is not None:
            items = read_if_samples(samples)
            source: dict[str, Any] = {"samples": file_digest(samples)}
        else:
            from fabrika.generators.instruct.queries import DEFAULT_POOL, load_pool

            pool = [t for _, t in load_pool(queries or DEFAULT_POOL)]
            items = generate_if_set(pool, n=generate or 0, seed=seed, k_max=k_max)
            source = {"generated": generate, "seed": seed, "k_max": k_max, "queries": file_digest(queries or DEFAULT_POOL)}
            out.mkdir(parents=True, exist_ok=True)
            write_json_atomic(out / "if_set.json", items)
        llm = _llm(base_url, model, api_key_env, llm_config, max_retries)
        settings = {"kind": "if", "model": llm.model, **source}
        doc = _run(out, settings, llm, items, if_requests, lambda item, resps: score_if(item, resps[0]), if_report)
    except (ConfigError, InputError, StoreError) as exc:
        _fail(str(exc))
    table = Table(title=f"IF: {doc['model']} on {doc['n']} prompts")
    for c in ("level", "strict", "loose"):
        table.add_column(c, justify="right" if c != "level" else "left")
    table.add_row("prompt", _fmt(doc.get("prompt_strict")), _fmt(doc.get("prompt_loose")))
    table.add_row("instruction", _fmt(doc.get("instruction_strict")), _fmt(doc.get("instruction_loose")))
    _print(table)
    per = Table(title="per constraint")
    for c in ("constraint", "n", "strict", "loose"):
        per.add_column(c, justify="right" if c != "constraint" else "left")
    for cid, s in (doc.get("per_constraint") or {}).items():
        per.add_row(cid, str(s["n"]), _fmt(s["strict"]), _fmt(s["loose"]))
    _print(per)
    _print(f"report: {out / 'report.json'}")


# -- error analysis -------------------------------------------------------------------
@eval_app.command("label")
def label(
    rows: Annotated[Path, typer.Argument(help="Failed answers (JSONL: prompt, response; optional label).")],
    out: OutDir,
    taxonomy: Annotated[Optional[Path], typer.Option("--taxonomy", help="YAML/JSON list of {name, description}.")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=100)] = 1000,
    base_url: BaseUrl = None, model: Model = None, api_key_env: ApiKeyEnv = None, llm_config: LLMFile = None,
    max_retries: Retries = None,
) -> None:
    """Label failures into a taxonomy with an LLM; κ against human labels when the rows carry them."""
    from fabrika.eval.label import label_report, label_requests, load_taxonomy, make_finish, read_label_rows
    from fabrika.eval.runstore import file_digest

    try:
        classes = load_taxonomy(taxonomy)
        items = read_label_rows(rows, classes)
        llm = _llm(base_url, model, api_key_env, llm_config, max_retries)
        settings = {"kind": "label", "model": llm.model, "input": file_digest(rows),
                    "taxonomy": [c.model_dump() for c in classes]}
        doc = _run(out, settings, llm, items, lambda r: label_requests(r, classes), make_finish(classes),
                   lambda recs: label_report(recs, classes, iterations=bootstrap))
    except (ConfigError, InputError, StoreError) as exc:
        _fail(str(exc))
    table = Table(title=f"failure classes by {doc['model']}: {doc['n']} answers ({doc['rejected']} unreadable)")
    table.add_column("class")
    table.add_column("count", justify="right")
    for name, count in doc["distribution"].items():
        table.add_row(name, str(count))
    _print(table)
    agr = doc.get("agreement")
    if agr:
        ci = agr["kappa_weighted_ci"]
        _print(f"κ vs people: pooled {_fmt(agr['kappa_pooled'])}, weighted {_fmt(agr['kappa_weighted'])} "
               f"{'' if ci is None else f'[{ci[0]:.3f}, {ci[1]:.3f}]'} on {agr['n']} labelled rows")
    _print(f"report: {out / 'report.json'}")


def register(app: typer.Typer) -> None:
    """Add the ``eval`` command group to the fabrika app."""
    app.add_typer(eval_app, name="eval")
