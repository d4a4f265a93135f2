"""The ``fabrika`` entry point: ``fabrika browse RUN`` without the rest of the CLI, everything else through typer.

``fabrika browse`` is the one command whose start is waited on (command → first rows of a 300K-row run), and
the full app (typer, rich, pydantic configs and every command module) costs more CPU to import than the
browse server's first page. So a plain ``browse RUN [--port N] [--version V]`` is parsed here and served by
:mod:`fabrika.export.explorer_server` directly; anything else (``--help``, a typo, an out-of-range port, a
missing argument) goes to the typer app, so its messages and exit codes stay the CLI's own. The typer
``browse`` command (:mod:`fabrika.cli.report_cmd`) is the same command and stays the documented one.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

OPTIONS = {"--port": "port", "--version": "version"}


def lean_browse_args(argv: Sequence[str]) -> dict[str, Any] | None:
    """``browse`` arguments this entry serves itself, or ``None`` (the typer app parses them).

    Only ``RUN``, ``--port N`` (0–65535) and ``--version V`` (each at most once, ``--opt=value`` too) are taken;
    options may come before or after ``RUN``, as typer allows."""
    if not argv or argv[0] != "browse":
        return None
    got: dict[str, Any] = {}
    run: str | None = None
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if name in OPTIONS:
            key = OPTIONS[name]
            if key in got:
                return None
            if not eq:
                if not rest:
                    return None
                value = rest.pop(0)
            got[key] = value
        elif arg.startswith("-") or run is not None:
            return None  # --help, an unknown option, a second argument: typer says what is wrong
        else:
            run = arg
    if run is None:
        return None
    port = got.get("port", "8765")
    if not port.isascii() or not port.isdigit() or not 0 <= int(port) <= 65535:
        return None
    return {"run_dir": run, "port": int(port), "version": got.get("version")}


def browse(args: dict[str, Any]) -> None:
    """Serve the explorer until Ctrl-C; a user error is the CLI's one ``error:`` line and exit 2."""
    from pathlib import Path

    from fabrika.errors import StoreError
    from fabrika.export.explorer_server import serve

    port = args["port"]
    try:
        serve(Path(args["run_dir"]), args["version"], port,
              ready=lambda url: print(f"browse: {url} (Ctrl-C stops)", flush=True))
    except StoreError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; pass --port N (0: any free port)")
    except KeyboardInterrupt:
        print("browse: stopped", flush=True)


def _fail(message: str) -> None:
    """The CLI's own error printing (rich, only now imported)."""
    import typer

    from fabrika.cli.app import fail

    try:
        fail(message)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)


def main() -> None:
    args = lean_browse_args(sys.argv[1:])
    if args is not None:
        browse(args)
        return
    from fabrika.cli.app import main as app_main

    app_main()
