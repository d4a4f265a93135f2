"""Run a Python script of the test suite as a non-root user, set up by the test itself.

As root (CI on a clean clone): the script runs as ``nobody`` (uid 65534, via ``setpriv``: no
passwd entry, group or home needed) inside a private mount namespace (``unshare --mount``) in
which only the directories that user must pass through are made traversable. A directory on the
way to the interpreter, the virtual environment, the site-packages or the checkout that others
may not enter (``/root`` is 0700; pyenv and CI clones live under it) is covered, in that namespace
only, by a bind mount of a fresh 0755 directory holding bind mounts of just the entries on the
way. Nothing on the host changes (no chmod), and the mounts vanish with the namespace; the stage
directories are removed afterwards. As another user the script simply runs as that user.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

NOBODY = 65534
REPO = Path(__file__).resolve().parents[2]


def needed_paths() -> list[Path]:
    """What the non-root interpreter must reach: itself, its prefixes, every sys.path entry, the checkout."""
    paths = {Path(os.path.realpath(sys.executable)), Path(sys.executable), Path(sys.prefix),
             Path(sys.base_prefix), Path(sys.exec_prefix), REPO}
    paths |= {Path(p) for p in sys.path if p and os.path.exists(p)}
    return sorted({Path(os.path.abspath(p)) for p in paths})


def _closed_for_others(path: Path) -> bool:
    try:
        return not stat.S_IMODE(path.stat().st_mode) & stat.S_IXOTH
    except OSError:
        return False


def blocked_dirs(paths: list[Path]) -> dict[Path, set[str]]:
    """Directory others cannot enter -> the names under it that lie on the way to ``paths``."""
    out: dict[Path, set[str]] = {}
    for path in paths:
        parts = path.parts
        for depth in range(1, len(parts)):
            parent = Path(*parts[:depth])
            if _closed_for_others(parent):
                out.setdefault(parent, set()).add(parts[depth])
    return out


def mount_script(blocked: dict[Path, set[str]], stage_root: Path) -> list[str]:
    """Shell lines (run as root in a private mount namespace) that make ``blocked`` traversable, top down."""
    lines = []
    for i, (parent, names) in enumerate(sorted(blocked.items(), key=lambda kv: len(kv[0].parts))):
        stage = stage_root / f"s{i}"
        stage.mkdir(mode=0o755)
        stage.chmod(0o755)
        for name in sorted(names):
            source = parent / name
            target = stage / name
            if source.is_dir():
                target.mkdir()
            else:
                target.touch()
            lines.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(target))}")
        lines.append(f"mount --rbind {shlex.quote(str(stage))} {shlex.quote(str(parent))}")
    return lines


def run_as_non_root(script: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with this interpreter as a non-root user; PYTHONPATH is the checkout."""
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8", "HOME": "/tmp", "PYTHONPATH": str(REPO),
           "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": "/tmp"}
    argv = [sys.executable, "-s", str(script)]
    if os.getuid() != 0:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    stage_root = Path(tempfile.mkdtemp(prefix="fabrika-nonroot-"))
    try:
        stage_root.chmod(0o755)
        lines = ["set -e", *mount_script(blocked_dirs(needed_paths()), stage_root),
                 f"exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups --inh-caps=-all -- "
                 + " ".join(shlex.quote(a) for a in argv)]
        cmd = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(lines)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False, cwd="/")
    finally:
        for stage in sorted(stage_root.rglob("*"), key=lambda p: -len(p.parts)):
            (stage.rmdir if stage.is_dir() else stage.unlink)()
        stage_root.rmdir()
