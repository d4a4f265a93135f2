"""A markdown catalogue of the library, for docs and dataset cards (generated, never hand-kept)."""

from __future__ import annotations

import random

from fabrika.constraints.base import REGISTRY


def catalogue(lang: str = "ru", seed: int = 0) -> str:
    """One table row per constraint: id, family, what the verifier checks, an example instruction."""
    rows = ["| id | family | verifier checks | example instruction | conflicts |", "|---|---|---|---|---|"]
    for cid in sorted(REGISTRY, key=lambda c: (REGISTRY[c].family, c)):
        c = REGISTRY[cid]
        example = c.render(c.sample_params(random.Random(seed)), lang=lang)
        checks = " ".join(c.description.split()).split(". ")[0].rstrip(".")
        cells = [f"`{cid}`", c.family, checks, example, str(len(c.conflicts))]
        rows.append("| " + " | ".join(x.replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    return "\n".join(rows) + "\n"
