"""The sandbox works wherever the Python installation lives, /tmp included (CI clones, pytest tmp
dirs): each child's fresh /tmp must not hide the interpreter, and the zygote must live on."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fabrika.sandbox import isolation
from tests.sandbox.conftest import require_bwrap

REPO = Path(__file__).resolve().parents[2]


def test_roots_under_tmp_are_stashed_and_bound_back(monkeypatch):
    require_bwrap()  # first: the probe is cached, it must see the real roots
    monkeypatch.setattr(isolation, "_mount_roots", lambda: ["/tmp/ci-clone/.venv", "/opt/py"])
    cmd = isolation.bwrap_command(["-c", "pass"])
    pairs = list(zip(cmd, cmd[1:], cmd[2:]))
    assert ("--ro-bind", "/tmp/ci-clone/.venv", "/tmp/ci-clone/.venv") in pairs
    assert ("--ro-bind", "/tmp/ci-clone/.venv", f"{isolation.STASH}/0") in pairs  # what a child binds back
    assert "--tmpfs" not in cmd  # the zygote's /tmp is read-only; every child mounts its own
    config = isolation.worker_config(isolation.SandboxConfig(), "bwrap", 3)
    assert f'"rebind": [["{isolation.STASH}/0", "/tmp/ci-clone/.venv"]]' in config


@pytest.fixture(scope="module")
def tmp_venv():
    """A real venv under /tmp whose site-packages links (by a .pth file) to this one's: the same
    libraries, the interpreter and its prefix under /tmp (what a CI clone with its .venv looks like)."""
    require_bwrap()
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="fabrika-venv-", dir="/tmp"))
    venv = root / ".venv"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (venv / "lib" / pyver / "site-packages" / "parent_env.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    yield venv / "bin" / "python"
    import shutil

    shutil.rmtree(root, ignore_errors=True)


def test_a_pool_started_from_a_venv_under_tmp_keeps_its_zygote(tmp_venv):
    """Before: the zygote could not empty a /tmp that held the venv and exited after every batch."""
    script = textwrap.dedent('''
        import sys
        from fabrika.sandbox import SandboxConfig, SandboxPool
        assert sys.prefix.startswith("/tmp/"), sys.prefix
        morph = ("import pymorphy3, razdel\\n"
                 "def evaluate(r):\\n"
                 "    words = [t.text for t in razdel.tokenize(r)]\\n"
                 "    return any(pymorphy3.MorphAnalyzer().parse(w)[0].tag.POS == 'VERB' for w in words)\\n")
        write = "def evaluate(r):\\n    open('/tmp/left_behind', 'w').write(r)\\n    return True\\n"
        look = "import os\\ndef evaluate(r):\\n    return 'left_behind' not in os.listdir('/tmp')\\n"
        with SandboxPool(SandboxConfig(workers=1, isolation="bwrap", precheck=False)) as p:
            out = []
            for _ in range(3):
                out += [v.status for v in p.run_sync(morph, ["Кот бежит.", "Синий дом."])]
                out += [v.status for v in p.run_sync(write, ["x"])]
                out += [v.status for v in p.run_sync(look, ["x"])]
            print(out, p.stats["spawned"])
    ''')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([str(tmp_venv), "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts, spawned = proc.stdout.strip().rsplit(" ", 1)
    assert verdicts == str(["true", "false", "true", "true"] * 3)
    assert spawned == "1", "the zygote must survive its batches"
