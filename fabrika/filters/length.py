"""Length scorer: tokens and characters of prompt and completion.

The default unit is a razdel token count (no model needed, Russian-aware);
``tokenizer`` may name a *local* Hugging Face tokenizer directory for exact
model token counts (never downloaded). Counts cover message contents plus
tool-call names and arguments of the completion.

Scores: ``len_prompt_chars``, ``len_completion_chars``, ``len_prompt_tokens``,
``len_completion_tokens``, ``len_total_tokens``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

from pydantic import Field

from fabrika.filters.text import count_tokens, row_text
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage

SCORE_COLUMNS = ("len_prompt_chars", "len_completion_chars", "len_prompt_tokens",
                 "len_completion_tokens", "len_total_tokens")

TokenCounter = Callable[[str], int]


@lru_cache(maxsize=4)
def hf_token_counter(path: str) -> TokenCounter:
    """Token counter of a local HF tokenizer directory (``local_files_only``: never hits the hub)."""
    from transformers import AutoTokenizer  # lazy: transformers is heavy and optional here

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def token_counter(tokenizer: str | Path | None = None) -> TokenCounter:
    """razdel counting by default, a local HF tokenizer when ``tokenizer`` is a directory."""
    if tokenizer is None:
        return count_tokens
    if not Path(tokenizer).is_dir():
        raise ValueError(f"tokenizer {str(tokenizer)!r} is not a local directory; give a saved tokenizer's path or omit it")
    return hf_token_counter(str(tokenizer))


def score_lengths(rows: Sequence[Row], counter: TokenCounter = count_tokens) -> list[dict[str, Any]]:
    """Annotation rows ``{id, len_*}``."""
    out = []
    for row in rows:
        p, c = row_text(row, "prompt"), row_text(row, "completion")
        pt, ct = counter(p), counter(c)
        out.append({"id": row["id"], "len_prompt_chars": len(p), "len_completion_chars": len(c),
                    "len_prompt_tokens": pt, "len_completion_tokens": ct, "len_total_tokens": pt + ct})
    return out


class LengthConfig(StageConfig):
    """``filter.length``: which tokenizer counts tokens."""

    kind: str = Field(default="filter.length", description="Stage kind.")
    tokenizer: Path | None = Field(default=None, description="Local HF tokenizer directory (relative to the config "
                                   "file); None = razdel tokens.")


@register_stage
class LengthScorer(Stage):
    """Annotating stage: length columns per row."""

    kind: ClassVar[str] = "filter.length"
    Config: ClassVar[type[StageConfig]] = LengthConfig
    annotates: ClassVar[bool] = True

    async def process(self, row: Row) -> list[Row]:
        return [ok(**score_lengths([row], self._counter())[0])]

    def _counter(self) -> TokenCounter:
        cfg: LengthConfig = self.config  # type: ignore[assignment]
        if cfg.tokenizer is None:
            return count_tokens
        pipeline = getattr(self.ctx, "pipeline", None)
        path = pipeline.resolve_path(cfg.tokenizer) if pipeline is not None else cfg.tokenizer
        return self.ctx.resource(f"tokenizer:{path}", lambda: token_counter(path))
