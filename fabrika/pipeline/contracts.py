"""Row contracts: the columns a stage reads and writes, checked along the pipeline graph once.

Every stage class declares :attr:`~fabrika.pipeline.stage.Stage.reads` (the input
columns it needs) and :attr:`~fabrika.pipeline.stage.Stage.writes` (the columns of its
output rows) as :class:`fabrika.pipeline.columns.Column` tuples; a stage whose columns
depend on its config overrides :meth:`~fabrika.pipeline.stage.Stage.contract`.

:func:`check_contracts` walks the stages in execution order and builds, per table,
the columns a reader of that table sees: the stage's own ``writes`` (plus its input's
columns when it ``carries`` them), then every annotating stage (scorer) of the table
joined on ``id`` the way the store joins them (:meth:`fabrika.store.run.RunStore.scan`:
a scorer's ``status``/``reason``, and a score whose name is taken, get ``__<scorer>``).
An annotating stage reads the table it scores with the scorers listed before it. A
required column missing from an input, or a column whose declared type differs from the
writer's, is ONE line naming the stage, the column and the stage kinds that write it.
Stages that declare nothing (``reads``/``writes`` left ``None``, e.g. a plugin's) are
not checked and make their output table unknown, so nothing downstream is checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from fabrika.pipeline.columns import IMPLICIT_COLUMNS, Column, Contract, compatible, default_contract
from fabrika.pipeline.stage import STAGES

#: Columns an annotation join never brings (the store drops them: ``fabrika.store.run.JOIN_DROP``).
_JOIN_DROP = frozenset({"input_id", "llm_backend"})


@dataclass(frozen=True)
class _Source:
    column: Column
    stage: str  # stage name that wrote it


Table = dict[str, _Source]


def writers_of(column: str) -> list[str]:
    """Stage kinds whose declared ``writes`` include ``column`` (scorers marked), sorted."""
    out = []
    for kind, cls in sorted(STAGES.items()):
        names = {c.name for c in (default_contract(cls).writes or ())}
        if column in names:
            out.append(f"{kind} (scorer)" if cls.annotates else kind)
    return out


def _joined(base: Table | None, annotators: Sequence[str], own: Mapping[str, Table | None]) -> Table | None:
    """``base`` with ``annotators``' columns joined the way the store joins them."""
    if base is None:
        return None
    view = dict(base)
    taken = set(view) | IMPLICIT_COLUMNS
    for scorer in annotators:
        cols = own.get(scorer)
        if cols is None:
            return None  # an undeclared scorer: what the table holds is unknown
        for implicit in ("status", "reason"):
            key = f"{implicit}__{scorer}"
            view[key] = _Source(Column(key, str, required=implicit == "status"), scorer)
            taken.add(key)
        for name, src in cols.items():
            if name in _JOIN_DROP or name == "id":
                continue
            key = f"{name}__{scorer}" if name in ("status", "reason") or name in taken else name
            view[key] = _Source(Column(key, src.column.type, src.column.required, src.column.doc), scorer)
            taken.add(key)
    return view


def _inputs(stage: Any) -> list[str]:
    return [] if stage.input is None else [stage.input] if isinstance(stage.input, str) else list(stage.input)


def check_contracts(config: Any, order: Sequence[Any]) -> list[tuple[str, str, str]]:
    """``(stage name, field, message)`` per contract violation (see module docs).

    ``order`` is ``config.stages`` in execution order (``fabrika.pipeline.config.execution_order``):
    the config must be free of other errors (known kinds and inputs, no cycle).
    """
    stages = {s.stage_name: s for s in config.stages}
    annotators: dict[str, list[str]] = {}
    for s in config.stages:
        if STAGES[s.kind].annotates:
            annotators.setdefault(_inputs(s)[0], []).append(s.stage_name)
    own: dict[str, Table | None] = {}
    opened: set[str] = set()
    problems: list[tuple[str, str, str]] = []
    for s in order:
        name, cls = s.stage_name, STAGES[s.kind]
        contract = cls.contract(s)
        inputs = _inputs(s)
        views: dict[str, Table | None] = {}
        for src in inputs:
            peers = annotators.get(src, [])
            before = peers[: peers.index(name)] if cls.annotates else peers
            views[src] = _joined(own.get(src), before, own)
        if contract.reads is not None:
            for src, view in views.items():
                if view is None:
                    continue
                problem = _check_reads(s, contract, src, stages[src].kind, view, src in opened)
                if problem is not None:
                    problems.append((name, "input", problem))
        if contract.writes is None:
            own[name] = None
            continue
        table: Table = {}
        unknown = False
        if contract.carries:
            for carried in views.values():
                if carried is None:
                    unknown = True
                    break
                for key, source in carried.items():
                    table.setdefault(key, source)
        if unknown:
            own[name] = None
            continue
        if contract.open or (contract.carries and any(src in opened for src in inputs)):
            opened.add(name)  # holds columns nobody declared: a missing read is not reported
        for written in contract.writes:
            table[written.name] = _Source(written, name)
        own[name] = table
    return problems


def _check_reads(stage: Any, contract: Contract, src: str, src_kind: str, view: Table, open_view: bool) -> str | None:
    """The first broken read of ``stage`` against input ``src`` as one message, or None."""
    for col in contract.reads or ():
        names = (col.name, *col.alternatives)
        found = next((n for n in names if n in view or n in IMPLICIT_COLUMNS), None)
        if found is None:
            if not col.required or open_view:
                continue
            wanted = " or ".join(repr(n) for n in names)
            hint = contract.hints.get(col.name) or ", ".join(writers_of(col.name)) or "no known stage kind"
            return (f"{stage.kind} {stage.stage_name!r} reads column {wanted} ({col.type_label}) but its input "
                    f"{src!r} ({src_kind}) does not provide it; written by: {hint}")
        if found in IMPLICIT_COLUMNS or found not in view or found != col.name:
            continue  # an alternative column has a type of its own (a Dialogue, or a Sample's prompt)
        written = view[found]
        if not compatible(col.type, written.column.type):
            return (f"{stage.kind} {stage.stage_name!r} reads column {found!r} as {col.type_label} but "
                    f"{written.stage!r} writes it as {written.column.type_label} (input {src!r}, {src_kind})")
    return None


__all__ = ["check_contracts", "writers_of"]
