"""Modules that register stage kinds and gate groups when imported.

A stage module registers everything of its stage when imported: the kind
(``@register_stage``), its gate group (``register_gate_group``) and, where it has
one, its ``sim`` responder (``register_sim_responder``). Adding a stage is that
module plus one line here (or in the package module already listed, e.g.
``fabrika.generators.fc.stages``); see ``docs/STAGES.md``. They are imported
lazily, on the first config validation, so importing ``fabrika.pipeline`` stays
cheap. A listed module that fails to import is a configuration error (it would
silently remove stage kinds otherwise).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from fabrika.errors import StoreError

STAGE_MODULES: list[str] = [
    "fabrika.generators.generic",
    "fabrika.filters.language",
    "fabrika.filters.dedup",
    "fabrika.filters.decontam",
    "fabrika.filters.difficulty",
    "fabrika.filters.length",
    "fabrika.filters.teacher_rm",
    "fabrika.generators.instruct",
    "fabrika.generators.instruct.multi",
    "fabrika.generators.instruct.multi_responses",
    "fabrika.generators.instruct.multiturn",
    "fabrika.generators.fc.topics",
    "fabrika.generators.fc.stages",
    "fabrika.generators.fc.tools_import",
    "fabrika.generators.general",
]

#: Sections of the document the pipeline keeps as raw mappings and their owners check:
#: ``section -> "module:function"`` returning ``[(key path, message)]``. Loaded by string
#: (lazily: ``export`` pulls pyarrow and polars, and sits in a layer above the pipeline).
SECTION_CHECKS: dict[str, str] = {
    "export": "fabrika.export.settings:validate_export_section",
}

_loaded: set[str] = set()


def section_checks() -> dict[str, Callable[[dict[str, Any]], list[tuple[str, str]]]]:
    """The functions :data:`SECTION_CHECKS` names, imported."""
    out = {}
    for section, target in SECTION_CHECKS.items():
        module, _, attr = target.partition(":")
        out[section] = getattr(importlib.import_module(module), attr)
    return out


def load_modules(modules: list[str] | None = None) -> list[tuple[str, str]]:
    """Import ``modules`` (default :data:`STAGE_MODULES`); returns ``(module, error)`` for failures."""
    failures: list[tuple[str, str]] = []
    for mod in STAGE_MODULES if modules is None else modules:
        if mod in _loaded:
            continue
        try:
            importlib.import_module(mod)
        except Exception as exc:  # noqa: BLE001 - reported as a config error, with the cause
            failures.append((mod, f"{type(exc).__name__}: {exc}"))
        else:
            _loaded.add(mod)
    return failures


def load_run_modules(manifest: Mapping[str, Any]) -> None:
    """Import the registry's modules and the run's ``plugins`` so its gate groups are known.

    Raises :class:`StoreError` naming a module that fails to import (its gates would
    otherwise be skipped).
    """
    mods = list(STAGE_MODULES) + list(manifest.get("config", {}).get("plugins", []))
    failures = load_modules(mods)
    if failures:
        mod, why = failures[0]
        raise StoreError(f"cannot import {mod!r} needed to apply gates: {why}")
