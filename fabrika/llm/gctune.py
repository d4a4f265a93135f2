"""Garbage-collector settings for the lifetime of an LLM engine (a measured client-CPU cost).

Why: an engine process allocates many short-lived objects per request (JSON of prompts and
answers, rows, messages) while it holds a large, stable heap (modules, pydantic schemas, stage
state). With CPython's default thresholds (a young collection every 700 allocations, a full one
when the old generation grew by a quarter) the collector took ~20 % of the client's CPU on the
FC pipeline (6.4 s of 30 s at 3,000 training turns, ``bench/fc_scale.py``), most of it
rescanning that stable heap. So while an engine is open:

* the objects alive when it opens are moved to the permanent generation (:func:`gc.freeze`): they
  are never rescanned (they were reachable then; cycles among them are rare and stay until
  :func:`gc.unfreeze` puts them back in the oldest generation when the last engine closes);
* the young-generation threshold is raised to :data:`GEN0_THRESHOLD`: collections are rarer, each
  one a little larger; cyclic garbage is still collected.

Nothing here changes what a run produces, only when garbage is reclaimed. Nested engines share the
setting (reference-counted); the last :func:`release` restores the thresholds it found.
"""

from __future__ import annotations

import gc

#: young-generation threshold while an engine is open (CPython's default is 700)
GEN0_THRESHOLD = 20_000

_holders = 0
_saved: tuple[int, int, int] | None = None


def hold() -> None:
    """An engine opened: apply the settings (the first holder saves the old thresholds)."""
    global _holders, _saved
    if _holders == 0:
        _saved = gc.get_threshold()
        gc.freeze()
        gen0, gen1, gen2 = _saved
        gc.set_threshold(max(gen0, GEN0_THRESHOLD), gen1, gen2)
    _holders += 1


def release() -> None:
    """An engine closed: the last holder restores the thresholds and unfreezes the heap."""
    global _holders, _saved
    if _holders == 0:
        return
    _holders -= 1
    if _holders == 0 and _saved is not None:
        gc.set_threshold(*_saved)
        gc.unfreeze()
        _saved = None


def holders() -> int:
    """Engines currently holding the settings (for tests)."""
    return _holders
