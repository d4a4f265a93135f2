"""BFCL's multi-turn categories on BFCL's own simulators (``bfcl-eval``, installed by the Makefile's dev install).

* fabrika's checker and BFCL's ``multi_turn_checker`` agree per answer (verdict and error type) on every
  20th case of each v4 multi-turn category: the ground truth and systematic perturbations
  (``tests/eval/bfcl_multi_harness.py``; ``python bench/bfcl_multi_agreement.py`` runs every case);
* the simulators are BFCL's classes, imported; calls are read, never run as code; each case has its own
  copies of BFCL's modules, so a verdict does not depend on the cases before it;
* ``eval fc --checker bfcl`` runs multi-turn files end to end against the fake OpenAI server answering a
  scripted transcript: held-out functions join at their turn, results go back as tool messages, BFCL's
  step limit force-quits, a rerun resumes without a request, and without the package it exits 2.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fabrika.cli.app import app
from fabrika.eval.bfcl_multi import check_multi_turn
from fabrika.eval.bfcl_sim import INSTALL, SimSession, session_factory
from tests.eval.bfcl_multi_harness import CATEGORIES, agreement, as_dicts, load_cases
from tests.eval.conftest import llm_flags

runner = CliRunner()


def test_fabrika_and_bfcl_checkers_agree_on_ground_truth_and_perturbations() -> None:
    disagreements: list[Any] = []
    table = agreement(every=20, on_disagree=lambda *a: disagreements.append(a))
    assert set(table) == set(CATEGORIES) and not disagreements
    for category, row in table.items():
        assert row["cases"] == 10, category
        assert row["agree"] == row["agree_error_type"] == row["answers"] > 100
        assert row["ground_truth_valid"] == 2 * row["cases"]  # both ground-truth answers pass both checkers
        kinds = row["by_kind"]
        for kind in ("dropped call", "empty turn", "last turn missing"):
            assert kinds[kind][1] == 0, (category, kind)  # BFCL fails every one of these
        assert kinds["wrong argument value"][1] < kinds["wrong argument value"][0] / 2
        assert 0 < kinds["extra state-changing call"][1] < kinds["extra state-changing call"][0]
        # an unknown function is an error result: it changes nothing, so BFCL passes the answer
        assert kinds["unknown function called"][1] == kinds["unknown function called"][0] > 0


def test_the_simulators_are_bfcl_classes_imported_not_copied() -> None:
    import inspect

    import bfcl_eval

    package = Path(bfcl_eval.__file__).parent
    session = SimSession(["GorillaFileSystem", "TwitterAPI", "MathAPI"], {})
    for instance in session.instances.values():  # per-case module copies run BFCL's own files
        files = {f.__code__.co_filename for f in vars(type(instance)).values() if inspect.isfunction(f)}
        assert files and all(Path(f).is_relative_to(package) for f in files)
    for py in (Path(__file__).parents[2] / "fabrika").rglob("*.py"):
        text = py.read_text(encoding="utf-8")
        assert "class GorillaFileSystem" not in text and "class TwitterAPI" not in text, py


def test_calls_are_read_as_literals_and_must_name_a_method_of_the_case() -> None:
    fs = {"root": {"w": {"type": "directory", "contents": {}}}}
    session = SimSession(["GorillaFileSystem"], {"GorillaFileSystem": fs})
    results = session.run(["__import__('os').system('true')", "mkdir(dir_name=str(1))", "_load_scenario(scenario={})",
                           "post_tweet(content='x')", "kill()", {"mkdir": '{"dir_name": '}, "mkdir('made')",
                           {"touch": {"file_name": "a.txt"}}])
    assert all(r.startswith("Error during execution") for r in results[:6]), results
    assert "name 'post_tweet' is not defined" in results[3] and "not allowed" in results[4]
    assert results[6:] == ["None", "None"]  # positional literals (as in BFCL's ground truth); keyword dicts
    assert sorted(session.instances["GorillaFileSystem"].root.contents) == ["a.txt", "made"]


def test_each_case_has_its_own_copy_of_bfcl_state_outside_the_instances() -> None:
    # BFCL's post_tweet(tags=[], mentions=[]) shares its default lists; mention() extends them in place
    config = {"TwitterAPI": {"username": "u", "password": "p", "authenticated": True}}
    first = session_factory()({"id": "multi_turn_base_0", "involved_classes": ["TwitterAPI"], "initial_config": config})
    first.run(["post_tweet(content='a')", "mention(tweet_id=0, mentioned_usernames=['@leak'])"])
    same_case = session_factory()
    a = same_case({"id": "multi_turn_base_1", "involved_classes": ["TwitterAPI"], "initial_config": config})
    posted = json.loads(a.run(["post_tweet(content='b')"])[0])
    assert posted["mentions"] == []  # another case: fresh default lists
    b = same_case({"id": "multi_turn_base_1", "involved_classes": ["TwitterAPI"], "initial_config": config})
    b.run(["post_tweet(content='c')", "mention(tweet_id=0, mentioned_usernames=['@x'])"])
    assert a.instances["TwitterAPI"].tweets[0]["mentions"] == ["@x"]  # one case's two sessions share, as in BFCL


def _write_data(root: Path, per_category: int = 3) -> dict[str, dict[str, Any]]:
    """``per_category`` cases of each multi-turn category, from the installed package, as a BFCL data directory
    (category k from case 3k on: the categories share questions case by case, the fake server tells cases
    apart by their first user message)."""
    (root / "possible_answer").mkdir(parents=True)
    cases = {}
    for k, category in enumerate(CATEGORIES):
        chosen = load_cases(category)[3 * k:3 * k + per_category]
        rows = [{k: v for k, v in c.items() if k != "ground_truth"} for c in chosen]
        (root / f"BFCL_v4_{category}.json").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        (root / "possible_answer" / f"BFCL_v4_{category}.json").write_text(
            "".join(json.dumps({"id": c["id"], "ground_truth": c["ground_truth"]}) + "\n" for c in chosen),
            encoding="utf-8")
        cases.update({c["id"]: c for c in chosen})
    return cases


def _transcript(cases: dict[str, dict[str, Any]], wrong: set[str], seen: list[dict[str, Any]]) -> Any:
    """A server answering each case's turns with its ground truth (one step, then a text answer); for the
    ``wrong`` cases the last call of the first turn is dropped."""
    plans = {}
    for cid, case in cases.items():
        plan = as_dicts(case)
        if cid in wrong:
            plan[0] = plan[0][:-1]
        users_per_turn = [max(1, sum(m["role"] == "user" for m in turn)) for turn in case["question"]]
        ends = [sum(users_per_turn[:t + 1]) for t in range(len(users_per_turn))]  # user messages up to turn t
        first_user = next(m["content"] for m in case["question"][0] if m["role"] == "user")
        assert first_user not in plans, cid
        plans[first_user] = (plan, ends)

    def respond(req: dict[str, Any]) -> Any:
        seen.append(req)
        msgs = req["messages"]
        users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        plan, ends = plans[msgs[users[0]]["content"]]
        turn, step = ends.index(len(users)), sum(m["role"] == "assistant" for m in msgs[users[-1]:])
        if step == 0 and plan[turn]:
            return {"tool_calls": [{"name": n, "arguments": json.dumps(a)} for c in plan[turn] for n, a in c.items()]}
        return "Готово."

    return respond


def test_eval_fc_runs_bfcl_multi_turn_files_end_to_end(server, tmp_path: Path) -> None:
    cases = _write_data(tmp_path / "data")
    wrong = {"multi_turn_base_1", "multi_turn_long_context_11"}
    seen: list[dict[str, Any]] = []
    server.script(tag="eval.fc.multi", responder=_transcript(cases, wrong, seen))
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(tmp_path / "data"), "--checker", "bfcl",
                              *llm_flags(server)])
    assert res.exit_code == 0, res.output
    assert not server.errors
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    got = {c: s["accuracy"] for c, s in doc["per_category"].items()}
    assert got == {"multi_turn_base": pytest.approx(2 / 3), "multi_turn_miss_func": 1.0,
                   "multi_turn_miss_param": 1.0, "multi_turn_long_context": pytest.approx(2 / 3)}
    miss = next(cid for cid, c in cases.items() if c.get("missed_function"))
    (held_turn, names), = cases[miss]["missed_function"].items()
    held = names[0]
    recs = {json.loads(x)["id"]: json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()}
    bad = recs["multi_turn_base_1"]
    assert bad["correct"] is False and bad["bfcl_error"] == bad["turn_errors"][0] is not None and bad["turn"] == 0
    assert bad["checker"] == "bfcl" and len(bad["turn_errors"]) == len(cases["multi_turn_base_1"]["ground_truth"])
    good = recs[miss]
    assert good["correct"] is True and good["bfcl_error"] is None and set(good["turn_errors"]) == {None}
    assert any(held in c for step in good["calls"][int(held_turn)] for c in step)
    # the held-out function is offered from its turn on, with BFCL's message, not before
    first = next(m["content"] for m in cases[miss]["question"][0] if m["role"] == "user")
    mine = [r for r in seen if next(m for m in r["messages"] if m["role"] == "user")["content"] == first]
    before = [r for r in mine if sum(m["role"] == "user" for m in r["messages"]) <= int(held_turn)]
    after = [r for r in mine if sum(m["role"] == "user" for m in r["messages"]) > int(held_turn)]
    assert before and after
    assert all(held not in {t["function"]["name"] for t in r["tools"]} for r in before)
    assert all(held in {t["function"]["name"] for t in r["tools"]} for r in after)
    held_message = [m for m in after[0]["messages"] if m["role"] == "user"][int(held_turn)]["content"]
    assert held_message == "I have updated some more functions you can choose from. What about now?"
    # the results went back as tool messages, with the calls' ids
    last = mine[-1]["messages"]
    tools = [m for m in last if m["role"] == "tool"]
    assert tools and all(m["tool_call_id"] for m in tools)
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    assert settings["checker"] == "bfcl" and settings["bfcl_eval"] == "2026.3.23"
    # a rerun resumes: nothing is asked again
    served = server.served
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(tmp_path / "data"), "--checker", "bfcl",
                              *llm_flags(server)])
    assert res.exit_code == 0, res.output
    assert server.served == served


def test_a_model_that_keeps_calling_is_force_quit_at_bfcls_step_limit(server, tmp_path: Path) -> None:
    cases = _write_data(tmp_path / "data", per_category=1)
    base = cases["multi_turn_base_0"]
    server.script(tag="eval.fc.multi", responder=lambda req: {"tool_calls": [{"name": "pwd", "arguments": "{}"}]})
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl",
                              str(tmp_path / "data" / "BFCL_v4_multi_turn_base.json"), "--answers",
                              str(tmp_path / "data" / "possible_answer" / "BFCL_v4_multi_turn_base.json"),
                              "--checker", "bfcl", *llm_flags(server)])
    assert res.exit_code == 0, res.output
    (rec,) = [json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rec["force_quit"] is True and rec["steps"] == 21 and len(rec["calls"]) == 1 < len(base["ground_truth"])
    assert rec["correct"] is False and rec["bfcl_error"] == "multi_turn:force_terminated"


def test_without_bfcl_eval_a_multi_turn_file_exits_2_naming_the_install(server, tmp_path: Path, monkeypatch) -> None:
    _write_data(tmp_path / "data", per_category=1)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bfcl_eval" else real(name, *a))
    q = tmp_path / "data" / "BFCL_v4_multi_turn_base.json"
    res = runner.invoke(app, ["eval", "fc", "--out", str(tmp_path / "o"), "--bfcl", str(q), "--answers",
                              str(tmp_path / "data" / "possible_answer" / q.name), "--checker", "bfcl",
                              *llm_flags(server)])
    assert res.exit_code == 2 and INSTALL in res.output.replace("\n", "")
    # a data directory skips them, naming the install; with nothing else to score that is an input error
    res = runner.invoke(app, ["eval", "fc", "--out", str(tmp_path / "o2"), "--bfcl", str(tmp_path / "data"),
                              "--checker", "bfcl", *llm_flags(server)])
    assert res.exit_code == 2 and "pip install --no-deps bfcl-eval" in res.output.replace("\n", "")
    # the fabrika checker does not score multi-turn files
    res = runner.invoke(app, ["eval", "fc", "--out", str(tmp_path / "o3"), "--bfcl", str(q), "--answers",
                              str(tmp_path / "data" / "possible_answer" / q.name), *llm_flags(server)])
    assert res.exit_code == 2 and "--checker bfcl" in res.output
    assert server.served == 0


def test_a_turn_whose_ground_truth_is_empty_is_not_checked_as_in_bfcl() -> None:
    from tests.eval.bfcl_multi_harness import bfcl_verdict

    checked = 0
    for case in load_cases("multi_turn_miss_param")[:40]:
        plan = as_dicts(case)
        empty = next((i for i, t in enumerate(plan[:-1]) if not t and plan[i + 1]), None)
        if empty is None:
            continue
        # the model already does the next turn's work in the turn where it should have asked
        answer = [[c] if c else [] for c in plan]
        answer[empty] = [plan[empty + 1]]
        verdict = check_multi_turn(case, answer, new_session=session_factory())
        assert verdict.turn_errors[empty] is None
        assert (verdict.valid, verdict.error_type) == bfcl_verdict(case, answer, f"empty_{case['id']}")
        checked += 1
    assert checked >= 10


def test_a_data_directory_mixes_single_and_multi_turn_categories(server, tmp_path: Path) -> None:
    import shutil

    cases = _write_data(tmp_path / "data", per_category=1)
    single = Path(__file__).parent / "data" / "bfcl" / "checker" / "BFCL_v4_irrelevance.json"
    shutil.copy(single, tmp_path / "data" / single.name)
    n_single = sum(1 for line in single.read_text(encoding="utf-8").splitlines() if line.strip())
    server.script(tag="eval.fc.multi", responder=_transcript(cases, set(), []))
    server.script(tag="eval.fc", responder=lambda req: "Не знаю, такой функции нет.")
    out = tmp_path / "fc"
    res = runner.invoke(app, ["eval", "fc", "--out", str(out), "--bfcl", str(tmp_path / "data"), "--checker", "bfcl",
                              *llm_flags(server)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert {c: (s["n"], s["accuracy"]) for c, s in doc["per_category"].items()} == {
        "irrelevance": (n_single, 1.0), **{c: (1, 1.0) for c in CATEGORIES}}


async def test_bfcls_decoder_rules_end_a_turn_on_arguments_that_are_not_json(tmp_path: Path) -> None:
    from fabrika.eval.bfcl_multi_data import read_multi_items
    from fabrika.eval.bfcl_multi_run import answer_bfcl_case
    from fabrika.testing import ScriptedLLM

    root = tmp_path / "data"
    _write_data(root, per_category=1)
    (item,) = read_multi_items(root / "BFCL_v4_multi_turn_base.json",
                               root / "possible_answer" / "BFCL_v4_multi_turn_base.json")
    answers = iter([{"content": None, "tool_calls": [{"name": "pwd", "arguments": ""}]},  # BFCL: json.loads fails
                    {"content": None, "tool_calls": [{"name": "no_such_tool", "arguments": "{}"}]}, "ok"])
    run = await answer_bfcl_case(item, ScriptedLLM(lambda request: next(answers, "ok")))
    assert run.error is None and run.malformed and "not JSON" in run.malformed[0]
    # turn 0 ended at once; turn 1: an unknown name is executed as BFCL executes it, an error result
    assert run.turns[0] == [] and run.turns[1] == [[{"no_such_tool": {}}]]
