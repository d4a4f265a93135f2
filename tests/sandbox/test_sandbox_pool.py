"""SandboxPool API and verdict kinds: what other packages rely on."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from pydantic import ValidationError

from fabrika.errors import SandboxError
from fabrika.sandbox import ERROR_KINDS, SandboxConfig, SandboxPool, Verdict, precheck

YES = "import re\n\ndef evaluate(response):\n    return bool(re.search(r'\\bда\\b', response))\n"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(SandboxConfig(workers=2, timeout_s=0.5)) as p:
        yield p


def statuses(verdicts: list[Verdict]) -> list[str]:
    return [v.status if v.status != "error" else f"error:{v.error_kind}" for v in verdicts]


def test_true_false_in_order(pool):
    verdicts = pool.run_sync(YES, ["да", "нет", "ну да", "данные"])
    assert [v.value for v in verdicts] == [True, False, True, False]
    assert [v.passed for v in verdicts] == [True, False, True, False]


def test_isolation_is_reported(pool):
    assert pool.isolation in ("bwrap", "rlimits")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("def evaluate(r):\n    return 1\n", "non_bool"),
        ("def evaluate(r):\n    return 'True'\n", "non_bool"),
        ("def evaluate(r):\n    return None\n", "non_bool"),
        ("def evaluate(r):\n    return r[100]\n", "exception"),
        ("def evaluate(r)\n    return True\n", "syntax"),
        ("def check(r):\n    return True\n", "no_function"),
        ("evaluate = 5\n", "no_function"),
        ("import os\ndef evaluate(r):\n    return True\n", "precheck"),
        ("x = 1 / 0\ndef evaluate(r):\n    return True\n", "exception"),
        ("def evaluate(r):\n    raise SystemExit(3)\n", "exception"),
        ("def evaluate(r):\n    raise KeyboardInterrupt\n", "exception"),
        ("def evaluate(r):\n    x = 'a' * (2 ** 40)\n    return True\n", "memory"),
    ],
)
def test_broken_verifiers_become_error_verdicts(pool, code, kind):
    verdicts = pool.run_sync(code, ["да", "нет"])
    assert statuses(verdicts) == [f"error:{kind}"] * 2
    assert all(v.value is None and not v.passed and v.message for v in verdicts)
    assert kind in ERROR_KINDS


def test_exception_message_names_type(pool):
    [v] = pool.run_sync("def evaluate(r):\n    raise ValueError('плохой ответ')\n", ["x"])
    assert v.error_kind == "exception" and v.message == "ValueError: плохой ответ"


def test_timeout_on_one_response_keeps_the_others(pool):
    code = "def evaluate(r):\n    while r == 'стоп':\n        pass\n    return r == 'да'\n"
    verdicts = pool.run_sync(code, ["да", "стоп", "нет", "стоп", "да"])
    assert statuses(verdicts) == ["true", "timeout", "false", "timeout", "true"]
    assert "evaluate used up its CPU budget" in verdicts[1].message


def test_module_body_hang_costs_one_timeout_not_n(pool):
    verdicts = pool.run_sync("while True:\n    pass\ndef evaluate(r):\n    return True\n", ["a"] * 20)
    assert statuses(verdicts) == ["timeout"] * 20
    # one module-body timeout answered all 20 (no evaluate ever ran, no second child was started)
    assert {v.message for v in verdicts} == {verdicts[0].message} and verdicts[0].message.startswith("module body")


def test_json_responses_and_empty_batch(pool):
    code = "def evaluate(r):\n    return r['n'] > 2 and isinstance(r['t'], list)\n"
    assert statuses(pool.run_sync(code, [{"n": 3, "t": []}, {"n": 1, "t": []}])) == ["true", "false"]
    assert pool.run_sync(code, []) == []


def test_unserialisable_response_is_a_clear_caller_error(pool):
    with pytest.raises(SandboxError, match="JSON-serialisable"):
        pool.run_sync(YES, [object()])
    assert [v.value for v in pool.run_sync(YES, ["да"])] == [True]


def test_allowed_russian_libraries_work(pool):
    code = (
        "import razdel, pymorphy3\n"
        "def evaluate(r):\n"
        "    morph = pymorphy3.MorphAnalyzer()\n"
        "    words = [t.text for t in razdel.tokenize(r)]\n"
        "    return any(morph.parse(w)[0].tag.POS == 'VERB' for w in words)\n"
    )
    assert statuses(pool.run_sync(code, ["Кот бежит домой.", "Красивый синий дом."])) == ["true", "false"]


def test_batches_split_across_workers_keep_order():
    with SandboxPool(SandboxConfig(workers=2, batch_size=7)) as p:
        responses = [f"{'да' if i % 3 == 0 else 'нет'} {i}" for i in range(50)]
        assert [v.value for v in p.run_sync(YES, responses)] == [i % 3 == 0 for i in range(50)]


def test_recycle_after_respawns_workers():
    with SandboxPool(SandboxConfig(workers=1, recycle_after=5)) as p:
        for _ in range(4):
            assert [v.value for v in p.run_sync(YES, ["да", "нет", "да"])] == [True, False, True]
        # 12 responses at one recycle per >=5 served: started, recycled after 6 and 12 -> 2 starts
        assert p.stats["spawned"] == 2


async def test_async_concurrent_runs(pool):
    codes = [f"def evaluate(r):\n    return len(r) == {n}\n" for n in range(6)]
    results = await asyncio.gather(*(pool.run(code, ["", "a", "aa", "aaa", "aaaa", "aaaaa"]) for code in codes))
    for n, verdicts in enumerate(results):
        assert [v.value for v in verdicts] == [i == n for i in range(6)]


async def test_async_context_manager():
    async with SandboxPool(SandboxConfig(workers=1)) as p:
        assert [v.value for v in await p.run(YES, ["да"])] == [True]
    with pytest.raises(SandboxError, match="closed"):
        await p.run(YES, ["да"])


def test_config_forbids_unknown_fields_and_bad_values():
    with pytest.raises(ValidationError):
        SandboxConfig(workerz=2)
    with pytest.raises(ValidationError):
        SandboxConfig(timeout_s=0)
    assert SandboxConfig().timeout_s == 1.0 and SandboxConfig().recycle_after == 100_000


def test_rlimits_fallback_pool_works_and_limits_hold():
    # precheck=False: the allow-list would refuse the fork chain below; the rlimits must hold alone
    with SandboxPool(SandboxConfig(workers=1, isolation="rlimits", timeout_s=0.5, precheck=False)) as p:
        assert p.isolation == "rlimits"
        assert [v.value for v in p.run_sync(YES, ["да", "нет"])] == [True, False]
        assert statuses(p.run_sync("def evaluate(r):\n    while True:\n        pass\n", ["x"])) == ["timeout"]
        bomb = "def evaluate(r):\n    x = bytearray(2 ** 33)\n    return True\n"
        assert statuses(p.run_sync(bomb, ["x"])) == ["error:memory"]
        fork = "import pymorphy3\nos = pymorphy3.analyzer.os\ndef evaluate(r):\n    os.fork()\n    return True\n"
        assert statuses(p.run_sync(fork, ["x"])) == ["error:exception"]  # RLIMIT_NPROC holds (uid nobody)
        morph = "import pymorphy3\ndef evaluate(r):\n    return pymorphy3.MorphAnalyzer().parse(r)[0].tag.POS == 'VERB'\n"
        assert statuses(p.run_sync(morph, ["бежит", "дом"])) == ["true", "false"]
        assert [v.value for v in p.run_sync(YES, ["да"])] == [True]


def test_precheck_reports_problems():
    assert precheck(YES) == []
    problems = precheck("import os, subprocess\nfrom socket import socket\ndef evaluate(r):\n"
                        "    return eval(r).__class__ and getattr(r, 'x')\n")
    text = "\n".join(problems)
    for needle in ("'os'", "'subprocess'", "'socket'", "'eval'", "'__class__'", "'getattr'"):
        assert needle in text
    assert precheck("import re\nre.search = None\ndef evaluate(r):\n    return True\n")
    assert precheck("def evaluate(r):\n    return r.gi_frame\n")
    assert precheck("def evaluate(r):\n    return type('X', (), {})\n")
    assert precheck("from re import *\ndef evaluate(r):\n    return True\n")
    assert precheck("def evaluate(r)\n    return True\n") == []  # syntax is the worker's verdict


def test_workers_that_cannot_start_fail_at_construction(monkeypatch):
    import fabrika.sandbox.pool as pool_module

    monkeypatch.setattr(pool_module, "worker_command", lambda isolation, cfg: ["/bin/false"])
    with pytest.raises(SandboxError, match="self-test"):
        SandboxPool(SandboxConfig(workers=1, isolation="rlimits"))


def test_worker_that_died_between_batches_is_replaced_transparently():
    with SandboxPool(SandboxConfig(workers=1)) as p:
        assert [v.value for v in p.run_sync(YES, ["да"])] == [True]
        worker = p._workers[0]
        os.killpg(worker.proc.pid, signal.SIGKILL)  # e.g. the RLIMIT_CPU backstop fired while idle
        worker.proc.wait()
        assert [v.value for v in p.run_sync(YES, ["да", "нет"])] == [True, False]


async def test_concurrent_runs_mixing_hangs_crashes_and_normal_code():
    hang = "def evaluate(r):\n    while r == 'h':\n        pass\n    return r == 'да'\n"
    crash = "import json\ndef evaluate(r):\n    if r == 'c':\n        raise MemoryError\n    return r == 'да'\n"
    jobs = []
    for i in range(30):
        code = (hang, crash, YES)[i % 3]
        responses = ["да", "h" if code is hang else "c" if code is crash else "нет", "да"]
        jobs.append((code, responses))
    async with SandboxPool(SandboxConfig(workers=2, timeout_s=0.3, batch_size=2)) as p:
        results = await asyncio.gather(*(p.run(code, responses) for code, responses in jobs))
    for (code, _), verdicts in zip(jobs, results):
        middle = "timeout" if code is hang else "error:memory" if code is crash else "false"
        assert statuses(verdicts) == ["true", middle, "true"]


def test_a_worker_that_exits_before_reading_still_fails_the_self_test(monkeypatch):
    """The race behind a flaky CI run: the worker closes its pipe before the request is written."""
    import fabrika.sandbox.pool as pool_module

    def gone(self, worker, code, responses):
        raise SandboxError("sandbox worker dies before reading its request: [Errno 32] Broken pipe")

    monkeypatch.setattr(pool_module.SandboxPool, "_run_batch", gone)
    with pytest.raises(SandboxError, match="fail their self-test: sandbox worker dies before reading"):
        SandboxPool(SandboxConfig(workers=1, isolation="rlimits"))
