"""`fabrika train`: placeholder until the training engineer (fabrika.train) fills it in.

It must expose ``register(app: typer.Typer) -> None`` adding the command.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Adds nothing yet; the owning area replaces this module."""
