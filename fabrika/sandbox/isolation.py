"""How a sandbox worker process is started: bubblewrap, or rlimits-only on explicit opt-in.

A worker is a zygote (see ``_worker.py``): it preloads the allowed libraries and forks
one child per verifier batch; only children run LLM-written code.

bubblewrap gives each worker its own mount, pid, net, ipc and uts namespaces: the
filesystem is the Python installation mounted read-only (wherever it lives, /tmp
included) on a read-only root; there is no network (not even the host's loopback);
a fork bomb stays inside the pid namespace and dies with it. bwrap sets
``PR_SET_NO_NEW_PRIVS``. Each child (one verifier batch) then unshares a mount and an
IPC namespace of its own and mounts a fresh tmpfs ``/tmp`` with a size and an inode cap
(``SandboxConfig.scratch_mb`` / ``scratch_inodes``): it sees no file and no SysV or
POSIX IPC object of an earlier batch, and its own vanish with its namespace, deleted
on no one's clock. When the pool runs as root, each child drops to a uid of its own
(``SANDBOX_UID_BASE`` + random), so RLIMIT_NPROC=1 is enforced (the kernel exempts
root), no capability is left and no child can signal another; as another user bwrap
adds a user namespace and the child drops every capability with ``capset``.

The rlimits-only mode runs the same zygote as a plain process with the same limits
and per-child uid drop (when the pool runs as root), and gives each child a fresh
private scratch directory (its cwd, inside a pool directory nobody else can list),
removed after the batch by a detached process, off every verifier's clock. As root
(a uid per child) the zygote also removes, after each batch and before the next
verifier starts, the SysV IPC objects its children created (by creator uid) and the
entries they made in /tmp, /var/tmp and /dev/shm. It does NOT contain: the host's
filesystem view (world-readable files; and, when the pool does not run as root, every
file of the invoking user, who then keeps their uid), the number of files a verifier
creates while it runs (no inode cap without a tmpfs of its own: only its CPU budget
bounds a flood), SysV segments while they exist (not charged to RLIMIT_AS), the host's
network including loopback services, and — without a uid drop — what a verifier leaves
in /tmp, /dev/shm and the IPC tables (it carries the pipeline's own uid) and signals to
the invoking user's processes (the pipeline itself).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fabrika.errors import SandboxError
from fabrika.sandbox.config import ERROR_KINDS, SandboxConfig
from fabrika.sandbox.precheck import ALLOWED_MODULES

log = logging.getLogger(__name__)

WORKER_SCRIPT = Path(__file__).with_name("_worker.py")
SANDBOX_WORKER_PATH = "/sandbox/worker.py"
#: Children of a root-run pool each take a uid in [BASE, BASE + SPAN): no passwd entry, no files.
SANDBOX_UID_BASE = 2_000_000_000
SANDBOX_UID_SPAN = 100_000_000
#: Where an interpreter root that lives under /tmp is bound a second time inside bwrap, so a child
#: can bind it back above its own fresh /tmp.
STASH = "/.fabrika-roots"
PYTHON_FLAGS = ["-s", "-P", "-B"]
WORKER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": "/tmp", "TMPDIR": "/tmp"}


def worker_config(config: SandboxConfig, isolation: str, reply_fd: int, scratch_base: str | None = None) -> str:
    """The JSON argument the worker reads from argv: limits and protocol details.

    The limits apply to each forked child (the zygote only sets RLIMIT_CORE); the child
    adds RLIMIT_CPU from ``timeout_s`` and the number of responses it is given.
    ``scratch_base`` (rlimits only) is the pool's private directory for per-child scratch dirs."""
    mib = 1024 * 1024
    limits = {
        "RLIMIT_AS": config.memory_mb * mib,
        "RLIMIT_FSIZE": config.max_file_mb * mib,
        "RLIMIT_NOFILE": config.max_open_files,
        "RLIMIT_NPROC": 1,
        "RLIMIT_CORE": 0,
        "RLIMIT_MSGQUEUE": 0,  # no POSIX message queue bytes
    }
    root = os.getuid() == 0
    if isolation == "bwrap":
        scratch: dict[str, object] | None = {
            "path": "/tmp", "bytes": config.scratch_mb * mib, "inodes": config.scratch_inodes,
            "rebind": [[stash, root_path] for stash, root_path in _stashed_roots()],
        }
    else:
        scratch = {"base": scratch_base} if scratch_base else None
    return json.dumps(
        {
            "allowed_modules": sorted(ALLOWED_MODULES),
            "error_kinds": sorted(ERROR_KINDS),
            "limits": limits,
            "timeout_s": config.timeout_s,
            "wall_ceiling_s": config.wall_ceiling_s or max(10 * config.timeout_s, 10.0),
            "scratch": scratch,
            "namespaces": isolation == "bwrap",
            "uid_base": SANDBOX_UID_BASE if root else None,
            "uid_span": SANDBOX_UID_SPAN if root else None,
            "reply_fd": reply_fd,
            "isolation": isolation,
        }
    )


def _mount_roots() -> list[str]:
    """Directories the worker needs read-only: the interpreter, its stdlib and every site-packages
    directory on ``sys.path`` (a venv's, a ``.pth``-linked one), wherever they live — /tmp included."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    exe = Path(sys.executable)
    paths.add(str(exe.parent.parent))
    paths.add(str(exe.resolve().parent.parent))
    for entry in sys.path:
        if entry and Path(entry).name in ("site-packages", "dist-packages") and Path(entry).is_dir():
            paths.add(str(Path(entry).resolve()))
            paths.add(entry)
    roots: list[str] = []
    for path in sorted(paths, key=len):
        if path.startswith("/usr/") or path == "/usr":
            continue
        if not any(path == r or path.startswith(r + "/") for r in roots):
            roots.append(path)
    return roots


def _stashed_roots() -> list[tuple[str, str]]:
    """``(stash, path)`` for each interpreter root under /tmp: a child's fresh /tmp would hide it."""
    return [(f"{STASH}/{i}", root) for i, root in enumerate(r for r in _mount_roots() if r.startswith("/tmp/"))]


def bwrap_command(worker_args: list[str]) -> list[str]:
    """The bwrap command line that starts the worker with ``worker_args`` (python flags, script, config)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError("bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap) "
                           "or set SandboxConfig(isolation='rlimits')")
    cmd = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL"]
    # The zygote keeps only what it needs to give each child its own namespaces (CAP_SYS_ADMIN),
    # uid, and kill it; a child has none left after its uid drop (root) or its capset (other users).
    caps = ["CAP_SYS_ADMIN"]
    if os.getuid() == 0:
        caps += ["CAP_SETUID", "CAP_SETGID", "CAP_KILL"]
    else:
        cmd += ["--unshare-user"]
    for cap in caps:
        cmd += ["--cap-add", cap]
    cmd += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        host = Path("/") / name
        if host.is_symlink():
            cmd += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            cmd += ["--ro-bind", str(host), str(host)]
    # /tmp is a read-only directory of the zygote: each child mounts its own fresh tmpfs there.
    cmd += ["--perms", "0755", "--dir", "/tmp"]
    made: set[str] = {"/tmp"}
    for root in _mount_roots():
        # bwrap creates missing parents with the host's modes (e.g. /root 0700), which
        # nobody cannot traverse: create them first, world-readable.
        parents = [str(p) for p in reversed(Path(root).parents) if str(p) != "/"]
        for parent in parents:
            if parent not in made:
                cmd += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        cmd += ["--ro-bind", root, root]
    for stash, root in _stashed_roots():  # bound back by each child above its own /tmp
        cmd += ["--ro-bind", root, stash]
    cmd += ["--ro-bind", str(WORKER_SCRIPT), SANDBOX_WORKER_PATH,
            "--proc", "/proc", "--dev", "/dev", "--chdir", "/", "--remount-ro", "/"]
    for key, value in WORKER_ENV.items():
        cmd += ["--setenv", key, value]
    return [*cmd, "--", sys.executable, *worker_args]


def worker_command(isolation: str, config_json: str) -> list[str]:
    """Full argv of a worker under ``isolation`` ("bwrap" or "rlimits")."""
    if isolation == "bwrap":
        return bwrap_command([*PYTHON_FLAGS, SANDBOX_WORKER_PATH, config_json])
    return [sys.executable, *PYTHON_FLAGS, str(WORKER_SCRIPT), config_json]


#: Generous: a probe that times out on a loaded host says "cannot run" and a fallback would depend on load.
PROBE_TIMEOUT_S = 300


def bwrap_probe() -> str | None:
    """None when bwrap (as found on PATH now) can start a Python here, else the reason it cannot."""
    return _probe(shutil.which("bwrap"))


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str | None) -> str | None:
    if bwrap is None:
        return "bubblewrap (bwrap) is not on PATH"
    try:
        cmd = bwrap_command(["-c", "import json, re"])
    except SandboxError as exc:
        return str(exc)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if proc.returncode != 0:
        return f"bwrap exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return None


def resolve_isolation(requested: str) -> str:
    """Pick "bwrap" or "rlimits" for ``requested`` ("auto" | "bwrap" | "rlimits"), warning on fallback.

    Decided once per process (the probe is cached) and before any pool starts; a pool never
    switches afterwards (its self-test failing is an error, see ``SandboxPool``)."""
    if requested == "rlimits":
        log.warning("fabrika.sandbox: isolation='rlimits' — verifiers are NOT in a namespace sandbox: the host's "
                    "filesystem view and loopback network stay reachable%s", _uid_note())
        return "rlimits"
    reason = bwrap_probe()
    if reason is None:
        return "bwrap"
    if requested == "bwrap":
        raise SandboxError(f"SandboxConfig.isolation='bwrap' but bubblewrap cannot run here: {reason}; "
                           "install bubblewrap or use isolation='auto'")
    log.warning("fabrika.sandbox: bubblewrap cannot run here (%s); FALLING BACK to rlimits-only workers "
                "— LLM-written code shares the host filesystem view and network%s", reason, _uid_note())
    return "rlimits"


def _uid_note() -> str:
    if os.getuid() == 0:
        return " (each verifier runs under a uid of its own)"
    return f" and verifiers keep YOUR uid {os.getuid()} (its files, its processes): run as root to drop it"

