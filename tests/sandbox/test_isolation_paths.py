"""The sandbox works when the interpreter or checkout lives under /tmp (CI clones, pytest tmp dirs)."""

from __future__ import annotations

import subprocess

from fabrika.sandbox import isolation
from tests.sandbox.conftest import require_bwrap


def test_private_tmp_is_mounted_before_the_interpreter_binds(monkeypatch):
    monkeypatch.setattr(isolation, "_mount_roots", lambda: ["/tmp/ci-clone/.venv", "/opt/py"])
    require_bwrap()
    cmd = isolation.bwrap_command(["-c", "pass"])
    tmpfs = cmd.index("--tmpfs")
    venv_bind = [i for i, a in enumerate(cmd) if a == "/tmp/ci-clone/.venv"][0]
    assert tmpfs < venv_bind, "a /tmp bind placed before the tmpfs would be hidden by it"


def test_a_directory_under_tmp_stays_visible_inside_the_sandbox(tmp_path, monkeypatch):
    require_bwrap()
    assert str(tmp_path).startswith("/tmp/")
    (tmp_path / "marker.txt").write_text("visible", encoding="utf-8")
    real_roots = isolation._mount_roots()
    monkeypatch.setattr(isolation, "_mount_roots", lambda: [*real_roots, str(tmp_path)])
    code = f"print(open({str(tmp_path / 'marker.txt')!r}).read())"
    proc = subprocess.run(isolation.bwrap_command(["-c", code]), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "visible"
