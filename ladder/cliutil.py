"""What every ``ladder`` command shares: the console, the one-line error guard and the
``--root`` the app callback stored."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import typer

from ladder import records
from ladder.paths import LadderError

__all__ = ["CHECK_SHAPE_SETS", "console", "ctx_root", "guard"]

CHECK_SHAPE_SETS = ("small", "prod", "sweep", "all")


def console(stderr: bool = False) -> Any:
    """A rich console on stdout (or stderr), 200 columns wide when not a terminal."""
    from rich.console import Console

    con = Console(stderr=stderr, highlight=False)
    if not con.is_terminal:
        con = Console(stderr=stderr, highlight=False, width=200)
    return con


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn LadderError into its one-line message and exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except records.NoWinner as exc:
            typer.echo(f"no winner: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except LadderError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper


def ctx_root(ctx: typer.Context) -> Path | None:
    """The ``--root`` given to the app (resolved), or None for this checkout."""
    obj = ctx.obj or {}
    return obj.get("root")
