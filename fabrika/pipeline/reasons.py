"""Which stored reasons are verdicts and which pass an item over (a leaf: readers such as the run explorer
import it without the stage machinery)."""

from __future__ import annotations

#: Reasons that pass an item over by design (a share was not drawn, the item does not apply), not a
#: verdict on quality: stored like rejections, but progress and reports do not count them as rejected.
PASSED_OVER_REASONS = frozenset({"not_sampled", "not_eligible"})


def is_rejection(reason: str | None) -> bool:
    """True unless ``reason``'s key (the part before ``:``) is in :data:`PASSED_OVER_REASONS`."""
    return (reason or "").split(":", 1)[0].strip() not in PASSED_OVER_REASONS


__all__ = ["PASSED_OVER_REASONS", "is_rejection"]
