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

STAGE_MODULES: list[str] = [
    "fabrika.generators.generic",
    "fabrika.filters.language",
    "fabrika.filters.dedup",
    "fabrika.filters.decontam",
    "fabrika.filters.difficulty",
    "fabrika.filters.length",
    "fabrika.filters.teacher_rm",
    "fabrika.filters.gates",
    "fabrika.generators.instruct",
    "fabrika.generators.instruct.multi",
    "fabrika.generators.instruct.multi_responses",
    "fabrika.generators.instruct.multiturn",
    "fabrika.generators.fc.topics",
    "fabrika.generators.fc.stages",
    "fabrika.generators.fc.tools_import",
    "fabrika.generators.general",
]

_loaded: set[str] = set()


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
