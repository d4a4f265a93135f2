"""Multi-turn state-based checking (fabrika.eval.bfcl_multi) on fabrika's own backends: hand-made cases with
hand-written model answers and the verdict each must get (state per turn, the instance-subset response check,
empty turns, turn counts), plus the backends' and the call reader's own rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabrika.errors import InputError
from fabrika.eval.bfcl_backends import FileSystem, MathAPI, TicketAPI
from fabrika.eval.bfcl_multi import Session, check_multi_turn, parse_call

CASES = json.loads((Path(__file__).parent / "data" / "multi_turn" / "cases.json").read_text(encoding="utf-8"))
ANSWERS = [(case, answer) for case in CASES for answer in case["answers"]]


def test_the_cases_cover_every_verdict() -> None:
    kinds = {a["expected"].get("error_type") for _, a in ANSWERS}
    assert kinds == {None, "multi_turn:instance_state_mismatch", "multi_turn:execution_response_mismatch",
                     "multi_turn:empty_turn_model_response", "multi_turn:force_terminated"}
    assert len(CASES) >= 3 and len(ANSWERS) >= 20
    assert all(len(c["question"]) == len(c["ground_truth"]) for c in CASES)


@pytest.mark.parametrize(("case", "answer"), ANSWERS, ids=[f"{c['id']}: {a['name']}" for c, a in ANSWERS])
def test_hand_made_answers_get_their_expected_verdict(case: dict[str, Any], answer: dict[str, Any]) -> None:
    verdict = check_multi_turn(case, answer["model"])
    want = answer["expected"]
    assert verdict.valid is want["valid"], verdict
    assert verdict.error_type == want.get("error_type")
    if "turn" in want:
        assert verdict.turn == want["turn"]


def test_a_state_mismatch_names_the_differing_attribute() -> None:
    case = CASES[1]
    wrong = [a for a in case["answers"] if a["name"] == "the wrong priority"][0]
    verdict = check_multi_turn(case, wrong["model"])
    diff = verdict.details["differences"]
    assert list(diff) == ["TicketAPI.tickets"]
    assert diff["TicketAPI.tickets"]["model"]["7"]["priority"] == 4
    assert diff["TicketAPI.tickets"]["ground_truth"]["7"]["priority"] == 5


def test_the_response_check_is_an_unordered_subset_each_result_used_once() -> None:
    case = {"id": "m", "involved_classes": ["MathAPI"], "initial_config": {},
            "ground_truth": [["add(a=1, b=1)", "add(a=1, b=1)"]]}
    assert check_multi_turn(case, [["multiply(a=2, b=1)", "add(a=1, b=1)", "add(a=1, b=1)"]]).valid
    once = check_multi_turn(case, [["add(a=1, b=1)"]])
    assert once.error_type == "multi_turn:execution_response_mismatch" and once.details["missing"] == ['{"result": 2}']


def test_states_carry_over_between_turns() -> None:
    fs = {"root": {"a": {}}, "cwd": "/"}
    case = {"id": "c", "involved_classes": ["FileSystem"], "initial_config": {"FileSystem": fs},
            "ground_truth": [["cd(folder='a')"], ["touch(file_name='x')"]]}
    # the model made the file in the wrong directory: right after turn 0, wrong after turn 1
    verdict = check_multi_turn(case, [["pwd()"], ["touch(file_name='x')"]])
    assert verdict.error_type == "multi_turn:instance_state_mismatch" and verdict.turn == 0
    late = check_multi_turn(case, [["cd(folder='a')"], ["cd(folder='..')", "touch(file_name='x')"]])
    assert late.turn == 1 and set(late.details["differences"]) == {"FileSystem.cwd", "FileSystem.root"}


def test_calls_are_read_as_literals_never_run_as_code() -> None:
    assert parse_call("mean(numbers=[1, 2.5])") == ("mean", {"numbers": [1, 2.5]})
    for bad in ("cd('docs')", "os.system('ls')", "cd(folder=open('x').read())", "cd(**{'folder': 'a'})", "cd(",
                "1 + 1"):
        with pytest.raises(ValueError):
            parse_call(bad)
    session = Session(["FileSystem"], {"FileSystem": {"root": {}, "cwd": "/"}})
    results = [json.loads(r) for r in session.run(["rm(file_name='x')", "nope()", "cd(folder=1+1)", {"cd": "{"}])]
    assert all("error" in r for r in results)
    assert session.state() == {"FileSystem": {"cwd": [], "root": {}}}


def test_an_unknown_backend_is_an_input_error() -> None:
    with pytest.raises(InputError, match="unknown backends"):
        Session(["GorillaFileSystem"], {})


def test_backends_fail_as_results_and_keep_their_state() -> None:
    fs = FileSystem()
    fs.load_scenario({"root": {"d": {"f": "a\nb"}}, "cwd": "/d"})
    before = fs.state()
    assert "error" in fs.mkdir(dir_name="../escape") and "error" in fs.cd(folder="nowhere")
    assert "error" in fs.mv(source="f", destination="../f") and "error" in fs.wc(file_name="f", mode="x")
    assert fs.state() == before
    assert fs.grep(file_name="f", pattern="b") == {"matching_lines": ["b"]}
    tickets = TicketAPI()
    tickets.load_scenario({"tickets": {"3": {"title": "t", "description": "", "priority": 1, "status": "closed",
                                             "resolution": "ok"}}})
    assert tickets.next_id == 4 and "error" in tickets.close_ticket(ticket_id=3)
    assert tickets.create_ticket(title="новый") == {"id": 4, "status": "open"}
    assert MathAPI().state() == {} and MathAPI().mean(numbers=[]) == {"error": "mean of no numbers"}
    with pytest.raises(ValueError, match="not a directory"):
        FileSystem().load_scenario({"root": {}, "cwd": "/missing"})


def _scripted(plan: list[list[list[dict[str, Any]]]], seen: list[list[dict[str, Any]]]) -> Any:
    """A model that answers each user turn with ``plan[turn]`` (steps of calls), then a text answer."""
    from fabrika.testing import ScriptedLLM

    def handler(request: Any) -> Any:
        messages = list(request.messages)
        seen.append(messages)
        turn = sum(m["role"] == "user" for m in messages) - 1
        since_user = len(messages) - 1 - max(i for i, m in enumerate(messages) if m["role"] == "user")
        step = sum(m["role"] == "assistant" for m in messages[len(messages) - since_user:])
        steps = plan[turn]
        if step >= len(steps):
            return "Готово."
        return {"content": None, "tool_calls": [{"name": n, "arguments": a} for c in steps[step] for n, a in c.items()]}

    return ScriptedLLM(handler)


async def test_a_model_is_asked_turn_by_turn_with_tool_results_fed_back() -> None:
    from fabrika.eval.bfcl_multi_run import answer_case, backend_tools

    case = CASES[0]
    plan = [[[{"cd": {"folder": "docs"}}], [{"mkdir": {"dir_name": "archive"}}]],
            [[{"mv": {"source": "a.txt", "destination": "archive"}}]],
            [[{"cd": {"folder": "archive"}}, {"wc": {"file_name": "a.txt", "mode": "l"}}]]]
    seen: list[list[dict[str, Any]]] = []
    run = await answer_case(case, _scripted(plan, seen))
    assert run.error is None and run.turns == plan and run.steps == 4 + 3  # each turn ends with a text answer
    last = seen[-1]
    assert [m["content"] for m in last if m["role"] == "tool"][-1] == '{"count": 3, "type": "lines"}'
    assert check_multi_turn(case, run.turns).valid
    wrong = [[[{"cd": {"folder": "docs"}}, {"mkdir": {"dir_name": "arch"}}]], plan[1], plan[2]]
    run = await answer_case(case, _scripted(wrong, []))
    verdict = check_multi_turn(case, run.turns)
    assert verdict.error_type == "multi_turn:instance_state_mismatch" and verdict.turn == 0
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in backend_tools(["FileSystem", "MathAPI"])}
    assert tools["wc"] == {"type": "object", "properties": {"file_name": {"type": "string"}, "mode": {"type": "string"}},
                           "required": ["file_name"]}
    assert tools["mean"]["properties"]["numbers"] == {"type": "array"}


async def test_a_failed_request_ends_the_case_as_an_error_not_a_verdict() -> None:
    from fabrika.eval.bfcl_multi_run import answer_case
    from fabrika.testing import ScriptedLLM, llm_error

    run = await answer_case(CASES[1], ScriptedLLM(lambda request: llm_error("bad_request")))
    assert run.error is not None and run.turns == [[]]
