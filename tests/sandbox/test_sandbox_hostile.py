"""Hostile verifier corpus: each attack is contained, gets an error/timeout verdict, and
the pool keeps serving correct verdicts afterwards.

Most attacks reach ``os``, ``builtins`` or ``importlib`` through attributes of allowed
modules. Wave 2's deny-list let them past the static pre-check; the wave-3 allow-list
refuses them all (asserted below), so each also runs with the pre-check OFF, where the
runtime isolation (bubblewrap namespaces, rlimits, uid drop, wall-clock kill) is what
is really tested. Attacks report success by returning True and fail
by raising, so an error verdict means the attack did not work; the host is then
checked for the side effect itself.
"""

from __future__ import annotations

import os
import select
import socket
import time
from pathlib import Path

import psutil
import pytest

from fabrika.sandbox import SandboxConfig, SandboxPool, precheck
from fabrika.sandbox.isolation import SANDBOX_UID_BASE, SANDBOX_UID_SPAN
from tests.sandbox.conftest import require_bwrap

REPO = Path(__file__).resolve().parents[2]
YES = "import re\n\ndef evaluate(response):\n    return bool(re.search(r'\\bда\\b', response))\n"
os.environ["FABRIKA_SANDBOX_SECRET"] = "s3cret"

# Ways to reach forbidden modules through allowed ones, without dunders or private names.
OS = "import pymorphy3\nos = pymorphy3.analyzer.os\n"
B = "import json\nB = json.codecs.builtins\n"
IMP = "import pymorphy3\nimp = pymorphy3.units.base.inspect.importlib.import_module\n"


def fn(body: str) -> str:
    return "def evaluate(r):\n" + "".join(f"    {line}\n" for line in body.splitlines())


# (id, code template, allowed verdicts). Templates see {target} (a host path that must
# not appear), {repo_target}, {port} (a host listener that must see no connection).
CASES: list[tuple[str, str, set[str]]] = [
    ("bare_except_loop", fn("while True:\n    try:\n        while True:\n            pass\n    except:\n        pass"), {"timeout"}),
    ("sigalrm_ignored", IMP + "signal = imp('signal')\n" + fn(
        "signal.signal(signal.SIGALRM, lambda *a: None)\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "signal.alarm(1)\nwhile True:\n    pass"), {"timeout"}),
    ("fork_bomb", OS + fn("while True:\n    os.fork()"), {"error:exception"}),
    ("memory_bomb_at_once", fn("return len('x' * 2 ** 40) > 0"), {"error:memory"}),
    ("memory_bomb_gradual", fn("a = []\nwhile True:\n    a.append(bytearray(10 ** 7))"), {"error:memory", "timeout"}),
    ("write_host_file", B + fn("f = B.open({target!r}, 'w')\nf.write('pwned')\nf.close()\nreturn True"), {"error:exception"}),
    ("write_repo_file", B + fn("B.open({repo_target!r}, 'w').write('pwned')\nreturn True"), {"error:exception"}),
    ("read_etc_passwd", B + fn("return 'root' in B.open('/etc/passwd').read()"), {"error:exception"}),
    ("read_repo_source", B + fn(f"return len(B.open({str(REPO / 'fabrika/sandbox/pool.py')!r}).read()) > 0"), {"error:exception"}),
    ("read_host_env_secret", OS + fn("return os.environ['FABRIKA_SANDBOX_SECRET'] == 's3cret'"), {"error:exception"}),
    ("socket_host_loopback", IMP + "socket = imp('socket')\n" + fn(
        "s = socket.create_connection(('127.0.0.1', {port}), timeout=0.3)\ns.sendall(b'pwned')\nreturn True"), {"error:exception"}),
    ("socket_internet", IMP + "socket = imp('socket')\n" + fn(
        "socket.create_connection(('1.1.1.1', 53), timeout=0.3)\nreturn True"), {"error:exception"}),
    ("os_system", OS + fn("assert os.system('touch {target}') == 0\nreturn True"), {"error:exception"}),
    ("subprocess_run", IMP + "sp = imp('subprocess')\n" + fn("sp.run(['/usr/bin/touch', {target!r}], check=True)\nreturn True"),
     {"error:exception"}),
    ("ctypes_libc_system", IMP + "ctypes = imp('ctypes')\n" + fn("assert ctypes.CDLL(None).system(b'touch {target}') == 0\nreturn True"),
     {"error:exception"}),
    ("ctypes_segfault", IMP + "ctypes = imp('ctypes')\n" + fn("ctypes.string_at(0)\nreturn True"), {"error:crash"}),
    ("builtins_eval_import", B + fn("assert B.eval(\"__import__('os').system('touch {target}')\") == 0\nreturn True"), {"error:exception"}),
    ("builtins_exec_open", B + fn("B.exec(\"open({target!r}, 'w').write('x')\")\nreturn True"), {"error:exception"}),
    ("frame_walk_real_import", B + "import pymorphy3\ninspect = pymorphy3.units.base.inspect\n" + fn(
        "g = B.getattr(B.getattr(inspect.currentframe(), 'f_back'), 'f_globals')\n"
        "real_os = g['_REAL_IMPORT']('os')\nreal_os.mkdir({target!r})\nreturn True"), {"error:exception"}),
    ("deep_recursion", "def f(n):\n    return f(n + 1)\n" + fn("return f(0)"), {"error:exception"}),
    ("deep_recursion_raised_limit", "import json\ndef f(n):\n    return f(n + 1)\n" + fn(
        "json.codecs.sys.setrecursionlimit(10 ** 8)\nreturn f(0)"), {"error:crash", "error:memory", "error:exception", "timeout"}),
    ("catastrophic_regex", "import re\n" + fn("return bool(re.match(r'(a+)+$', 'a' * 64 + 'b'))"), {"timeout"}),
    ("thread_outliving_call", "import pymorphy3\nthreading = pymorphy3.analyzer.threading\n" + fn(
        "threading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()\nreturn True"), {"error:exception"}),
    ("print_forever", fn("while True:\n    print('x' * 10 ** 6)"), {"timeout"}),
    # A child has a uid of its own, so kill(-1) may find no process to signal ("true"); the
    # pool, the parent and the next verdicts surviving is what run_attack checks.
    ("kill_every_process", OS + fn("os.kill(-1, 9)\nreturn True"), {"error:crash", "error:exception", "true"}),
    ("kill_parent", OS + fn("os.kill(os.getppid(), 9)\nreturn True"), {"error:exception", "error:crash"}),
    ("os_exit", OS + B + fn("B.getattr(os, '_exit')(0)\nreturn True"), {"error:crash"}),
    ("garbage_on_reply_pipe", OS + fn("for fd in range(3, 64):\n    try:\n        os.write(fd, b'\\x00garbage' * 20000)\n"
                                      "    except OSError:\n        pass\nreturn True"), {"error:protocol"}),
    ("setuid_root", OS + fn("os.setuid(0)\nreturn True"), {"error:exception"}),
    ("raise_rlimit", IMP + "resource = imp('resource')\n" + fn(
        "resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\nreturn True"), {"error:exception"}),
    ("big_file_in_scratch", B + fn("B.open('/tmp/big', 'wb').write(b'x' * 8 * 2 ** 20)\nreturn True"), {"error:exception"}),
    ("chroot", OS + fn("os.chroot('/tmp')\nreturn True"), {"error:exception"}),
    ("sysrq_trigger", B + fn("B.open('/proc/sysrq-trigger', 'w').write('b')\nreturn True"), {"error:exception"}),
    ("precheck_dunder_builtins", fn("return __builtins__['__import__']('os').system('true') == 0"), {"error:precheck"}),
    ("precheck_class_mro", fn("return ().__class__.__mro__[1].__subclasses__() != []"), {"error:precheck"}),
]
PRECHECKED = {"precheck_dunder_builtins", "precheck_class_mro"}

# Attacks that *succeed in-process* (they are just code) but must not leak into later
# verifiers: the worker's taint check recycles the process.
TAMPERING = [
    ("sys_modules_swap", "import json\nmods = json.codecs.sys.modules\n" + fn("mods['re'] = mods['json']\nreturn True")),
    ("monkeypatch_re_search", "import re\n" + B + fn("B.setattr(re, 'search', lambda *a, **k: True)\nreturn True")),
    ("gc_patch_worker_globals", IMP + "gc = imp('gc')\n" + fn(
        "for o in gc.get_objects():\n    if isinstance(o, dict) and '_call' in o and '_prepare' in o:\n"
        "        o['_call'] = lambda f, x: b'T\\n'\nreturn True")),
    ("lower_recursion_limit", "import json\n" + fn("json.codecs.sys.setrecursionlimit(30)\nreturn True")),
    ("patch_safe_builtins", IMP + "gc = imp('gc')\n" + fn(
        "for o in gc.get_objects():\n    if isinstance(o, dict) and 'abs' in o and 'open' not in o:\n"
        "        o['len'] = lambda x: 0\nreturn True")),
]

# With the pre-check OFF (test-only flag), plain attacks must still be contained.
UNCHECKED = [
    ("plain_os_system", "import os\n" + fn("assert os.system('touch {target}') == 0\nreturn True"), {"error:exception"}),
    ("plain_open_passwd", fn("return 'root' in open('/etc/passwd').read()"), {"error:exception"}),
    ("dunder_import_socket", fn("s = __builtins__.__import__('socket').create_connection(('127.0.0.1', {port}), timeout=0.3)\nreturn True"),
     {"error:exception"}),
    ("plain_fork_bomb", "import os\n" + fn("while True:\n    os.fork()"), {"error:exception"}),
    ("plain_write_repo", fn("open({repo_target!r}, 'w').write('x')\nreturn True"), {"error:exception"}),
    ("plain_ctypes_segfault", "import ctypes\n" + fn("ctypes.string_at(0)"), {"error:crash"}),
    ("plain_threads", "import threading\n" + fn("threading.Thread(target=lambda: None).start()\nreturn True"), {"error:exception"}),
]


@pytest.fixture(scope="module")
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def pool():
    require_bwrap()  # the rlimits mode is tested in test_sandbox_pool.py and test_contamination.py
    with SandboxPool(SandboxConfig(workers=2, timeout_s=0.5, isolation="bwrap")) as p:
        yield p


@pytest.fixture(scope="module")
def raw_pool():
    require_bwrap()
    with SandboxPool(SandboxConfig(workers=1, timeout_s=0.5, precheck=False, isolation="bwrap")) as p:
        yield p


def status(v) -> str:
    return v.status if v.status != "error" else f"error:{v.error_kind}"


def _nobody(procs: list[psutil.Process]) -> int:
    count = 0
    for proc in procs:
        try:
            uid = proc.uids().real
            sandboxed = uid == 65534 or SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_SPAN
            count += sandboxed and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass
    return count


def stray_processes() -> int:
    """Sandboxed processes that are not a zygote's own children (forked verifiers, and the spare
    each zygote keeps): anything a verifier started or left behind. Killed children the zygote
    has not reaped yet are its children, so host load (a slow exit) does not count."""
    me = psutil.Process()
    zygotes = {p.pid for p in me.children(recursive=True) if _nobody([p]) == 0 and _name(p).startswith("python")}
    return _nobody([p for p in me.children(recursive=True) if _ppid(p) not in zygotes])


def _name(proc: psutil.Process) -> str:
    """A process may exit between listing and reading /proc/PID/stat: it is then no zygote."""
    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return ""


def _ppid(proc: psutil.Process) -> int:
    try:
        return proc.ppid()
    except psutil.NoSuchProcess:
        return -1


def run_attack(pool, code_template: str, tmp_path: Path, listener: socket.socket):
    target = tmp_path / "pwned"
    repo_target = REPO / f"PWNED_{os.getpid()}"
    code = code_template.format(target=str(target), repo_target=str(repo_target), port=listener.getsockname()[1])
    verdicts = pool.run_sync(code, ["да", "нет"])
    # Host-side containment checks.
    assert not target.exists(), "attack created a file on the host"
    assert not repo_target.exists(), "attack wrote into the repository"
    assert not select.select([listener], [], [], 0)[0], "attack connected to a host listener"
    deadline = time.monotonic() + 30  # a wait for a condition, not a timing bound
    while stray_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stray_processes() == 0, "sandboxed processes outlived the call"
    # The pool still gives correct verdicts.
    assert [v.value for v in pool.run_sync(YES, ["да", "нет", "и да"])] == [True, False, True]
    return verdicts


RUNTIME_CASES = [c for c in CASES if c[0] not in PRECHECKED]


@pytest.mark.parametrize(("name", "code", "allowed"), CASES, ids=[c[0] for c in CASES])
def test_attack_is_contained(pool, listener, tmp_path, name, code, allowed):
    """Default config: pre-check, guarded builtins and module views, then bwrap. The module
    views usually stop a chain early (AttributeError), hence the extra allowed kind."""
    verdicts = run_attack(pool, code, tmp_path, listener)
    guarded = allowed | ({"error:exception"} if name not in PRECHECKED else set()) | {"error:precheck"}
    assert {status(v) for v in verdicts} <= guarded, [(status(v), v.message) for v in verdicts]


@pytest.mark.parametrize(("name", "code", "allowed"), RUNTIME_CASES, ids=[c[0] for c in RUNTIME_CASES])
def test_attack_is_contained_by_isolation_alone(raw_pool, listener, tmp_path, name, code, allowed):
    """precheck=False: no static fence, real builtins and modules; bwrap + rlimits must hold."""
    verdicts = run_attack(raw_pool, code, tmp_path, listener)
    assert {status(v) for v in verdicts} <= allowed, [(status(v), v.message) for v in verdicts]


def test_module_views_cut_the_usual_chains(pool):
    """The allow-list refuses the chains before they run (the worker's module views stay a second fence)."""
    for code in (OS + fn("return os.getpid() > 0"), B + fn("return B.len('x') == 1"),
                 IMP + fn("return imp('os') is not None"), "import json\n" + fn("return json.codecs.sys is not None")):
        [verdict] = pool.run_sync(code, ["x"])
        assert verdict.error_kind == "precheck" and "is not allowed" in verdict.message, verdict


def test_the_allow_list_refuses_every_attack():
    """Wave 2's deny-list let most of this corpus through; the allow-list refuses every attack that
    reaches past the allowed API, so the runtime isolation is tested with precheck=False
    (test_attack_is_contained_by_isolation_alone). Plain computation (loops, memory, recursion,
    a slow regex, printing) is no lint's business: the limits stop it."""
    bypass = [name for name, code, _ in CASES if not precheck(code.format(target="/x", repo_target="/y", port=1))]
    assert set(bypass) == {"bare_except_loop", "memory_bomb_at_once", "memory_bomb_gradual", "deep_recursion",
                           "catastrophic_regex", "print_forever"}
    assert len(CASES) + len(TAMPERING) + len(UNCHECKED) >= 30


@pytest.mark.parametrize(("name", "code"), TAMPERING, ids=[t[0] for t in TAMPERING])
def test_tampering_does_not_leak_into_later_verifiers(name, code):
    # precheck=False so the tampering really happens (the module views would stop most of it).
    with SandboxPool(SandboxConfig(workers=1, timeout_s=0.5, precheck=False)) as p:
        assert precheck(code)  # the allow-list refuses it; with the pre-check off it really runs
        p.run_sync(code, ["x"])
        for _ in range(3):
            assert [v.value for v in p.run_sync(YES, ["да", "нет", "ну да", "данет"])] == [True, False, True, False]


@pytest.mark.parametrize(("name", "code", "allowed"), UNCHECKED, ids=[c[0] for c in UNCHECKED])
def test_runtime_isolation_without_precheck(raw_pool, listener, tmp_path, name, code, allowed):
    verdicts = run_attack(raw_pool, code, tmp_path, listener)
    assert {status(v) for v in verdicts} <= allowed, [(status(v), v.message) for v in verdicts]


def test_printing_megabytes_neither_blocks_nor_bloats_parent(pool):
    rss = psutil.Process().memory_info().rss
    verdicts = pool.run_sync(fn("for _ in range(64):\n    print('x' * 10 ** 6)\nreturn True"), ["a", "b"])
    assert [v.value for v in verdicts] == [True, True]
    assert psutil.Process().memory_info().rss - rss < 50 * 2 ** 20


def test_scratch_tmp_is_private(raw_pool, tmp_path):
    name = f"/tmp/fabrika_scratch_{os.getpid()}"
    verdicts = raw_pool.run_sync(fn(f"open({name!r}, 'w').write('x')\nreturn open({name!r}).read() == 'x'"), ["a"])
    assert [v.value for v in verdicts] == [True]  # writing scratch space inside is allowed
    assert not Path(name).exists()  # ...and it is not the host's /tmp
