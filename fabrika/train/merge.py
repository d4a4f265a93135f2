"""`fabrika train merge`: two-stage sequential SLERP of the three experts, via mergekit.

Stage 1 merges the first two experts (default IF, FC) with layer-wise
coefficients: attention weights at ``attn_t``, MLP weights at the complement
``1 − attn_t``, everything else (embeddings, norms, lm_head) at ``default_t``
(0.5). Norm tensors are matched *first* (``norm`` filter: ``input_layernorm``,
``post_attention_layernorm``, the final ``norm``, and Qwen3's
``self_attn.q_norm`` / ``self_attn.k_norm``), because mergekit filters match by
substring and Qwen3's q/k norms would otherwise take the attention t (0 or 1 at
the ends of a grid). Stage 2 merges that result with the third expert (default General) at
``t2`` = 0.8. SLERP is not associative, so ``order`` matters and is a setting.

Convention (mergekit's): ``slerp(a, b, t)`` is ``a`` at t = 0 and ``b`` at
t = 1, where ``a`` is the ``base_model``. Stage 1 has ``a`` = order[0],
``b`` = order[1]; stage 2 has ``a`` = the stage-1 model, ``b`` = order[2]. So
``t2`` is the weight of the third expert. Each tensor is interpolated as one
flat vector (linear interpolation when the two are nearly (anti)parallel);
the tests check every merged tensor against an independent implementation.

``attn_t`` may be a list: mergekit then spreads it as a gradient over the layers.
With ``grid`` set, every candidate ``attn_t`` is merged, scored by the user's
``eval_command`` (``{model_dir}`` is replaced) and a table ``scores.csv`` /
``scores.parquet`` is written. The score is read from an explicit line
``score: 0.71`` (the last one) or from stdout that is a JSON object with a
numeric ``"score"`` (whole, or its last line); anything else — a stray number
like ``Qwen3-8B`` or ``info.json`` — is no score. A candidate without a score is
never the winner; with ``keep_candidates: false`` the losers are deleted only
once a winner exists; and a grid where no candidate was scored raises
:class:`~fabrika.errors.ConfigError` (the CLI exits non-zero), keeping every merge.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fabrika.errors import ConfigError

_SCORE_LINE = re.compile(r"^\s*score\s*[:=]\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$",
                         re.IGNORECASE | re.MULTILINE)
#: mergekit matches filters by substring, first match wins: norms before attention/MLP (Qwen3's self_attn.q_norm).
NORM_FILTER = "norm"

Coef = float | list[float]


class MergeConfig(BaseModel):
    """Settings of the two-stage SLERP merge and its coefficient grid search."""

    model_config = ConfigDict(extra="forbid")

    experts: dict[str, str] = Field(description="Expert name → local model directory, e.g. {if: ..., fc: ..., "
                                                "general: ...}.")
    order: list[str] = Field(default=["if", "fc", "general"], description="Merge order: order[0] and order[1] in "
                             "stage 1 (order[0] is the t=0 side), the result with order[2] in stage 2.")
    attn_t: Coef = Field(default=0.5, description="Stage-1 t for self-attention weights (a list = gradient over "
                                                  "layers); MLP weights get 1 − attn_t.")
    default_t: float = Field(default=0.5, ge=0, le=1, description="Stage-1 t for embeddings, norms and lm_head.")
    t2: float = Field(default=0.8, ge=0, le=1, description="Stage-2 t: the weight of order[2] against the stage-1 "
                                                           "model.")
    grid: list[float] | None = Field(default=None, description="Candidate attn_t values to search, e.g. "
                                     "[0, 0.3, 0.5, 0.7, 1]; each is merged and scored.")
    eval_command: str | None = Field(default=None, description="Shell command scoring a merged model; "
                                     "`{model_dir}` is replaced; it prints `score: <number>` (or a JSON object "
                                     "with a numeric \"score\").")
    eval_timeout_s: float = Field(default=3600, gt=0, description="Wall-clock limit of one eval_command run.")
    output_dir: str = Field(description="Where merges, the score table and best.json are written.")
    dtype: str | None = Field(default=None, description="Merge dtype (float32, bfloat16, float16); None keeps "
                                                        "mergekit's default.")
    keep_stage1: bool = Field(default=False, description="Keep the intermediate stage-1 model on disk.")
    keep_candidates: bool = Field(default=True, description="Grid search: keep every candidate merge; False keeps "
                                  "only the best so far (a full model per candidate adds up on real sizes).")

    @field_validator("attn_t")
    @classmethod
    def _unit(cls, v: Coef) -> Coef:
        values = v if isinstance(v, list) else [v]
        if not values or any(not 0 <= x <= 1 for x in values):
            raise ValueError(f"attn_t must be in [0, 1] (or a non-empty list of such), got {v!r}")
        return v

    @model_validator(mode="after")
    def _check(self) -> "MergeConfig":
        if len(self.order) != 3 or len(set(self.order)) != 3:
            raise ValueError(f"order must name three different experts, got {self.order!r}")
        missing = [n for n in self.order if n not in self.experts]
        if missing:
            raise ValueError(f"order names {missing} but experts has only {sorted(self.experts)}; add their paths")
        if self.grid is not None:
            if not self.grid or any(not 0 <= x <= 1 for x in self.grid):
                raise ValueError(f"grid must be a non-empty list of values in [0, 1], got {self.grid!r}")
            if not self.eval_command or "{model_dir}" not in self.eval_command:
                raise ValueError("grid needs eval_command containing {model_dir}, e.g. "
                                 "'python eval.py --model {model_dir}'")
        return self


def load_merge_config(path: str | Path, overrides: dict[str, Any] | None = None) -> MergeConfig:
    """Read a merge YAML (plus overrides) into :class:`MergeConfig`; errors name the field."""
    from fabrika.train.config import read_yaml

    data = read_yaml(path)
    data.update(overrides or {})
    try:
        return MergeConfig.model_validate(data)
    except Exception as exc:  # pydantic.ValidationError: re-raise as the CLI's config error
        raise ConfigError(f"merge config {path}: {exc}") from exc


def _complement(t: Coef) -> Coef:
    return [round(1 - x, 12) for x in t] if isinstance(t, list) else round(1 - t, 12)


def slerp_config(base: str | Path, other: str | Path, *, attn_t: Coef, mlp_t: Coef, default_t: float,
                 dtype: str | None = None) -> dict[str, Any]:
    """A mergekit ``slerp`` config: ``t`` for norms (the default t), then ``self_attn`` / ``mlp``, then the default."""
    cfg: dict[str, Any] = {
        "merge_method": "slerp",
        "base_model": str(base),
        "models": [{"model": str(base)}, {"model": str(other)}],
        "parameters": {"t": [{"filter": NORM_FILTER, "value": default_t},
                             {"filter": "self_attn", "value": attn_t},
                             {"filter": "mlp", "value": mlp_t},
                             {"value": default_t}]},
    }
    if dtype:
        cfg["dtype"] = dtype
    return cfg


def _tensor_shapes(model_dir: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"expert {str(model_dir)!r} has no *.safetensors weights; save it with "
                          "save_pretrained(safe_serialization=True)")
    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            for name in handle.keys():
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    return shapes


def check_compatible(paths: dict[str, str]) -> None:
    """Every expert is a local dir with the same tensor names and shapes (checked before merging)."""
    ref_name, ref_shapes = None, None
    for name, path in paths.items():
        p = Path(path)
        if not (p / "config.json").is_file():
            raise ConfigError(f"experts.{name} = {path!r} is not a local model directory (no config.json)")
        shapes = _tensor_shapes(p)
        if ref_shapes is None:
            ref_name, ref_shapes = name, shapes
            continue
        only = sorted(set(shapes) ^ set(ref_shapes))
        if only:
            raise ConfigError(f"experts {ref_name!r} and {name!r} have different tensors (e.g. {only[:3]}); "
                              "SLERP needs checkpoints of one architecture")
        bad = [(k, ref_shapes[k], shapes[k]) for k in sorted(shapes) if shapes[k] != ref_shapes[k]]
        if bad:
            k, a, b = bad[0]
            raise ConfigError(f"experts {ref_name!r} and {name!r} disagree on {len(bad)} tensor shape(s), e.g. "
                              f"{k}: {list(a)} vs {list(b)}; SLERP needs checkpoints of one architecture and size")


def run_slerp(config: dict[str, Any], out_dir: Path) -> Path:
    """Run one mergekit merge into ``out_dir`` atomically (temp dir, then rename); keeps the YAML beside it."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    run_merge(MergeConfiguration.model_validate(config), str(tmp),
              MergeOptions(copy_tokenizer=True, quiet=True, write_model_card=False, lazy_unpickle=True))
    (tmp / "mergekit_config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    return out_dir


def two_stage_merge(cfg: MergeConfig, out_dir: str | Path, attn_t: Coef | None = None) -> Path:
    """Stage 1 (order[0] ⊕ order[1], layer-wise t) then stage 2 (⊕ order[2] at t2); returns the final dir."""
    check_compatible({n: cfg.experts[n] for n in cfg.order})
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    t = cfg.attn_t if attn_t is None else attn_t
    first, second, third = (cfg.experts[n] for n in cfg.order)
    stage1 = run_slerp(slerp_config(first, second, attn_t=t, mlp_t=_complement(t), default_t=cfg.default_t,
                                    dtype=cfg.dtype), out_dir.with_name(out_dir.name + ".stage1"))
    final = run_slerp(slerp_config(stage1, third, attn_t=cfg.t2, mlp_t=cfg.t2, default_t=cfg.t2, dtype=cfg.dtype),
                      out_dir)
    if not cfg.keep_stage1:
        shutil.rmtree(stage1, ignore_errors=True)
    return final


def parse_score(stdout: str) -> float:
    """The score an eval command printed: the last ``score: <number>`` line, else a JSON ``{"score": x}``; else NaN."""
    lines = _SCORE_LINE.findall(stdout)
    if lines:
        return float(lines[-1])
    text = stdout.strip()
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        value = data.get("score") if isinstance(data, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return math.nan


def score_model(command: str, model_dir: str | Path, timeout_s: float = 3600) -> tuple[float, int, str]:
    """Run the user's eval command; returns (score, returncode, stderr tail). No score or a failure → NaN."""
    cmd = command.replace("{model_dir}", shlex.quote(str(model_dir)))
    try:
        proc = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return math.nan, -1, f"timed out after {timeout_s}s"
    score = parse_score(proc.stdout) if proc.returncode == 0 else math.nan
    err = proc.stderr[-500:]
    if proc.returncode == 0 and math.isnan(score):
        err = (err + "\nno `score: <number>` line or JSON {\"score\": ...} on stdout").strip()
    return score, proc.returncode, err


def _write_atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def grid_search(cfg: MergeConfig) -> Any:
    """Merge and score every ``grid`` candidate; write ``scores.csv``/``.parquet`` and ``best.json``.

    Raises:
        ConfigError: no candidate was scored (every merge is kept, the table written, no ``best.json``).
    """
    import polars as pl

    if cfg.grid is None or cfg.eval_command is None:
        raise ConfigError("grid_search needs `grid` and `eval_command` in the merge config")
    root = Path(cfg.output_dir)
    root.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    best_dir: Path | None = None
    best_score = -math.inf
    for t in cfg.grid:
        model_dir = two_stage_merge(cfg, root / f"attn_t={t:g}", attn_t=t)
        score, rc, err = score_model(cfg.eval_command, model_dir, cfg.eval_timeout_s)
        rows.append({"attn_t": t, "mlp_t": 1 - t, "default_t": cfg.default_t, "t2": cfg.t2,
                     "order": ",".join(cfg.order), "model_dir": str(model_dir), "score": score,
                     "returncode": rc, "stderr_tail": err})
        if not math.isnan(score) and score > best_score:
            previous, best_dir, best_score = best_dir, model_dir, score
            if not cfg.keep_candidates and previous is not None:
                shutil.rmtree(previous, ignore_errors=True)  # a better winner exists: the old one goes
        elif not cfg.keep_candidates and best_dir is not None:
            shutil.rmtree(model_dir, ignore_errors=True)  # a loser, and there is a winner
    if not cfg.keep_candidates and best_dir is not None:  # unscored merges made before the first winner
        for row in rows:
            if Path(row["model_dir"]) != best_dir:
                shutil.rmtree(row["model_dir"], ignore_errors=True)
    table = pl.DataFrame(rows)
    _write_atomic(root / "scores.csv", table.write_csv)
    _write_atomic(root / "scores.parquet", table.write_parquet)
    scored = table.filter(pl.col("score").is_not_nan())
    if not len(scored):
        first = rows[0]
        raise ConfigError(f"merge grid: none of {len(rows)} candidates was scored (e.g. attn_t={first['attn_t']:g}: "
                          f"exit {first['returncode']}, {first['stderr_tail'].strip()[-200:] or 'no output'}); "
                          f"eval_command must exit 0 and print `score: <number>`; merges kept in {root}")
    best = scored.sort("score", descending=True).row(0, named=True)
    _write_atomic(root / "best.json",
                  lambda p: p.write_text(json.dumps(best, ensure_ascii=False, indent=2), encoding="utf-8"))
    return table


def run_merge_config(cfg: MergeConfig) -> Path:
    """One merge into ``output_dir/merged``, or the grid search when ``grid`` is set (returns output_dir)."""
    if cfg.grid is not None:
        grid_search(cfg)
        return Path(cfg.output_dir)
    return two_stage_merge(cfg, Path(cfg.output_dir) / "merged")
