"""``fabrika stages [KIND]``: every stage kind with its config fields, types, defaults and descriptions.

``fabrika stages KIND`` also shows the stage's row contract: the columns it reads from its
input and writes (``fabrika.pipeline.contracts``), and the input files it preflights.

The text comes from the pydantic models (``Field(description=...)``), so the
command, the YAML validation and the code cannot disagree.
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Annotated, Any, Optional

import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from rich.markup import escape
from rich.table import Table

from fabrika.textutil.suggest import did_you_mean

COMMON = ("kind", "name", "input", "chunk_size", "max_items", "max_in_flight")


def type_name(annotation: Any) -> str:
    """``list[ToolSourceConfig] | None`` rather than ``typing.Optional[typing.List[...]]``."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    text = str(annotation).replace("typing.", "").replace("NoneType", "None")
    parts = re.split(r"('[^']*')", text)  # module prefixes go, quoted literals ('fc.plans') stay
    return "".join(p if i % 2 else re.sub(r"\b(?:[a-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", p) for i, p in enumerate(parts))


def _default(field: Any) -> str:
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return repr(value)


def model_fields(model: type[BaseModel], prefix: str = "", nested: bool = True) -> list[dict[str, str]]:
    """One dict per field (``name``, ``type``, ``default``, ``description``); nested models follow as ``a.b``."""
    out: list[dict[str, str]] = []
    for name, field in model.model_fields.items():
        out.append({"name": prefix + name, "type": type_name(field.annotation), "default": _default(field),
                    "description": field.description or ""})
        if not nested:
            continue
        for sub in _models_in(field.annotation):
            out += model_fields(sub, prefix=f"{prefix}{name}{'[]' if _is_list(field.annotation) else ''}.")
    return out


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (list, tuple) or any(
        typing.get_origin(a) in (list, tuple) for a in typing.get_args(annotation))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def stage_kinds() -> dict[str, Any]:
    from fabrika.pipeline import registry
    from fabrika.pipeline.stage import STAGES

    registry.load_modules()
    return dict(sorted(STAGES.items()))


def describe(cls: Any) -> str:
    """The first paragraph of the stage class's own docstring, else of its config class's."""
    doc = cls.__dict__.get("__doc__") or cls.Config.__dict__.get("__doc__") or ""
    return inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ")


def contract_rows(cls: Any) -> list[dict[str, str]]:
    """One dict per column the stage reads or writes (``direction``, ``column``, ``type``, ``required``, ``doc``)."""
    from fabrika.pipeline.columns import default_contract

    contract = default_contract(cls)
    out: list[dict[str, str]] = []
    for direction, cols in (("reads", contract.reads), ("writes", contract.writes)):
        if cols is None:
            out.append({"direction": direction, "column": "(undeclared)", "type": "", "required": "", "doc": ""})
            continue
        for col in cols:
            name = " | ".join((col.name, *col.alternatives))
            out.append({"direction": direction, "column": name, "type": col.type_label,
                        "required": "yes" if col.required else "no", "doc": col.doc})
        if not cols:
            out.append({"direction": direction, "column": "(none: a source stage)" if direction == "reads" else "(none)",
                        "type": "", "required": "", "doc": ""})
    if contract.carries:
        out.append({"direction": "writes", "column": "(every input column)", "type": "", "required": "", "doc": ""})
    if contract.open:
        out.append({"direction": "writes", "column": "(the input file's other fields)", "type": "", "required": "",
                    "doc": ""})
    return out


def _contract_table(name: str, cls: Any) -> Table:
    target = "the table it scores (joined on id)" if cls.annotates else "its own table"
    t = Table(title=escape(f"{name}: columns it reads from its input and writes to {target}"),
              title_justify="left")
    for col in ("", "column", "type", "required", "description"):
        t.add_column(col, overflow="fold")
    for row in contract_rows(cls):
        t.add_row(*(escape(row[c]) for c in ("direction", "column", "type", "required", "doc")))
    for spec in getattr(cls, "input_files", ()):
        t.add_row("file", escape(spec.key), escape(spec.format), "", escape(spec.what))
    return t


def register(app: typer.Typer) -> None:
    """Add ``stages`` to the fabrika app."""

    @app.command("stages")
    def stages_command(
        kind: Annotated[Optional[str], typer.Argument(help="One stage kind, e.g. fc.plans (default: all).")] = None,
    ) -> None:
        """List stage kinds with their config fields (type, default, description)."""
        from fabrika.cli.app import fail, out

        kinds = stage_kinds()
        if kind is not None and kind not in kinds:
            close = [k for k in kinds if kind.split(".")[0] in k]
            fail(f"unknown stage kind {kind!r}; known: {', '.join(close or kinds)}{did_you_mean(kind, kinds)}")
        chosen = {kind: kinds[kind]} if kind else kinds
        for name, cls in chosen.items():
            flags = [f for f, on in (("global", cls.global_stage), ("annotates", cls.annotates)) if on]
            t = Table(title=escape(f"{name}{' (' + ', '.join(flags) + ')' if flags else ''} — {describe(cls)}"),
                      title_justify="left", show_lines=kind is not None)
            for col in ("field", "type", "default", "description"):
                t.add_column(col, overflow="fold")
            for f in model_fields(cls.Config, nested=kind is not None):
                if f["name"] in COMMON and kind is None:
                    continue  # every stage has these; `fabrika stages KIND` shows them
                t.add_row(*(escape(f[c]) for c in ("name", "type", "default", "description")))
            out.print(t)
            if kind is not None:
                out.print(_contract_table(name, cls))
        if kind is None:
            out.print(f"{len(chosen)} stage kinds; every stage also takes {', '.join(COMMON[1:])} "
                      "(`fabrika stages KIND` for one kind in full)")
