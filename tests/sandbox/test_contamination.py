"""Contamination corpus: a verifier that edits shared state must not change any later verdict.

Each attack below succeeds *inside its own process* (most report the edit took hold by
returning True) using state every later verifier relies on: library tables, caches,
interpreter hooks, signals, timers, threads, atexit, the reply stream, the worker's own
code. After each, a suite of honest victim verifiers runs on the SAME one-worker pool
and its verdicts must equal those computed in this (untouched) test process — in
bubblewrap mode and in the opted-in rlimits mode, with the pre-check on (default) and
off (the pre-check is a lint: the process boundary must hold without it).
"""

from __future__ import annotations

import os
import time

import pytest

from fabrika.sandbox import SandboxConfig, SandboxPool, precheck
from tests.sandbox.conftest import require_bwrap

# -- honest victims ------------------------------------------------------------------------

VICTIMS = {
    "razdel_three_sentences": (
        "import razdel\n"
        "def evaluate(response):\n"
        "    return len(list(razdel.sentenize(response))) == 3\n"
    ),
    "pymorphy3_has_verb": (
        "import razdel, pymorphy3\n"
        "def evaluate(response):\n"
        "    morph = pymorphy3.MorphAnalyzer()\n"
        "    words = [t.text for t in razdel.tokenize(response) if t.text.isalpha()]\n"
        "    return any(morph.parse(w)[0].tag.POS == 'VERB' for w in words)\n"
    ),
    "re_word_da": (
        "import re\n"
        "def evaluate(response):\n"
        "    return bool(re.search(r'\\bда\\b', response.lower()))\n"
    ),
    "json_object_with_answer": (
        "import json\n"
        "def evaluate(response):\n"
        "    try:\n"
        "        data = json.loads(response)\n"
        "    except ValueError:\n"
        "        return False\n"
        "    return isinstance(data, dict) and 'ответ' in data\n"
    ),
    "functools_total_length": (
        "import functools\n"
        "def evaluate(response):\n"
        "    return functools.reduce(lambda a, b: a + b, [len(w) for w in response.split()], 0) > 20\n"
    ),
    "recursive_depth": (
        "def depth(text, i=0):\n"
        "    return i if i >= len(text) else depth(text, i + 1)\n"
        "def evaluate(response):\n"
        "    return depth(response[:200]) == min(len(response), 200) and len(response) > 10\n"
    ),
}

RESPONSES = [
    "Да. Кот бежит домой. Всё хорошо.",
    "Красивый синий дом",
    '{"ответ": "да"}',
    '{"вопрос": 1}',
    "Нет, я не знаю. Совсем. Правда!",
    "Мы читаем длинную книгу о приключениях моряков",
    "да",
]


def reference() -> dict[str, list[bool]]:
    """The victims' verdicts computed here, in a process no attack has touched."""
    out = {}
    for name, code in VICTIMS.items():
        ns: dict = {}
        exec(code, ns)  # noqa: S102 - trusted victim code, the reference
        out[name] = [ns["evaluate"](r) for r in RESPONSES]
    return out


EXPECTED = reference()

# -- attacks -------------------------------------------------------------------------------


def fn(body: str) -> str:
    return "def evaluate(r):\n" + "".join(f"    {line}\n" for line in body.splitlines())


GC_FIND = (
    "import gc\n"
    "def find(pred):\n"
    "    return [o for o in gc.get_objects() if pred(o)]\n"
)

# (id, code, verdicts the attack may get). "true" = the edit took hold in the attacker's
# own process; the other kinds are the ways isolation stops it earlier.
ATTACKS: list[tuple[str, str, set[str]]] = [
    # Passed wave 2's deny-list; the allow-list refuses both (razdel.rule, .dictionary).
    ("razdel_rules_join_everything", "import razdel\nfrom razdel.rule import FunctionRule, JOIN\n" + fn(
        "razdel.sentenize.rules.insert(0, FunctionRule(lambda split: JOIN))\n"
        "return len(list(razdel.sentenize('Раз. Два. Три.'))) == 1"), {"true", "error:precheck"}),
    ("pymorphy3_gramtab_through_alias", "import pymorphy3\n" + fn(
        "morph = pymorphy3.MorphAnalyzer()\ntab = morph.dictionary.gramtab\nverb = morph.parse('бежит')[0].tag\n"
        "for i in range(len(tab)):\n    tab[i] = verb\nreturn morph.parse('дом')[0].tag.POS == 'VERB'"), {"true", "error:precheck"}),
    ("re_compiled_pattern_cache", "import re\n" + fn(
        "re._cache.clear()\n"
        "re._cache[(str, r'\\bда\\b', 0)] = re.compile(r'(?!)')\n"
        "re._cache[(str, r'[а-яё]', 0)] = re.compile(r'.')\n"
        "return re.search(r'\\bда\\b', 'да') is None"), {"true", "error:precheck"}),
    ("functools_reduce_replaced", "import functools\n" + fn(
        "functools.reduce = lambda *a, **k: 0\nreturn functools.reduce(max, [5]) == 0"), {"true", "error:precheck"}),
    ("json_decoder_rewrites_requests", "import json\n" + fn(
        "json.JSONDecoder.decode = lambda self, s, *a: {'code': 'def evaluate(r):\\n    return True\\n', "
        "'responses': [], 'guard': False, 'nonce': '', 'ответ': 1}\n"
        "return json.loads('[]')['ответ'] == 1"), {"true", "error:precheck"}),
    ("sys_settrace_raises_in_evaluate", "import sys, threading\n" + fn(
        "def tracer(frame, event, arg):\n    if frame.f_code.co_name in ('evaluate', 'depth'):\n"
        "        raise RuntimeError('traced')\n    return None\n"
        "sys.settrace(tracer)\nthreading.settrace(tracer)\nreturn True"), {"true", "error:precheck"}),
    ("sys_setprofile_raises", "import sys\n" + fn(
        "def prof(frame, event, arg):\n    if event == 'call' and frame.f_code.co_name != 'prof':\n"
        "        raise RuntimeError('profiled')\n"
        "sys.setprofile(prof)\nreturn True"), {"true", "error:precheck", "error:exception", "error:crash"}),
    ("sigalrm_timer_fires_later", "import signal\n" + fn(
        "def boom(*a):\n    raise KeyboardInterrupt('late alarm')\n"
        "signal.signal(signal.SIGALRM, boom)\nsignal.setitimer(signal.ITIMER_REAL, 0.05, 0.02)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nreturn True"), {"true", "error:precheck"}),
    ("thread_left_running_patches_re", "import threading, time, re\n" + fn(
        "def later():\n    time.sleep(0.05)\n    re.search = lambda *a, **k: None\n    import builtins\n"
        "    builtins.len = lambda x: 0\n"
        "threading.Thread(target=later, daemon=True).start()\nreturn True"),
     {"true", "error:precheck", "error:exception"}),  # RLIMIT_NPROC=1 usually refuses the thread
    ("atexit_forges_replies", "import atexit, os\n" + fn(
        "atexit.register(lambda: [os.write(fd, b'T\\n' * 64 + b'D\\n') for fd in range(3, 64) "
        "if os.path.exists(f'/proc/self/fd/{fd}')])\nreturn True"), {"true", "error:precheck"}),
    ("reply_stream_forgery_with_nonce", GC_FIND + "import os\n" + fn(
        "reqs = find(lambda o: isinstance(o, dict) and 'nonce' in o and 'code' in o)\n"
        "nonce = reqs[0]['nonce'].encode() if reqs else b''\n"
        "forged = (nonce + b'T\\n') * 200 + nonce + b'D\\n' + b'T\\n' * 50\n"
        "for fd in range(3, 256):\n    try:\n        os.write(fd, forged)\n    except OSError:\n        pass\n"
        "return True"), {"error:protocol", "error:precheck", "true"}),  # "true": it forged only its own verdict
    ("own_code_objects_overwritten", GC_FIND + fn(
        "always = (lambda f, x: b'T\\n').__code__\n"
        "for f in find(lambda o: type(o).__name__ == 'function' and o.__name__ in "
        "('_call', '_checked_error', '_parse_reply', '_run_batch', '_guarded_import')):\n"
        "    f.__code__ = always if f.__code__.co_argcount == 2 else f.__code__\n"
        "return True"), {"true", "error:precheck"}),
    ("safe_builtins_and_builtins_patched", GC_FIND + "import builtins\n" + fn(
        "for d in find(lambda o: isinstance(o, dict) and 'abs' in o and 'isinstance' in o):\n"
        "    d['len'] = lambda x: 0\n    d['isinstance'] = lambda a, b: False\n"
        "builtins.len = lambda x: 0\nreturn True"), {"true", "error:precheck"}),
    ("sys_modules_swapped", "import sys\n" + fn(
        "sys.modules['re'] = sys.modules['json']\nsys.modules['razdel'] = sys.modules['json']\nreturn True"),
     {"true", "error:precheck"}),
    ("recursion_limit_lowered", "import sys\n" + fn("sys.setrecursionlimit(40)\nreturn True"),
     {"true", "error:precheck"}),
    ("zygote_stopped_or_killed", "import os, signal\n" + fn(
        "os.kill(os.getppid(), signal.SIGSTOP)\nos.kill(os.getppid(), signal.SIGKILL)\nreturn True"),
     {"error:exception", "error:precheck", "error:crash"}),
    ("zygote_memory_through_proc", "import os\n" + fn(
        "with open(f'/proc/{os.getppid()}/mem', 'r+b') as mem:\n    mem.write(b'x')\nreturn True"),
     {"error:exception", "error:precheck"}),
    ("environ_and_locale", "import os, locale\n" + fn(
        "os.environ['LANG'] = 'tr_TR.UTF-8'\nos.environ['PYTHONHASHSEED'] = '1'\n"
        "locale.setlocale(locale.LC_ALL, 'C')\nreturn True"), {"true", "error:precheck"}),
    ("fill_scratch_and_lock_it", "import os\n" + fn(
        "os.makedirs('d/e', exist_ok=True)\nopen('d/e/big', 'wb').write(b'x' * 2 ** 19)\n"
        "os.symlink('/etc/passwd', 'link')\nos.chmod('d', 0)\nreturn True"),
     {"true", "error:precheck", "error:exception"}),  # the cwd: bwrap's scratch /tmp; rlimits: / (refused)
    # The bypass of the old pre-check: update_wrapper copies a worker function's globals
    # (pymorphy3.MorphAnalyzer is the worker's shared_analyzer) into the verifier's namespace.
    ("update_wrapper_reaches_worker_globals", "import functools, pymorphy3\n" + fn(
        "box = lambda: None\n"
        "functools.update_wrapper(box, pymorphy3.MorphAnalyzer, assigned=(), updated=['__globals__'])\n"
        "g = box.__globals__\n"
        "g['_call'].__code__ = (lambda f, x: b'T\\n').__code__\n"
        "g['json'].JSONDecoder.decode = lambda self, s, *a: {}\n"
        "return '_REAL_IMPORT' in g"), {"true", "error:precheck", "error:exception"}),
]
DEFERRED = {"sigalrm_timer_fires_later", "thread_left_running_patches_re"}
#: With the pre-check off these must report "true": proof that the edit really happened.
MAY_BE_STOPPED_EARLY = {"thread_left_running_patches_re", "sys_setprofile_raises", "reply_stream_forgery_with_nonce",
                        "fill_scratch_and_lock_it"}
TAKES_HOLD = {name for name, _, allowed in ATTACKS if "true" in allowed} - MAY_BE_STOPPED_EARLY


def status(v) -> str:
    return v.status if v.status != "error" else f"error:{v.error_kind}"


MODES = [("bwrap", True), ("bwrap", False), ("rlimits", True), ("rlimits", False)]


@pytest.fixture(scope="module", params=MODES, ids=[f"{m}-precheck_{'on' if c else 'off'}" for m, c in MODES])
def pool(request):
    isolation, check = request.param
    if isolation == "bwrap":
        require_bwrap()
    with SandboxPool(SandboxConfig(workers=1, timeout_s=1.0, isolation=isolation, precheck=check)) as p:
        assert p.isolation == isolation
        p.checked = check
        yield p


def assert_victims_exact(pool) -> None:
    for name, code in VICTIMS.items():
        verdicts = pool.run_sync(code, RESPONSES)
        assert [status(v) for v in verdicts] == [str(x).lower() for x in EXPECTED[name]], (name, verdicts)


def test_reference_verdicts_are_mixed():
    """The victims can tell a poisoned library from a clean one: each has True and False."""
    for name, values in EXPECTED.items():
        assert True in values and False in values, name


@pytest.mark.parametrize(("name", "code", "allowed"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_no_verifier_changes_a_later_verdict(pool, name, code, allowed):
    verdicts = pool.run_sync(code, ["Раз. Два. Три."])
    got = status(verdicts[0])
    assert got in allowed, (name, verdicts)
    if not pool.checked:
        assert got != "error:precheck"
        if name in TAKES_HOLD:
            assert got == "true", f"{name}: the attack must really take hold in its own process: {verdicts}"
    assert_victims_exact(pool)
    if name in DEFERRED:
        time.sleep(0.3)  # a timer or thread of the attacker would have fired by now
        assert_victims_exact(pool)


def test_the_allow_list_refuses_the_library_table_edits():
    """Wave 2's deny-list let these two through (allowed imports only); the allow-list names
    neither ``razdel.rule`` nor ``.dictionary``. They still run with the pre-check off."""
    for name, code, _ in ATTACKS[:2]:
        assert precheck(code), name


def test_the_update_wrapper_bypass_is_refused_by_the_precheck():
    code = dict((a[0], a[1]) for a in ATTACKS)["update_wrapper_reaches_worker_globals"]
    problems = "\n".join(precheck(code))
    assert "update_wrapper" in problems and "__globals__" in problems
    assert precheck("from functools import wraps\ndef evaluate(r):\n    return True\n")
    assert precheck("def evaluate(r):\n    return '{0.__class__}'.format(r) != ''\n")
    assert precheck("import re\ndef evaluate(r):\n    return bool(re.search(r'__(.+?)__', r))\n") == []


def test_corpus_size():
    assert len(ATTACKS) >= 12


def test_scratch_is_empty_for_the_next_verifier():
    require_bwrap()
    with SandboxPool(SandboxConfig(workers=1, precheck=False)) as p:
        write = fn("open('/tmp/left_behind', 'w').write('x')\nopen('/tmp/fill', 'wb').write(b'x' * 2 ** 19)\n"
                   "return True")
        assert [status(v) for v in p.run_sync(write, ["a"])] == ["true"]
        look = "import os\n" + fn("return os.listdir('/tmp') == []")
        assert [status(v) for v in p.run_sync(look, ["a"])] == ["true"]


def test_each_batch_runs_in_a_fresh_process():
    with SandboxPool(SandboxConfig(workers=1, isolation="rlimits", precheck=False)) as p:
        code = "import os\n" + fn("return os.getpid() > 0 and print(os.getpid()) is None")
        pid_code = "import os\n" + fn("raise ValueError(str(os.getpid()))")
        pids = {p.run_sync(pid_code, ["a"])[0].message for _ in range(3)}
        assert len(pids) == 3
        assert p.stats["spawned"] == 1  # ...all forked from one zygote
        assert p.run_sync(code, ["a"])[0].status == "true"


@pytest.mark.skipif(os.getuid() != 0, reason="a uid can only be dropped by root; documented in the sandbox docs")
def test_rlimits_children_never_keep_the_invoking_uid():
    with SandboxPool(SandboxConfig(workers=1, isolation="rlimits", precheck=False)) as p:
        code = "import os\n" + fn(f"return os.getuid() != {os.getuid()} and os.geteuid() != {os.getuid()} "
                                  "and os.getgroups() == []")
        assert [status(v) for v in p.run_sync(code, ["a", "b"])] == ["true", "true"]


@pytest.mark.skipif(os.getuid() != 0, reason="a uid can only be dropped by root; documented in the sandbox docs")
def test_rlimits_children_cannot_touch_the_invoking_users_things(tmp_path):
    """What the old rlimits fallback allowed: the parent's environment, private files, the
    run's files, signals to the pipeline. A child with a uid of its own gets none of it."""
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY", encoding="utf-8")
    secret.chmod(0o600)
    dataset = tmp_path / "data.jsonl"
    dataset.write_text("{}\n", encoding="utf-8")
    dataset.chmod(0o644)
    me = os.getpid()
    os.environ["FABRIKA_TEST_API_KEY"] = "sk-secret"
    attacks = {
        "environ": f"return 'sk-secret' in open('/proc/{me}/environ', 'rb').read().decode('latin-1')",
        "private_file": f"return open({str(secret)!r}).read() == 'PRIVATE KEY'",
        "append_dataset": f"open({str(dataset)!r}, 'a').write('poison\\n')\nreturn True",
        "kill_pipeline": f"import os, signal\nos.kill({me}, signal.SIGTERM)\nreturn True",
        "cwd_write": f"open({str(tmp_path / 'dropped')!r}, 'w').write('x')\nreturn True",
    }
    with SandboxPool(SandboxConfig(workers=1, isolation="rlimits", precheck=False)) as p:
        for name, body in attacks.items():
            [verdict] = p.run_sync(fn(body), ["x"])
            assert status(verdict) == "error:exception", (name, verdict)
            assert "Permission" in (verdict.message or "") or "Errno 1" in (verdict.message or ""), (name, verdict)
    assert dataset.read_text(encoding="utf-8") == "{}\n" and not (tmp_path / "dropped").exists()


@pytest.mark.parametrize("isolation", ["bwrap", "rlimits"])
def test_a_child_holds_only_its_own_pipes(isolation):
    """No fd of the parent's pipe, the request stream or an earlier child's pipe reaches a verifier."""
    if isolation == "bwrap":
        require_bwrap()
    with SandboxPool(SandboxConfig(workers=1, isolation=isolation, precheck=False)) as p:
        code = "import os\n" + fn("raise ValueError(' '.join(sorted(os.listdir('/proc/self/fd'), key=int)))")
        for _ in range(3):  # also after earlier children (and a timeout) came and went
            p.run_sync("def evaluate(r):\n    while r == 'h':\n        pass\n    return True\n", ["a", "h", "b"])
            [verdict] = p.run_sync(code, ["x"])
            fds = [int(x) for x in verdict.message.split(": ", 1)[1].split()]
            assert fds[:3] == [0, 1, 2] and len(fds) <= 6, fds  # + its two pipes + listdir's own fd
