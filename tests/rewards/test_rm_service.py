"""The reward-model service: one instance per process, one load under 256 concurrent first callers, served RMs
over /pooling, /rerank and /predict on a loopback server, and the RM's id next to every score."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fabrika.rewards.rm_service import (
    SIM_RM_ID,
    RMEndpoint,
    RMSpec,
    get_reward_model,
    reset_reward_models,
    sim_scores,
)

PROMPT = [{"role": "user", "content": "Опишите кота."}]


@pytest.fixture(autouse=True)
def _fresh_service() -> Iterator[None]:
    reset_reward_models()
    yield
    reset_reward_models()


def test_256_concurrent_first_callers_cause_exactly_one_load_and_no_error(tmp_path: Path) -> None:
    loads: list[int] = []
    loaded = threading.Event()

    def loader() -> Any:
        loads.append(1)
        # hold the load open until every caller had the chance to arrive: a racing loader loads again here
        loaded.wait(timeout=0.2)
        return lambda prompts, completions: [float(len(str(c))) for c in completions]

    spec = RMSpec(path=tmp_path)  # a local RM spec; the injected loader stands in for transformers
    n = 256
    barrier = threading.Barrier(n)
    results: list[list[float]] = []
    errors: list[BaseException] = []

    def caller(i: int) -> None:
        try:
            barrier.wait()
            rm = get_reward_model(spec, loader=loader)
            results.append(rm([PROMPT], [f"ответ {i}"]))
        except BaseException as exc:  # noqa: BLE001 - every error is a failure of the test
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loaded.set()
    assert errors == []
    assert len(loads) == 1
    assert len(results) == n and all(len(r) == 1 for r in results)
    assert get_reward_model(spec).loads == 1


def test_one_instance_per_spec_and_a_failed_load_is_retried(tmp_path: Path) -> None:
    calls: list[int] = []

    def flaky() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk busy")
        return sim_scores

    rm = get_reward_model(RMSpec(path=tmp_path), loader=flaky)
    assert get_reward_model(tmp_path) is rm and get_reward_model(str(tmp_path)) is rm
    assert get_reward_model("sim") is get_reward_model(RMSpec(sim=True)) is not rm
    with pytest.raises(OSError, match="disk busy"):
        rm([PROMPT], ["Кот спит."])
    assert rm([PROMPT], ["Кот спит."]) == sim_scores([PROMPT], ["Кот спит."]) and rm.loads == 1


def test_the_sim_rm_is_deterministic_and_scores_only_the_visible_answer() -> None:
    rm = get_reward_model("sim")
    assert rm.rm_id == SIM_RM_ID
    a = rm([PROMPT, PROMPT], ["Кот спит.", "<think>долго думаю</think>Кот спит."])
    assert a[0] == a[1] and -2 <= a[0] <= 2
    assert rm([PROMPT], ["Кот ест."]) != rm([PROMPT], ["Кот спит."])


class _Server:
    """A loopback RM server: /pooling (vLLM), /rerank and /predict (TEI); the score is the answer's length."""

    def __init__(self, fail_on: str = "") -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append((self.path, body))
                if self.path == "/pooling":
                    answer = body["messages"][-1]["content"]
                    out: Any = {"data": [{"index": 0, "data": [float(len(answer))]}]}
                elif self.path == "/rerank":
                    out = [{"index": i, "score": float(len(t))} for i, t in reversed(list(enumerate(body["texts"])))]
                    answer = " ".join(body["texts"])
                else:
                    answer = body["inputs"][0][1]
                    out = [[{"label": "LABEL_0", "score": float(len(answer))}]]
                if fail_on and fail_on in answer:
                    self.send_response(503)
                    self.end_headers()
                    return
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("api", ["pooling", "rerank", "predict"])
def test_served_rm_scores_the_visible_answer_and_names_itself(api: str) -> None:
    answers = ["Кот спит.", "<think>хм</think>Кот ест рыбу.", "Кот."]
    with _Server() as server:
        rm = get_reward_model(RMSpec(endpoint=RMEndpoint(base_url=server.url, model="ru-rm", api=api, max_retries=0)))
        scores = rm([PROMPT] * 3, answers)
    assert scores == [9.0, 13.0, 4.0]
    assert rm.rm_id == (f"ru-rm@{server.url}" if api == "pooling" else f"ru-rm@{server.url}/{api}")
    routes = {path for path, _ in server.seen}
    assert routes == {f"/{api}"}
    if api == "rerank":  # one request per prompt, its answers as the texts
        assert len(server.seen) == 1 and server.seen[0][1]["query"] == "user: Опишите кота."
    else:
        assert len(server.seen) == 3


def test_a_request_that_keeps_failing_is_a_transient_error_never_a_number() -> None:
    from fabrika.rewards.rm_service import RMUnavailable

    with _Server(fail_on="рыбу") as server:
        rm = get_reward_model(RMSpec(endpoint=RMEndpoint(base_url=server.url, model="ru-rm", max_retries=2,
                                                         retry_wait_s=0)))
        assert rm([PROMPT], ["Кот спит."]) == [9.0]
        with pytest.raises(RMUnavailable, match="HTTP 503"):  # the item stays pending (tests/rewards/test_rm_faults)
            rm([PROMPT] * 2, ["Кот спит.", "Кот ест рыбу."])
    assert sum(1 for _, b in server.seen if "рыбу" in b["messages"][-1]["content"]) == 3  # 1 try + 2 retries


async def test_stages_and_rewards_share_the_one_instance() -> None:
    from fabrika.filters.teacher_rm import TeacherScoresConfig, TeacherScoresStage
    from fabrika.generators.general.rm import GeneralRMConfig, GeneralRMStage
    from fabrika.rewards.general import make_general_reward
    from fabrika.testing import stage_context

    teacher = TeacherScoresStage(TeacherScoresConfig(sim=True, k=2), stage_context())
    general = GeneralRMStage(GeneralRMConfig(sim=True), stage_context())
    await teacher.setup()
    await general.setup()
    assert teacher.rm is general.rm is get_reward_model("sim")
    assert teacher.rm_id == general.rm_id == SIM_RM_ID
    reward = make_general_reward("sim")
    answer = [{"role": "assistant", "content": "Кот спит на диване."}]
    r = reward([PROMPT], [answer], ref_length=[100.0])
    s = get_reward_model("sim")([PROMPT], [answer])[0]
    assert r[0] == pytest.approx(s * (1 - math.copysign(0.19, s)))


@pytest.mark.train
def test_a_local_rm_called_from_32_threads_at_once_loads_once(tmp_path: Path) -> None:
    """The race the service exists for, on the real local scorer (today's code loaded it once per thread)."""
    from fabrika.rewards.general import SequenceClassifierRM
    from fabrika.train.tiny import save_tiny

    rm = SequenceClassifierRM(save_tiny(tmp_path / "rm", seed=1, num_labels=1))
    real_load, loads = rm._load, []

    def counting_load() -> None:
        loads.append(1)
        real_load()

    rm._load = counting_load  # type: ignore[method-assign]
    barrier, errors, scores = threading.Barrier(32), [], []

    def caller() -> None:
        try:
            barrier.wait()
            scores.append(rm([PROMPT], ["Кот спит."])[0])
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(loads) == 1
    assert len(scores) == 32 and len(set(scores)) == 1


def test_if_scores_name_the_rm_that_gave_s() -> None:
    from fabrika.rewards.instruct import IFRewardConfig, score_if

    rm = get_reward_model("sim")
    (score,) = score_if([PROMPT], ["Кот спит."], IFRewardConfig(), rm_scorer=rm,
                        constraints=[[{"id": "ru.punct.no_commas", "params": {}}]], teacher_rm_mean=[-5.0])
    assert score.rm_id == SIM_RM_ID and score.s == rm([PROMPT], ["Кот спит."])[0] and score.reward == 2.0
