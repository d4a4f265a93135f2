"""What a stage may touch while it runs (implemented by the runner)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from fabrika.schemas.ids import derive_seed

if TYPE_CHECKING:
    from fabrika.llm.base import LLMClient


class StageContext(Protocol):
    """The runner's view handed to each stage.

    Attributes:
        llm: the engine (cache, retries, accounting already applied).
        seed: the pipeline's global seed.
        run_dir: the run directory.
        pipeline: the validated pipeline config (``fabrika.pipeline.config.PipelineConfig``).
        backend_name: name of the LLM backend (``"sim"``, ``"openai"``, ``"vllm"``).
    """

    llm: "LLMClient"
    seed: int
    run_dir: Path
    pipeline: Any
    backend_name: str

    def iter_rows(self, stage_name: str, *, gated: bool = True, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
        """Stream rows written by ``stage_name`` (``gated``: only ``ok`` rows that pass the configured gates)."""
        ...

    def rng(self, *parts: Any) -> random.Random:
        """A deterministic RNG for one item: seeded by the pipeline seed, the stage name and ``parts``."""
        ...

    def resource(self, name: str, factory: Callable[[], Any]) -> Any:
        """A run-wide shared object (sandbox pool, embedder), created once by ``factory``.

        The runner closes it (``aclose()`` or ``close()``) after the last stage; stages must not.
        """
        ...

    def stage_dir(self, stage_name: str) -> Path:
        """Directory of a stage's shards (for stages that keep side files, e.g. a topic model)."""
        ...

    def report(self, key: str, value: Any) -> None:
        """Record a fact in the manifest (e.g. ``report("sandbox_isolation", "bwrap")``)."""
        ...


def item_rng(global_seed: int, stage_name: str, *parts: Any) -> random.Random:
    """The RNG every context's :meth:`StageContext.rng` returns."""
    return random.Random(derive_seed(global_seed, stage_name, *parts))
