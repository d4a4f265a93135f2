"""Wave-3 attack corpus by class: each is refused by the pre-check, or (pre-check off) contained.

For every class there is a *lint* form (how the attack reaches past the pre-check
through allowed libraries, exception attributes or strings: it must be refused) and a
*raw* form (the attack written plainly, run with ``precheck=False`` in bubblewrap and in
rlimits mode): afterwards the host is unchanged and an honest verifier's verdicts are
exactly what they were. Attacks report success by returning True.

``GAPS`` lists the (attack, mode) pairs the process isolation does not contain: all are the
rlimits mode, which shares the host's view, ``/tmp``, ``/dev/shm`` and IPC (bwrap gives every
batch its own mount and IPC namespace; see docs/ARCHITECTURE.md). Those cases are marked xfail
(non-strict) with the reason, so the table in bench/RESULTS.md and the test say the same.
Existing corpora (test_sandbox_hostile, test_contamination) are not repeated here.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import tempfile
from pathlib import Path

import psutil
import pytest

from fabrika.generators.instruct.verifiers import _first_error
from fabrika.sandbox import SandboxConfig, SandboxPool, precheck
from fabrika.sandbox.isolation import SANDBOX_UID_BASE, SANDBOX_UID_SPAN
from tests.sandbox.conftest import require_bwrap

PID = os.getpid()
HONEST = {
    "re_da": ("import re\ndef evaluate(response):\n    return bool(re.search(r'\\bда\\b', response.lower()))\n",
              ["да", "нет", "Ну да.", "данет"], ["true", "false", "true", "false"]),
    "morph_verb": ("import razdel, pymorphy3\ndef evaluate(response):\n    morph = pymorphy3.MorphAnalyzer()\n"
                   "    words = [t.text for t in razdel.tokenize(response) if t.text.isalpha()]\n"
                   "    return any(morph.parse(w)[0].tag.POS == 'VERB' for w in words)\n",
                   ["Кот бежит.", "Дом."], ["true", "false"]),
}
PLANTED = Path(tempfile.gettempdir()) / f"fabrika_w3_planted_{PID}"
SEEN = Path(tempfile.gettempdir()) / f"fabrika_w3_seen_{PID}"
FLOOD = Path(tempfile.gettempdir()) / f"fabrika_w3_flood_{PID}"
SHM_KEY = 0x3F00 + PID % 0xFF
POSIX_SHM = Path("/dev/shm") / f"fabrika_w3_{PID}"
SHM = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n"
       f"KEY = {SHM_KEY}\n")


def fn(body: str, head: str = "") -> str:
    return head + "def evaluate(response):\n" + "".join(f"    {line}\n" for line in body.splitlines())


def _run_dir() -> Path:
    """A run directory as a pipeline leaves it (umask 022): world-readable cache.sqlite with a key in it."""
    run = Path(tempfile.mkdtemp(prefix="fabrika_w3_run_"))
    run.chmod(0o755)
    (run / "cache.sqlite").write_text("SQLite format 3 OPENAI_API_KEY=sk-w3secret", encoding="utf-8")
    (run / "cache.sqlite").chmod(0o644)
    return run


RUN = _run_dir()
# removed at exit too: a process that imports the corpus without running it (test_non_root, its child)
atexit.register(shutil.rmtree, RUN, True)
#: The fork storm's ``sleep`` argument, unique to this test process: other test runs on a shared host
#: spawn the same attack, and their sleepers are not ours to count (or kill).
SLEEP_ARG = f"30.{os.getpid()}"
CACHE = RUN / "cache.sqlite"

# (name, class, lint form, raw form, statuses the raw form may get)
ATTACKS: list[tuple[str, str, str, str, set[str]]] = [
    ("pymorphy3_json_read_cache", "library file helpers",
     fn(f"return 'sk-' in str(pymorphy3.utils.json_read({str(CACHE)!r}))", "import pymorphy3\n"),
     fn(f"return 'sk-w3secret' in open({str(CACHE)!r}).read()", "import pymorphy3.utils\n"),
     {"error:exception"}),
    ("pymorphy3_json_write_host_tmp", "library file helpers",
     fn(f"pymorphy3.utils.json_write({str(PLANTED)!r}, {{'x': 1}})\nreturn True", "import pymorphy3\n"),
     fn(f"pymorphy3.utils.json_write({str(PLANTED)!r}, {{'x': 1}})\nreturn True", "import pymorphy3.utils\n"),
     {"true", "error:exception"}),  # "true" in bwrap: its own /tmp
    ("passwd_in_exception_message", "exception-carried data",
     fn("try:\n    json.loads(response)\nexcept json.JSONDecodeError as e:\n    raise ValueError(e.doc)\nreturn True",
        "import json\n"),
     fn("int(open('/etc/passwd').read())\nreturn True"),
     {"error:exception"}),
    ("env_in_exception_message", "exception-carried data",
     fn("raise ValueError(str(pymorphy3.utils.os.environ))", "import pymorphy3\n"),
     fn("raise ValueError(' '.join(k + '=' + v for k, v in os.environ.items()) + ' ' + os.getcwd())", "import os\n"),
     {"error:exception"}),
    ("frame_walk_patches_worker", "introspection escapes",
     fn("g = (x for x in [1])\nreturn g.gi_frame.f_back.f_globals is None"),
     fn("f = sys._getframe()\nwhile f is not None:\n    if '_call' in f.f_globals:\n"
        "        f.f_globals['_call'] = lambda fn, r: b'T\\n'\n    f = f.f_back\nreturn True", "import sys\n"),
     {"true", "error:exception"}),
    ("import_by_string", "__import__ via strings",
     fn("return __builtins__['__imp' + 'ort__']('o' + 's').getcwd() != ''"),
     fn(f"__import__('o' + 's').system('touch {PLANTED}')\nreturn True"),
     {"true", "error:exception"}),
    ("format_string_walk", "format-string attribute walks",
     fn("t = '{0.' + '_' * 2 + 'globals' + '_' * 2 + '}'\nreturn 'open' in t.format(evaluate)"),
     fn("return '_REAL_IMPORT' in '{0.__globals__}'.format(evaluate) or True"),
     {"true"}),
    ("fd_forgery_through_proc", "fd tricks",
     fn("return pymorphy3.utils.os.listdir('/proc/self/fd') != []", "import pymorphy3\n"),
     fn("ppid = os.getppid()\nfor name in os.listdir('/proc/%d/fd' % ppid):\n    try:\n"
        "        fd = os.open('/proc/%d/fd/%s' % (ppid, name), os.O_WRONLY)\n        os.write(fd, b'T\\nT\\nT\\n')\n"
        "    except OSError:\n        pass\nfor fd in range(3, 256):\n    try:\n        os.close(fd)\n    except OSError:\n"
        "        pass\nreturn True", "import os\n"),
     {"error:crash", "error:exception", "error:protocol"}),
    ("spawn_storm", "fork storms",
     fn("return pymorphy3.utils.os.posix_spawn is None", "import pymorphy3\n"),
     fn(f"for _ in range(64):\n    os.posix_spawn('/bin/sleep', ['sleep', '{SLEEP_ARG}'], {{}})\nreturn True", "import os\n"),
     {"error:exception"}),
    ("signal_the_pipeline", "signals to the parent/zygote",
     fn("return pymorphy3.utils.os.kill is None", "import pymorphy3\n"),
     fn(f"for pid in (os.getppid(), {PID}):\n    os.kill(pid, signal.SIGURG)\nos.killpg(0, signal.SIGURG)\n"
        "return True", "import os, signal\n"),
     {"error:exception", "true"}),
    ("inode_flood", "inode floods",
     fn("return pymorphy3.utils.os.mknod is None", "import pymorphy3\n"),
     fn(f"d = {str(FLOOD)!r} if not os.path.isdir('/sandbox') else '/tmp/flood'\nos.mkdir(d)\n"
        "for i in range(20000):\n    os.close(os.open(d + '/' + str(i), os.O_CREAT | os.O_WRONLY))\nreturn True",
        "import os\n"),
     {"error:exception", "true", "timeout"}),
    ("sysv_shared_memory", "shared memory",
     fn("return pymorphy3.analyzer.os is None", "import pymorphy3\n"),
     fn("seg = libc.shmget(KEY, 4096, 0o1000 | 0o666)\nif seg < 0:\n    return False\naddr = libc.shmat(seg, None, 0)\n"
        "ctypes.memmove(addr, b'left-by-an-earlier-verifier', 27)\nreturn True", SHM),
     {"true", "error:exception"}),
    ("posix_shared_memory", "shared memory",
     fn("return pymorphy3.utils.os.open is None", "import pymorphy3\n"),
     fn(f"open({str(POSIX_SHM)!r}, 'w').write('left')\nreturn True"),
     {"true", "error:exception"}),
    ("earlier_batch_inputs", "reading earlier batches",
     fn("return pymorphy3.utils.json_write is None", "import pymorphy3\n"),
     fn(f"p = {str(SEEN)!r} if not os.path.isdir('/sandbox') else '/tmp/seen'\nopen(p, 'a').write(response)\n"
        "return True", "import os\n"),
     {"true", "error:exception"}),
]

# The follow-up a verifier runs to see what an earlier one left (True: it leaked).
LEAK_PROBES = {
    "sysv_shared_memory": fn("seg = libc.shmget(KEY, 0, 0)\nif seg < 0:\n    return False\n"
                             "addr = libc.shmat(seg, None, 0)\nreturn ctypes.string_at(addr, 27) == b'left-by-an-earlier-verifier'",
                             SHM),
    "posix_shared_memory": fn(f"return os.path.exists({str(POSIX_SHM)!r})", "import os\n"),
    "earlier_batch_inputs": fn(f"p = {str(SEEN)!r} if not os.path.isdir('/sandbox') else '/tmp/seen'\n"
                               "return os.path.exists(p) and 'секрет' in open(p).read()", "import os\n"),
}

#: What rlimits cannot contain, as any user: it shares the host's filesystem view.
GAPS_ANY_USER: dict[tuple[str, str], str] = {
    ("pymorphy3_json_read_cache", "rlimits"): "rlimits shares the host view: a world-readable run dir is readable",
}
#: Closed as root by the pool's cleanup after each batch (each child has a uid of its own, so the zygote
#: knows what it left in /tmp, /var/tmp, /dev/shm and the SysV IPC tables and removes it before the next
#: verifier starts); as another user the children keep the invoking uid and the pool cannot tell.
NON_ROOT = "rlimits as a non-root user: children keep the invoking uid, the pool cannot tell what they left in "
GAPS_NON_ROOT: dict[tuple[str, str], str] = {
    ("pymorphy3_json_write_host_tmp", "rlimits"): NON_ROOT + "the host's /tmp",
    ("inode_flood", "rlimits"): NON_ROOT + "the host's /tmp",
    ("sysv_shared_memory", "rlimits"): NON_ROOT + "the host's IPC tables (no IPC namespace)",
    ("posix_shared_memory", "rlimits"): NON_ROOT + "the host's /dev/shm",
    ("earlier_batch_inputs", "rlimits"): NON_ROOT + "the host's /tmp",
    # found by test_non_root.py: the verifier runs under the pipeline's own uid, so it may signal it
    ("signal_the_pipeline", "rlimits"): "rlimits as a non-root user: children keep the invoking uid and can "
                                        "signal the pipeline's processes",
}
GAPS = {**GAPS_ANY_USER, **({} if os.getuid() == 0 else GAPS_NON_ROOT)}


def status(v) -> str:
    return v.status if v.status != "error" else f"error:{v.error_kind}"


@pytest.fixture(scope="module", params=["bwrap", "rlimits"])
def raw_pool(request):
    if request.param == "bwrap":
        require_bwrap()
    with SandboxPool(SandboxConfig(workers=1, timeout_s=1.0, isolation=request.param, precheck=False)) as p:
        assert p.isolation == request.param
        yield p


@pytest.fixture(scope="module", autouse=True)
def _remove_run_dir():
    yield
    import shutil

    shutil.rmtree(RUN, ignore_errors=True)


@pytest.fixture
def urg_count():
    got: list[int] = []
    old = signal.signal(signal.SIGURG, lambda *a: got.append(1))
    yield got
    signal.signal(signal.SIGURG, old)


def _cleanup() -> None:
    import shutil

    for path in (PLANTED, SEEN, POSIX_SHM):
        path.unlink(missing_ok=True)
    shutil.rmtree(FLOOD, ignore_errors=True)
    libc = ctypes.CDLL(None, use_errno=True)
    seg = libc.shmget(SHM_KEY, 0, 0)
    if seg >= 0:
        libc.shmctl(seg, 0, None)  # IPC_RMID


def _stray_sleepers() -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] == "sleep" and proc.info["cmdline"] == ["sleep", SLEEP_ARG]:
                out.append(proc)
        except psutil.Error:
            pass
    return out


def _sandbox_made(name: str) -> bool:
    """An entry of the host's /tmp that a verifier made: under a sandbox uid, or one of our names
    (other test runs share this /tmp, so "any new entry" would be flaky)."""
    if name.startswith("fabrika_w3_"):
        return True
    try:
        uid = (Path(tempfile.gettempdir()) / name).lstat().st_uid
    except OSError:
        return False
    return SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_SPAN


def assert_honest_unchanged(pool) -> None:
    for name, (code, responses, expected) in HONEST.items():
        assert [status(v) for v in pool.run_sync(code, responses)] == expected, name


@pytest.mark.parametrize(("name", "cls", "lint", "raw", "allowed"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_lint_form_is_refused(name, cls, lint, raw, allowed):
    assert precheck(lint), (cls, name)


def containment_problems(pool, name: str, raw: str, allowed: set[str], urg: list[int]) -> list[str]:
    """What the raw form of attack ``name`` got past ``pool`` (empty: contained). ``urg``: the SIGURGs
    this process received (a handler appends to it). Used by the test below and, as a non-root user,
    by ``_non_root_child.py``."""
    problems: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    urg.clear()
    _cleanup()
    try:
        before = set(os.listdir(tempfile.gettempdir()))
        verdicts = pool.run_sync(raw, ["секрет", "{}"])
        got = {status(v) for v in verdicts}
        stored = _first_error(list(verdicts)) or ""
        # what the consistency rows would store carries no host data, whatever the raw message says
        for leak in ("root:x:0", "sk-w3secret", "/etc/passwd", str(RUN), "OPENAI"):
            check(leak not in stored, f"the stored message carries {leak!r}: {stored!r}")
        if name in LEAK_PROBES:
            check(pool.run_sync(LEAK_PROBES[name], ["x"])[0].status != "true", "a later verifier saw it")
        try:
            assert_honest_unchanged(pool)
        except AssertionError as exc:
            problems.append(f"an honest verifier's verdicts changed: {exc}")
        check(not PLANTED.exists(), "a file was planted in the host's /tmp")
        check(not FLOOD.exists(), "the inode flood reached the host's /tmp")
        check(not POSIX_SHM.exists(), "a POSIX shared-memory segment reached the host")
        check(not SEEN.exists(), "a batch's input was left in the host's /tmp")
        check(not _stray_sleepers(), "spawned processes outlived the verifier")
        check(not urg, "the verifier signalled the pipeline process")
        new = {n for n in set(os.listdir(tempfile.gettempdir())) - before if _sandbox_made(n)}
        check(not new, f"new entries in the host's /tmp: {sorted(new)[:5]}")
        check(got <= allowed, f"verdicts {[(status(v), v.message) for v in verdicts]}")
        if name == "pymorphy3_json_read_cache":
            check("true" not in got, "the run's cache.sqlite was read")
    finally:
        for proc in _stray_sleepers():
            proc.kill()
        _cleanup()
    return problems


@pytest.mark.parametrize(("name", "cls", "lint", "raw", "allowed"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_raw_form_is_contained(raw_pool, urg_count, request, name, cls, lint, raw, allowed):
    mode = raw_pool.isolation
    if (name, mode) in GAPS:
        request.applymarker(pytest.mark.xfail(strict=False, reason=f"{mode}: {GAPS[name, mode]}"))
    problems = containment_problems(raw_pool, name, raw, allowed, urg_count)
    assert not problems, (name, cls, problems)


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
def test_unicode_and_floods_in_verdicts_are_stored_clean(mode):
    """These pass the lint (they are just code): the stored message must still be clean and short."""
    if mode == "bwrap":
        require_bwrap()
    codes = [
        fn("raise ValueError('\\ud800\\x00\\x1b[2J\\u202e' + 'я' * 5000)"),
        fn("raise ValueError('x' * 10 ** 7)"),
        fn("return 'y' * 10 ** 7"),
        fn("raise KeyError('/root/.ssh/id_rsa OPENAI_API_KEY=sk-' + 'a' * 40)"),
    ]
    with SandboxPool(SandboxConfig(workers=1, timeout_s=2.0, isolation=mode)) as pool:
        for code in codes:
            assert precheck(code) == []
            verdicts = pool.run_sync(code, ["a", "b"])
            assert all(v.status == "error" for v in verdicts)
            assert all(len(v.message or "") <= 400 for v in verdicts)
            stored = _first_error(list(verdicts)) or ""
            assert len(stored) <= 160 and stored.encode("utf-8")
            assert not any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF or c == "\u202e" for c in stored), repr(stored)
            assert "/root" not in stored and "sk-aaaa" not in stored
        assert_honest_unchanged(pool)


def test_corpus_covers_every_class():
    classes = {a[1] for a in ATTACKS}
    assert classes >= {"library file helpers", "exception-carried data", "introspection escapes",
                       "__import__ via strings", "format-string attribute walks", "fd tricks", "fork storms",
                       "signals to the parent/zygote", "inode floods", "shared memory", "reading earlier batches"}
