"""The Russian constraint library: seed constraints with trusted verifiers.

``REGISTRY`` maps a stable id (``ru.length.words_max``) to a
:class:`SeedConstraint` with ``family``, ``render(params)``,
``sample_params(rng)``, ``verify``/``verify_loose`` and ``conflicts``.
Families register themselves on import; the conflict table is applied last.
"""

from fabrika.constraints import formatting, keywords, length, russian, table, textual  # noqa: F401 - register
from fabrika.constraints.base import REGISTRY, SeedConstraint, loose_variants
from fabrika.constraints.catalogue import catalogue
from fabrika.constraints.combine import (
    Combination,
    check_combination,
    compatible,
    get,
    library_seeds,
    render_combination,
    sample_combination,
    to_constraint_record,
    verify_all,
)
from fabrika.constraints.conflicts import apply_conflicts, params_conflict
from fabrika.constraints.english import apply_english
from fabrika.constraints.paraphrases import apply_paraphrases

apply_conflicts(REGISTRY)
apply_english(REGISTRY)
apply_paraphrases(REGISTRY)

__all__ = [
    "REGISTRY",
    "Combination",
    "SeedConstraint",
    "catalogue",
    "check_combination",
    "compatible",
    "get",
    "library_seeds",
    "loose_variants",
    "params_conflict",
    "render_combination",
    "sample_combination",
    "to_constraint_record",
    "verify_all",
]
