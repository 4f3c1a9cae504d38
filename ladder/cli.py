"""The ladder command line: ``python -m ladder
{new,new-family,check,bench,knobs,show,compare,board,winner}``.

Usage errors (unknown family or idea, an idea without its entry points, a --knob the idea
never reads, no GPU for a GPU command, a dirty tree) print one line on stderr saying what is
wrong and which command fixes it, and exit 2. ``check`` and ``bench`` exit 1 when the idea
is incorrect (or the bench errored); ``winner`` exits 1 when there is no winner.

``check --interpret`` refuses idea 000 (the family's baseline benched as an idea: for
cconv, fla's autotuned kernels) unless the family sets ``BASELINE_ON_INTERPRETER = True``;
the interpreter never runs the baseline.

The commands live by group in ladder.cli_new (new, new-family), ladder.cli_run (check, bench)
and ladder.cli_read (knobs, show, compare, board, winner); this module composes them into one
app, in that order, with the shared ``--root`` option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ladder.cli_new import new, new_family
from ladder.cli_read import board, compare, knobs, show, winner
from ladder.cli_run import bench, check, render_record

__all__ = ["app", "main", "render_record"]

app = typer.Typer(
    name="ladder",
    help="The research ladder: scaffold, check, bench and rank kernel ideas.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _main(
    ctx: typer.Context,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help="Repository root to read families from (default: this checkout).",
            envvar="LADDER_ROOT",
        ),
    ] = None,
) -> None:
    """The research ladder: ideas/NNN-slug folders per family, bench records, the board."""
    ctx.obj = {"root": root.resolve() if root is not None else None}


app.command()(new)
app.command("new-family")(new_family)
app.command()(check)
app.command()(bench)
app.command()(knobs)
app.command()(show)
app.command()(compare)
app.command()(board)
app.command()(winner)


def main() -> None:
    """Entry point of ``python -m ladder``."""
    app(prog_name="ladder")
