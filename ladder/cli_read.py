"""``ladder knobs``, ``show``, ``compare``, ``board`` and ``winner``: read an idea, its
records and the family's ranking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ladder import paths, records
from ladder.cliutil import console, ctx_root, guard

__all__ = ["board", "compare", "knobs", "show", "winner"]


def _value_text(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


@guard
def knobs(
    ctx: typer.Context,
    family: Annotated[str, typer.Argument(help="Family, e.g. cconv.")],
    idea: Annotated[str, typer.Argument(help="Idea: 1, 001 or 001-strip-onepass.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Every knob the idea reads (its modules and the modules it imports from other ideas): type, default, the
    value in effect here, what the family allows."""
    from rich.table import Table

    from ladder.prepare import knob_rows

    root = ctx_root(ctx)
    folder = paths.resolve_idea(family, idea, root)
    rows = knob_rows(family, folder, root)
    if as_json:
        typer.echo(json.dumps({"family": family, "idea": folder, "knobs": rows}, indent=2))
        return
    out = console()
    if not rows:
        out.print(f"{family}/{folder} reads no knobs")
        return
    table = Table(title=f"{family}/{folder} knobs (in effect: from the environment, else default)")
    for col in ("knob", "type", "default", "in effect", "allowed", "read at"):
        table.add_column(col, overflow="fold")
    for r in rows:
        effect = _value_text(r["value"]) + (" (set)" if r["set"] else "")
        if r["error"]:
            effect = f"{r['value']} (set, unusable: {r['error']})"
        table.add_row(
            r["key"],
            r["type"],
            _value_text(r["default"]),
            effect,
            r["allowed"] or "-",
            r["where"],
        )
    out.print(table)
    out.print(f"try values: python -m ladder bench {family} {folder[:3]} --knob KEY=v1,v2")


@guard
def show(
    ctx: typer.Context,
    family: Annotated[str, typer.Argument(help="Family, e.g. cconv.")],
    record: Annotated[str, typer.Argument(help="A record_id (or a unique prefix) or a path.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the record as stored.")] = False,
) -> None:
    """One record, readable: per shape the errors, and fwd / bwd / fwdbwd times of the idea
    and fla, their ratio, TB/s and fraction of the copy ceiling."""
    from ladder.recview import find_record, render_show

    rec = find_record(family, record, ctx_root(ctx))
    if as_json:
        typer.echo(json.dumps({k: v for k, v in rec.items() if not k.startswith("_")}, indent=2))
        return
    render_show(rec, console(), records.rank_shapes(paths.load_family(family, ctx_root(ctx))))
    typer.echo(f"record: {rec['_path']}")


@guard
def compare(
    ctx: typer.Context,
    family: Annotated[str, typer.Argument(help="Family, e.g. cconv.")],
    a: Annotated[str, typer.Argument(help="A record (id, prefix or path) or an idea.")],
    b: Annotated[str, typer.Argument(help="A record (id, prefix or path) or an idea.")],
    device: Annotated[
        str | None,
        typer.Option(help="For an idea: its best record on this device (default: the target)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Two records (an idea means its best record) shape by shape: each side's candidate time
    per direction and b / a; only shapes both have."""
    from ladder.recview import compare as compare_records
    from ladder.recview import render_compare, resolve_side

    root = ctx_root(ctx)
    ra = resolve_side(family, a, root, device)
    rb = resolve_side(family, b, root, device)
    cmp = compare_records(ra, rb)
    if as_json:
        typer.echo(json.dumps(cmp, indent=2))
        return
    render_compare(cmp, console())


@guard
def board(
    ctx: typer.Context,
    family: Annotated[str, typer.Argument(help="Family, e.g. cconv.")],
    plot: Annotated[
        Path | None, typer.Option(help="Also write a bandwidth plot (png/svg/pdf) here.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    device: Annotated[
        str | None,
        typer.Option(
            help="Device name substring (default: the family's target; '' = all); one that "
            "matches no record is an error (exit 2)."
        ),
    ] = None,
) -> None:
    """Rank a family's ideas from their committed records (CPU only)."""
    from ladder.board import build_board, plot_board, plot_path, render_board

    root = ctx_root(ctx)
    if plot is not None:
        plot = plot_path(plot)  # a bad --plot fails before anything is printed
    b = build_board(family, root, device=device)
    if device and all(r.record_id is None for r in b.rows):
        seen = sorted({d for r in b.rows for d in r.other_devices})
        raise paths.LadderError(
            f"no {family} record on a device matching {device!r} (records are on: "
            f"{', '.join(seen) or 'no device'}); pass one of those, or --device '' for every device"
        )
    if as_json:
        typer.echo(json.dumps(b.to_json(), indent=2))
    else:
        render_board(b, console())
    if plot is not None:
        written = plot_board(b, plot, root)
        if not as_json:
            typer.echo(f"plot: {written}")


@guard
def winner(
    ctx: typer.Context,
    family: Annotated[str, typer.Argument(help="Family, e.g. cconv.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    device: Annotated[
        str | None, typer.Option(help="Device name substring (default: the family's target).")
    ] = None,
) -> None:
    """Print the family's promotable winner, or why there is none (exit 1)."""
    root = ctx_root(ctx)
    try:
        w = records.winner(family, root, device=device)
    except records.NoWinner as exc:
        if as_json:
            typer.echo(json.dumps({"family": family, "winner": None, "reason": str(exc)}))
        raise
    rec = w.record
    info = {
        "family": family,
        "idea": w.idea,
        "record_id": rec["record_id"],
        "score": w.score,
        "rank_shapes": list(w.rank_shapes),
        "record_path": str(w.record_path),
        "device": rec["device"]["name"],
        "created": rec["created"],
        "commit": rec["commit"],
        "code_sha": rec["code_sha"],
        "knobs": rec["knobs"],
        "passed_over": w.passed_over,
    }
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    typer.echo(
        f"{family} winner: {w.idea} record {rec['record_id']} "
        f"({records.score_text(w.score, w.rank_shapes)} vs fla, "
        f"{rec['device']['name']}, {rec['created']}, commit {(rec['commit'] or '')[:12]})"
    )
    typer.echo(f"record: {w.record_path}")
    for line in w.passed_over:
        typer.echo(f"passed over: {line}")
