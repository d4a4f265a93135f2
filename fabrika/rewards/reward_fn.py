"""A TRL reward function that owns resources: ``reward(prompts=..., completions=..., **columns)`` + ``close()``.

TRL calls a reward with keyword columns and names it in logs by ``__name__``; the IF and
rubric rewards also start things lazily (a sandbox pool, a judge engine) that the trainer
stops with ``close()`` when training ends. ``close`` is an instance attribute, so a wrapper
made with ``functools.wraps`` (dynamic sampling) carries it along.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

S = TypeVar("S")  # one score: float, or float | None where a reward may abstain


def _nothing() -> None:
    return None


class RewardFunction(Generic[S]):
    """``fn`` under the name ``name``, with ``close`` for what it started (default: nothing)."""

    def __init__(self, name: str, fn: Callable[..., list[S]], close: Callable[[], None] | None = None,
                 config: Any = None) -> None:
        self.__name__ = name
        self._fn = fn
        self.close: Callable[[], None] = close if close is not None else _nothing
        #: the reward's settings, for logs and tests
        self.config = config

    def __call__(self, *args: Any, **kwargs: Any) -> list[S]:
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<reward {self.__name__}>"
