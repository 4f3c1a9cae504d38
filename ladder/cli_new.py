"""``ladder new`` and ``ladder new-family``: scaffold an idea folder or a family."""

from __future__ import annotations

from typing import Annotated

import typer

from ladder.cliutil import ctx_root, guard

__all__ = ["new", "new_family"]


@guard
def new(
    ctx: typer.Context,
    family: Annotated[str, typer.Argument(help="Family, e.g. cconv.")],
    slug: Annotated[str, typer.Argument(help="Kebab-case name, e.g. strip-two-pass.")],
) -> None:
    """Scaffold the next numbered idea: kernel.py, NOTES.md, records/."""
    from ladder.scaffold import new_idea

    dest = new_idea(family, slug, ctx_root(ctx))
    typer.echo(f"created {dest}")
    typer.echo(
        f"next: write the entry points in {dest.name}/kernel.py and the hypothesis in "
        f"NOTES.md, then `python -m ladder check {family} {dest.name[:3]}`"
    )


@guard
def new_family(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Family name, a lower-case identifier, e.g. kda.")],
) -> None:
    """Scaffold a family: family.py with every protocol hook, and ideas/000-fla."""
    from ladder.scaffold import new_family as scaffold_family

    dest = scaffold_family(name, ctx_root(ctx))
    typer.echo(f"created {dest}")
    typer.echo(
        f'next: write every hook in {dest.name}/family.py (docs/DESIGN.md "The family '
        f'contract"), then `python -m ladder new {name} <slug>` for idea 001'
    )
