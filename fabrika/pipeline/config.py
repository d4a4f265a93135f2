"""The pipeline document: YAML → :class:`PipelineConfig`, with a validate step.

:func:`validate_file` returns EVERY violation (errors and warnings) before the
first LLM call, each naming the file and the key path (``stages[2].input``):
unknown keys, wrong types, unknown stage kinds, unknown ``input`` stages,
duplicate names, cycles, unknown gate groups or parameters, missing input files.

Paths inside stage configs are relative to the config file's directory; the run
directory (``run_dir``, default ``runs/<name>``) is relative to the working directory.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SerializeAsAny, ValidationError

from fabrika import gates
from fabrika.errors import ConfigError
from fabrika.llm.config import LLMConfig
from fabrika.pipeline import registry
from fabrika.pipeline.overrides import apply_overrides
from fabrika.pipeline.sections import RaySettings, ray_missing
from fabrika.pipeline.stage import STAGES, StageConfig
from fabrika.sandbox.policy import SandboxSettings
from fabrika.textutil.suggest import did_you_mean


class DatasetConfig(BaseModel):
    """Which stages' rows are the final samples."""

    model_config = ConfigDict(extra="forbid")

    stages: list[str] = Field(default_factory=list, description="Stages whose gated ok rows form the dataset.")
    version: str = Field(default="v1", description="Name of the version `fabrika run` materialises at the end.")


class PipelineConfig(BaseModel):
    """A whole pipeline: the LLM, the stages, the gate thresholds and the dataset."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Pipeline name; the default run directory is runs/<name>.", pattern=r"^[\w.-]+$")
    seed: int = Field(default=0, description="Global seed; every per-item RNG derives from it.")
    run_dir: Path | None = Field(default=None, description="Run directory; default runs/<name> (relative to the working dir).")
    plugins: list[str] = Field(default_factory=list, description="Your own modules to import (they register stages, "
                               "gates or sim responders); fabrika's own stage modules are always loaded.")
    llm: LLMConfig = Field(default_factory=LLMConfig, description="LLM engine config (fabrika.llm.config.LLMConfig).")
    max_in_flight: int = Field(default=256, ge=1, description="Items processed concurrently per stage (default for all stages).")
    max_parallel_stages: int = Field(
        default=4, ge=1, description="Stages run at once when their inputs are ready (independent branches overlap); 1 = one by one."
    )
    overlap: bool = Field(
        default=False, description="Let a per-item stage start on the shards its per-item upstream has already written "
        "instead of waiting for it to finish (the fleet does not drain at stage boundaries). Global stages and "
        "stages whose input has scorers still wait; the dataset is the same either way (docs/ARCHITECTURE.md).")
    stages: list[SerializeAsAny[StageConfig]] = Field(description="Stage configs, discriminated by `kind`.")
    filters: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Gate thresholds by group: filters.<group>.<param>.")
    dataset: DatasetConfig = Field(default_factory=DatasetConfig, description="Which stages form the final dataset.")
    export: dict[str, Any] = Field(default_factory=dict, description="Export settings, validated by fabrika.export.")
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings,
                                     description="How LLM-written code runs (isolation, timeout_s, workers, memory_mb), "
                                     "for every stage and the IF reward.")
    executor: Literal["local", "ray"] = Field(
        default="local", description="Where per-item CPU stages run: 'local' (this process) or 'ray' (worker actors "
        "of a Ray cluster; needs pip install 'fabrika[ray]'; see docs/RAY.md). LLM calls stay in the driver.")
    ray: RaySettings = Field(default_factory=RaySettings, description="Ray cluster, workers and vLLM engine actors "
                             "(used when executor: ray).")
    llm_workers: int = Field(
        default=1, ge=1, description="Processes that run each per-item LLM-calling stage: its items are split by a "
        "stable hash of their id over this many workers (local subprocesses, or Ray actors with executor: ray), "
        "each with its own engine client and journal, and every concurrency limit (endpoints' max_concurrency, "
        "llm.max_in_flight, max_in_flight) divided among every engine that may send at once (these workers, for "
        "each split stage that can run alongside another, and the driver when a global LLM stage may run next to "
        "one). The dataset is the same for any value (docs/ARCHITECTURE.md).")

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source: str = PrivateAttr(default="<config>")

    @property
    def base_dir(self) -> Path:
        return self._base_dir

    @property
    def source(self) -> str:
        return self._source

    @property
    def resolved_run_dir(self) -> Path:
        return self.run_dir if self.run_dir is not None else Path("runs") / self.name

    def resolve_path(self, value: str | Path) -> Path:
        """A stage config's path, relative to the config file's directory."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self._base_dir / p

    def stage(self, name: str) -> StageConfig:
        for s in self.stages:
            if s.stage_name == name:
                return s
        raise KeyError(name)


@dataclass(frozen=True)
class _PathResolver:
    """Stands in for the config when it failed to validate, so path checks still run."""

    base_dir: Path

    def resolve_path(self, value: str | Path) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p


@dataclass(frozen=True)
class Issue:
    """One violation: ``level`` error stops the run, warning is printed."""

    level: Literal["error", "warning"]
    path: str
    message: str
    file: str

    def __str__(self) -> str:
        return f"{self.file}: {self.level}: {self.path}: {self.message}"


def _loc(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the last key of ``loc`` (for 'allowed keys' messages)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if isinstance(current, type) and issubclass(current, BaseModel) else None
        if field is None:
            return None
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        nxt = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nxt is None:  # list[Model] / dict[str, Model]
            inner = [a for c in candidates for a in typing.get_args(c)]
            nxt = next((c for c in inner if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nxt is None:
            return None
        current = nxt
    return current


def _pydantic_issues(exc: ValidationError, prefix: str, model: type[BaseModel], file: str) -> list[Issue]:
    issues = []
    for err in exc.errors():
        path = _loc(prefix, tuple(err["loc"]))
        if err["type"] == "extra_forbidden":
            owner = _model_at(model, tuple(err["loc"]))
            msg = (f"unknown key; allowed: {', '.join(owner.model_fields)}{did_you_mean(err['loc'][-1], owner.model_fields)}"
                   if owner else "unknown key")
        elif err["type"] == "missing":
            msg = "required key is missing"
        else:
            msg = f"{err['msg']} (got {err.get('input')!r})"
        issues.append(Issue("error", path, msg, file))
    return issues


def inputs_of(stage: StageConfig) -> list[str]:
    if stage.input is None:
        return []
    return [stage.input] if isinstance(stage.input, str) else list(stage.input)


def _is_path(ann: Any) -> bool:
    return ann is Path or (typing.get_origin(ann) in (typing.Union, types.UnionType) and Path in typing.get_args(ann))


def _paths_in(model: BaseModel, prefix: str) -> Iterator[tuple[str, Any]]:
    """``(key path, value)`` of every ``Path``-typed field, nested models and lists of models included."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        key = f"{prefix}{name}"
        if _is_path(info.annotation):
            if value is not None:
                yield key, value
        elif isinstance(value, BaseModel):
            yield from _paths_in(value, f"{key}.")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from _paths_in(item, f"{key}[{i}].")


def check_paths(cfg: StageConfig, config: Any) -> list[tuple[str, str]]:
    """Every ``Path``-typed field of a stage config (nested too) must name an existing file or directory."""
    missing = []
    for key, value in _paths_in(cfg, ""):
        resolved = config.resolve_path(value)
        if not resolved.exists():
            missing.append((key, f"input file not found: {resolved}"))
    return missing


def stage_dependencies(config: PipelineConfig) -> dict[str, set[str]]:
    """Stages each stage waits for: its inputs, and the annotators of its inputs (an annotator
    waits only for the annotators of the same table listed before it)."""
    names = [s.stage_name for s in config.stages]
    deps: dict[str, set[str]] = {n: set(inputs_of(s)) & set(names) for n, s in zip(names, config.stages)}
    ann_of: dict[str, list[str]] = {}
    for s in config.stages:
        if STAGES.get(s.kind) is not None and STAGES[s.kind].annotates:
            for src in inputs_of(s):
                ann_of.setdefault(src, []).append(s.stage_name)
    for s in config.stages:
        cls = STAGES.get(s.kind)
        for src in inputs_of(s):
            peers = ann_of.get(src, [])
            if cls is not None and cls.annotates:
                deps[s.stage_name].update(peers[: peers.index(s.stage_name)])
            else:
                deps[s.stage_name].update(peers)
    return deps


def execution_order(config: PipelineConfig) -> list[StageConfig]:
    """Stages in dependency order (stable w.r.t. the document), see :func:`stage_dependencies`."""
    names = [s.stage_name for s in config.stages]
    deps = stage_dependencies(config)
    order: list[str] = []
    done: set[str] = set()
    while len(order) < len(names):
        ready = [n for n in names if n not in done and deps[n] <= done]
        if not ready:
            cycle = [n for n in names if n not in done]
            raise ConfigError(f"stages form a cycle through: {', '.join(cycle)}")
        order.append(ready[0])
        done.add(ready[0])
    return [config.stage(n) for n in order]


def validate_data(data: Any, file: str, base_dir: Path) -> tuple[PipelineConfig | None, list[Issue]]:
    """Validate a loaded YAML document; see :func:`validate_file`."""
    issues: list[Issue] = []
    err = lambda path, msg: issues.append(Issue("error", path, msg, file))  # noqa: E731
    warn = lambda path, msg: issues.append(Issue("warning", path, msg, file))  # noqa: E731
    if not isinstance(data, dict):
        err("(document)", f"expected a mapping with name/llm/stages, got {type(data).__name__}")
        return None, issues
    plugins = data.get("plugins") or []
    for i, mod in enumerate(plugins if isinstance(plugins, list) else []):
        if str(mod) in registry.STAGE_MODULES:
            warn(f"plugins[{i}]", f"{mod!r} is always loaded (fabrika.pipeline.registry.STAGE_MODULES); remove the line")
        for m, why in registry.load_modules([str(mod)]):
            err(f"plugins[{i}]", f"cannot import {m!r}: {why}")
    for m, why in registry.load_modules():
        err("(stage registry)",
            f"cannot import stage module {m!r}: {why}; fix it or remove it from fabrika.pipeline.registry.STAGE_MODULES")

    raw_stages = data.get("stages")
    stage_objs: list[StageConfig] = []
    raw_names: list[str] = []
    if not isinstance(raw_stages, list) or not raw_stages:
        err("stages", "expected a non-empty list of stage configs")
        raw_stages = []
    for i, raw in enumerate(raw_stages):
        where = f"stages[{i}]"
        if not isinstance(raw, dict):
            err(where, f"expected a mapping with 'kind', got {raw!r}")
            continue
        kind = raw.get("kind")
        raw_names.append(str(raw.get("name") or kind))
        if kind not in STAGES:
            err(f"{where}.kind", f"unknown stage kind {kind!r}; known: {', '.join(sorted(STAGES))}{did_you_mean(kind, STAGES)}")
            continue
        Config = STAGES[kind].Config
        try:
            stage_objs.append(Config.model_validate(raw))
        except ValidationError as exc:
            issues.extend(_pydantic_issues(exc, where, Config, file))

    top = {k: v for k, v in data.items() if k != "stages"}
    config: PipelineConfig | None = None
    try:
        config = PipelineConfig.model_validate({**top, "stages": stage_objs})
    except ValidationError as exc:
        issues.extend(_pydantic_issues(exc, "", PipelineConfig, file))
    if config is not None:
        config._base_dir = base_dir
        config._source = file

    # cross-stage checks on the names the document uses
    seen: dict[str, int] = {}
    for i, name in enumerate(raw_names):
        if name in seen:
            err(f"stages[{i}].name", f"duplicate stage name {name!r} (also stages[{seen[name]}]); give each a unique name")
        seen.setdefault(name, i)
    idx = {id(s): raw_names.index(s.stage_name) for s in stage_objs}
    resolver: Any = config if config is not None else _PathResolver(base_dir)
    consumed: set[str] = set()
    for s in stage_objs:
        i = idx[id(s)]
        cls = STAGES[s.kind]
        for src in inputs_of(s):
            consumed.add(src)
            if src not in seen:
                err(f"stages[{i}].input", f"unknown input stage {src!r}; stages: {', '.join(raw_names)}")
        if cls.annotates and len(inputs_of(s)) != 1:
            err(f"stages[{i}].input", f"annotating stage {s.stage_name!r} must have exactly one input stage")
        for field, msg in check_paths(s, resolver):
            err(f"stages[{i}].{field}", msg)
        for field, msg in cls.check_config(s, resolver):
            err(f"stages[{i}].{field}", msg)
    if config is not None:  # inputs that validate but will not make the run the config asks for
        from fabrika.pipeline.input_checks import scale_warnings

        for where, msg in scale_warnings(config):
            warn(where, msg)
    # dataset, filters and export are checked from the raw document so other errors do not hide theirs
    raw_ds = data.get("dataset")
    ds_stages = raw_ds.get("stages") if isinstance(raw_ds, dict) else None
    ds_stages = [str(n) for n in ds_stages] if isinstance(ds_stages, list) else []
    annotating = {s.stage_name for s in stage_objs if STAGES[s.kind].annotates}
    for j, name in enumerate(ds_stages):
        if name not in seen:
            err(f"dataset.stages[{j}]", f"unknown stage {name!r}; stages: {', '.join(raw_names)}")
        elif name in annotating:
            err(f"dataset.stages[{j}]", f"{name!r} is an annotating stage (scores), not samples; name the stage it annotates")
    if not ds_stages:
        warn("dataset.stages", "empty: `fabrika run` will not materialise a dataset")
    raw_filters = data.get("filters")
    for group, params in (raw_filters.items() if isinstance(raw_filters, dict) else []):
        try:
            gates.validate_thresholds({group: params})
        except ConfigError as exc:
            where, _, msg = str(exc).partition(": ")  # the message starts with its key path
            err(where if where.startswith("filters.") and msg else f"filters.{group}", msg or str(exc))
    for section, check in registry.section_checks().items():
        raw = data.get(section)
        if isinstance(raw, dict):  # a non-mapping is already reported by the PipelineConfig check
            for where, msg in check(raw):
                err(where, msg)
    if config is not None and not any(i.level == "error" for i in issues):
        try:
            order = execution_order(config)
        except ConfigError as exc:
            err("stages", str(exc))
        else:  # the plan is a graph now: check every stage's columns along it, then read every input file
            from fabrika.pipeline.contracts import check_contracts
            from fabrika.pipeline.preflight import preflight

            for name, field, msg in check_contracts(config, order):
                err(f"stages[{raw_names.index(name)}].{field}", msg)
            reported = {i.path for i in issues if i.level == "error"}
            for i, s in enumerate(config.stages):
                for field, msg in preflight(s, STAGES[s.kind].input_files, config):
                    if f"stages[{i}].{field}" not in reported:  # a stage's own check may have read it already
                        err(f"stages[{i}].{field}", msg)
    for s in stage_objs:
        if s.stage_name not in consumed and s.stage_name not in ds_stages and not STAGES[s.kind].annotates:
            warn(f"stages[{idx[id(s)]}]", f"output of {s.stage_name!r} is used by no stage and not in dataset.stages")
    if config is not None and config.executor == "ray" and (missing := ray_missing()):
        err("executor", missing)
    if config is not None:
        for where, msg in llm_workers_problems(config):
            err(where, msg)
    if config is not None:
        known = {s.stage_name for s in config.stages} | {s.kind for s in config.stages}
        for i, name in enumerate(config.ray.driver_stages):
            if name not in known:
                err(f"ray.driver_stages[{i}]", f"{name!r} is no stage name or kind of this pipeline; "
                    "list the names or kinds of stages to keep in the driver")
    if any(i.level == "error" for i in issues):
        return None, issues
    return config, issues


def validate_file(path: str | Path, overrides: Sequence[str] = ()) -> tuple[PipelineConfig | None, list[Issue]]:
    """Load and validate a YAML pipeline (with ``--set`` overrides, see :mod:`fabrika.pipeline.overrides`);
    returns the config (``None`` on errors) and all issues."""
    path = Path(path)
    file = str(path)
    if not path.is_file():
        return None, [Issue("error", "(file)", "config file not found", file)]
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(file)"
        return None, [Issue("error", where, f"invalid YAML: {getattr(exc, 'problem', exc)}", file)]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Issue("error", "(file)", f"cannot read: {exc}", file)]
    try:
        data = apply_overrides(data, overrides)
    except ConfigError as exc:
        return None, [Issue("error", "--set", str(exc), file)]
    return validate_data(data, file, path.resolve().parent)


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> PipelineConfig:
    """Validated config or :class:`ConfigError` whose message lists every error, one per line."""
    config, issues = validate_file(path, overrides)
    errors = [str(i) for i in issues if i.level == "error"]
    if config is None:
        raise ConfigError("\n".join(errors))
    return config


def validate(path: str | Path) -> list[Issue]:
    """Every error and warning of the pipeline at ``path`` (see :func:`validate_file`)."""
    return validate_file(path)[1]


def uses_sandbox(config: PipelineConfig) -> bool:
    """Whether a stage of ``config`` runs LLM-written code (its class sets ``uses_sandbox = True``)."""
    return any(getattr(STAGES.get(s.kind), "uses_sandbox", False) for s in config.stages)


def sandbox_problem(config: PipelineConfig) -> str | None:
    """The fail-closed line (:data:`fabrika.sandbox.policy.FAIL_CLOSED_MESSAGE`) when this pipeline
    would run LLM-written code of a real model without bubblewrap; None when it may start."""
    if not uses_sandbox(config):
        return None
    from fabrika.sandbox.policy import isolation_problem

    return isolation_problem(config.sandbox, configured_backend(config))


def stage_layout(config: PipelineConfig) -> dict[str, dict[str, Any]]:
    """Per stage name: its kind, inputs and whether it annotates or runs globally (the manifest's ``layout``)."""
    return {
        s.stage_name: {
            "kind": s.kind,
            "inputs": inputs_of(s),
            "annotates": STAGES[s.kind].annotates,
            "global": STAGES[s.kind].global_stage,
        }
        for s in config.stages
    }


def configured_backend(config: PipelineConfig) -> str:
    """The ``llm.backend`` the document names (``openai``, ``vllm``, ``sim``)."""
    llm = config.llm
    value = llm.get("backend") if isinstance(llm, dict) else getattr(llm, "backend", None)
    return str(getattr(value, "name", value) or "unknown")


def _ancestors(deps: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}

    def visit(name: str) -> set[str]:
        if name not in out:
            out[name] = set()
            for d in deps.get(name, ()):
                out[name] |= {d} | visit(d)
        return out[name]

    for name in deps:
        visit(name)
    return out


def _largest_antichain(names: list[str], before: dict[str, set[str]]) -> int:
    """The most of ``names`` that can run at once: no one waits for another (Dilworth: ``len - matching``)."""
    match: dict[str, str] = {}  # later stage -> the earlier stage its chain comes from

    def augment(a: str, seen: set[str]) -> bool:
        for b in names:
            if a in before.get(b, ()) and b not in seen:
                seen.add(b)
                if b not in match or augment(match[b], seen):
                    match[b] = a
                    return True
        return False

    return len(names) - sum(augment(a, set()) for a in names)


def limit_shares(config: PipelineConfig) -> tuple[int, bool]:
    """``(engines, driver_overlaps)``: how many engine clients may send at once while a split stage runs
    (each split stage's ``llm_workers`` workers, times the most split stages that can run together, plus
    one for the driver when ``driver_overlaps``: an LLM stage it runs may run next to a split stage).

    A stage is split when it calls the LLM per item (:func:`fabrika.pipeline.llm_workers.uses_llm_workers`);
    an LLM-calling global stage runs in the driver. Two stages overlap unless one depends on the other
    (directly or through others: a dependent starts after, and a streaming consumer finishes after, its
    upstream), and not at all with ``max_parallel_stages: 1``.
    """
    n = config.llm_workers
    if n <= 1:
        return 1, False
    split: list[str] = []
    driver: list[str] = []
    for s in config.stages:
        cls = STAGES.get(s.kind)
        if cls is None or not getattr(cls, "calls_llm", True):
            continue
        (driver if cls.global_stage else split).append(s.stage_name)
    if not split:
        return n, False
    before = _ancestors(stage_dependencies(config))
    parallel = config.max_parallel_stages > 1
    together = min(_largest_antichain(split, before), config.max_parallel_stages) if parallel else 1
    overlaps = parallel and any(d not in before.get(x, ()) and x not in before.get(d, ()) for d in driver for x in split)
    return n * together + int(overlaps), overlaps


def llm_workers_problems(config: PipelineConfig) -> list[tuple[str, str]]:
    """``(field, message)`` for an ``llm_workers`` that cannot be honoured (``fabrika validate``)."""
    n = config.llm_workers
    if n <= 1:
        return []
    out = []
    if config.llm.backend == "vllm":
        out.append(("llm_workers", f"llm_workers={n} with llm.backend 'vllm' would load the model once per "
                    "worker process; serve it (vllm serve) and use backend 'openai', or set llm_workers: 1"))
    engines, driver = limit_shares(config)
    who = f"llm_workers={n} processes" if engines == n else (
        f"{engines} engine clients ({engines - int(driver)} llm_workers of split stages that may run at once"
        f"{' + the driver, whose LLM stage may run next to one' if driver else ''})")
    for i, ep in enumerate(config.llm.endpoints):
        if ep.max_concurrency < engines:
            out.append((f"llm.endpoints[{i}].max_concurrency",
                        f"{ep.max_concurrency} cannot be divided among {who} without passing it; raise it to at "
                        f"least {engines} or lower llm_workers"))
    return out


#: Keys that do not change what a run produces; left out of :func:`config_hash`.
HASH_EXCLUDED_TOP = ("run_dir", "max_in_flight", "max_parallel_stages", "overlap", "sandbox", "executor", "ray",
                     "llm_workers")
HASH_EXCLUDED_STAGE = ("chunk_size", "max_in_flight")


def config_hash(config: PipelineConfig) -> str:
    """Hash of what changes the output (not where it is written, nor how many items run at once)."""
    from fabrika.schemas.ids import stable_id

    data = config.model_dump(mode="json", exclude=set(HASH_EXCLUDED_TOP))
    data["stages"] = [{k: v for k, v in s.items() if k not in HASH_EXCLUDED_STAGE} for s in data["stages"]]
    return stable_id(data)


__all__ = [
    "DatasetConfig",
    "Issue",
    "PipelineConfig",
    "config_hash",
    "execution_order",
    "stage_dependencies",
    "stage_layout",
    "inputs_of",
    "limit_shares",
    "llm_workers_problems",
    "load_config",
    "sandbox_problem",
    "uses_sandbox",
    "validate",
    "validate_data",
    "validate_file",
]
