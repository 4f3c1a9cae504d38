"""``ladder board``: one row per idea from its committed records, the winner marked.

An idea's row shows its best record on the chosen device: the best promotable one (passed,
clean, current code) by the family's rank score (the winner's: the prod ratio, or the
geometric mean of the ratios at its RANK_SHAPES), else the best passed one, else its latest
record (so an idea whose only records are "incorrect" or "error" still shows up, with that
status). A passed row whose code, at the same knobs, failed the check in another record (at
another seed) is named under the table with that record and its seed: the check is
statistical for outputs it pools over seeds, and a pass at one seed is not one at every seed.

The per-shape view (the plot, and ``shapes`` in the JSON) also draws on the idea's other
records of the same code: a bench of ``--shapes prod`` and one of ``--shapes sweep`` are two
records, and the plot shows both. Per shape name it takes the newest passed record with the
best record's code_sha, device name and dirty flag (see :func:`shape_points`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ladder import paths, records
from ladder.contract import missing_promote_cases, promote_cases

__all__ = [
    "Board",
    "BoardRow",
    "ShapePoint",
    "best_record",
    "board_figure",
    "build_board",
    "plot_board",
    "plot_formats",
    "plot_path",
    "row_for",
    "shape_points",
]


@dataclass
class BoardRow:
    """One idea. Times in ms at the prod shape (candidate and fla), ratios fla/candidate
    (> 1: faster than fla), fractions of the record's copy ceiling, err_ratio the worst over
    outputs and shapes. Host time per call in us (fwd without autograd, fwd+bwd with it, and
    the torch-op floor) and peak memory of one fwd+bwd in bytes, at prod, where the record
    has them. rank_score: the record's :func:`ladder.records.rank_score` over the family's
    rank shapes (equal to prod_ratio for a family without RANK_SHAPES; None when the record
    lacks one of them). Everything is None when the idea has no record on the device.
    baseline: the idea is the family's baseline (``000-*``), shown but never promotable;
    stale_why: for a stale record, which files differ from the record's code; missing_cases:
    the cases of the family's PROMOTE_CASES the idea does not implement (then never
    promotable; empty when it implements them all or the family sets none);
    cases_unreadable: its kernel.py's CASES is not a literal tuple of strings, so the
    winner cannot read it (then every promoted case counts as missing); other_devices: the
    device names of the idea's records on devices the board does not show, sorted."""

    idea: str
    records: int
    record_id: str | None = None
    status: str | None = None
    promotable: bool = False
    dirty: bool | None = None
    stale: bool | None = None
    fwd_ms: float | None = None
    fla_fwd_ms: float | None = None
    bwd_ms: float | None = None
    fla_bwd_ms: float | None = None
    fwd_ratio: float | None = None
    bwd_ratio: float | None = None
    prod_ratio: float | None = None
    rank_score: float | None = None
    fwd_fraction_of_copy: float | None = None
    bwd_fraction_of_copy: float | None = None
    err_ratio: float | None = None
    device: str | None = None
    created: str | None = None
    code_unchanged_since: str | None = None
    winner: bool = False
    baseline: bool = False
    stale_why: str | None = None
    host_fwd_us: float | None = None
    fla_host_fwd_us: float | None = None
    host_fwdbwd_us: float | None = None
    fla_host_fwdbwd_us: float | None = None
    torch_op_us: float | None = None
    peak_mem_bytes: int | None = None
    fla_peak_mem_bytes: int | None = None
    missing_cases: list[str] = field(default_factory=list)
    cases_unreadable: bool = False
    other_devices: list[str] = field(default_factory=list)
    incorrect_same_code: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ShapePoint:
    """One idea at one shape, from one passed record. Times are medians in ms (candidate and
    fla, timed side by side in that record); bandwidths in TB/s are min_bytes / median time;
    fractions are of the record's own copy ceiling (``copy_ceiling_TBps``, TB/s). ``fields``
    holds the record's shape fields other than the name (cconv: B, T, D, W, dtypes)."""

    idea: str
    shape: str
    record_id: str
    fields: dict[str, Any]
    copy_ceiling_TBps: float
    fwd_ms: float
    fla_fwd_ms: float
    bwd_ms: float
    fla_bwd_ms: float
    fwd_TBps: float
    fla_fwd_TBps: float
    bwd_TBps: float
    fla_bwd_TBps: float
    fwd_fraction_of_copy: float
    bwd_fraction_of_copy: float


@dataclass
class Board:
    """The board of a family on ``device`` (a name substring; "" = every device). ``shapes``
    holds every idea's :class:`ShapePoint` list (ideas in row order); ``rank_shapes`` the
    shape names the family ranks on (:func:`ladder.records.rank_shapes`)."""

    family: str
    device: str
    rows: list[BoardRow]
    winner: records.Winner | None
    no_winner: str | None
    shapes: list[ShapePoint] = field(default_factory=list)
    rank_shapes: tuple[str, ...] = ("prod",)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: family, device, rank_shapes, rows (each with its prod_ratio
        and rank_score), shapes (per idea and shape), winner (or null; its score is the rank
        score) and no_winner (reason)."""
        win = None
        if self.winner is not None:
            win = {
                "idea": self.winner.idea,
                "record_id": self.winner.record["record_id"],
                "score": self.winner.score,
                "record_path": str(self.winner.record_path),
            }
        return {
            "family": self.family,
            "device": self.device,
            "rank_shapes": list(self.rank_shapes),
            "rows": [asdict(r) for r in self.rows],
            "shapes": [asdict(p) for p in self.shapes],
            "winner": win,
            "no_winner": self.no_winner,
        }


def _worst_err_ratio(rec: dict) -> float | None:
    """The worst error ratio to fla over shapes and outputs; an output judged on errors
    pooled over seeds (ladder.check) counts with its pooled ratio."""
    vals = []
    for s in rec.get("shapes", []):
        c = s.get("correctness", {})
        pooled = c.get("pooled") or {}
        for out, v in (c.get("err_ratio") or {}).items():
            if out in pooled:
                v = pooled[out].get("err_ratio")
            if isinstance(v, (int, float)) and math.isfinite(v):
                vals.append(v)
    return max(vals) if vals else None


def _incorrect_same_code(rec: dict, recs: list[dict]) -> list[dict[str, Any]]:
    """The records among ``recs`` that ran ``rec``'s code (code_sha) at ``rec``'s knobs and
    failed the correctness check ("incorrect"), oldest first: {record_id, seed, err_ratio}
    each (err_ratio: :func:`_worst_err_ratio`). A passed row with such records passed at
    some seeds only; the board names them under the table."""
    return [
        {"record_id": r["record_id"], "seed": r.get("seed"), "err_ratio": _worst_err_ratio(r)}
        for r in recs
        if r["status"] == "incorrect"
        and r["code_sha"] == rec["code_sha"]
        and (r.get("knobs") or {}) == (rec.get("knobs") or {})
    ]


def best_record(
    recs: list[dict], is_current: Any, shapes: tuple[str, ...] = ("prod",)
) -> tuple[dict | None, bool]:
    """(best record, promotable) among one idea's records (oldest first); see module doc.
    is_current(rec) says whether the record's code_sha is the idea's current code; records
    rank by :func:`ladder.records.rank_score` over ``shapes`` (the family's
    :func:`ladder.records.rank_shapes`, as the winner ranks them)."""
    if not recs:
        return None, False

    def ranked(pool: list[dict]) -> dict | None:
        scored = [(records.rank_score(r, shapes), r) for r in pool]
        scored = [(s, r) for s, r in scored if s is not None]
        if not scored:
            return None
        return min(scored, key=lambda sr: (-sr[0], sr[1]["created"], sr[1]["record_id"]))[1]

    passed = [r for r in recs if r["status"] == "passed"]
    promo = ranked([r for r in passed if not r["dirty"] and is_current(r)])
    if promo is not None:
        return promo, True
    any_passed = ranked(passed)
    if any_passed is not None:
        return any_passed, False
    return recs[-1], False


def row_for(
    folder: str,
    recs: list[dict],
    is_current: Any,
    explain: Any = None,
    shapes: tuple[str, ...] = ("prod",),
) -> BoardRow:
    """The board row of one idea from its records on the device. explain(record), when
    given, says why a stale record is stale (:func:`ladder.records.explain_stale`); shapes:
    the family's rank shapes (:func:`best_record`)."""
    row = BoardRow(idea=folder, records=len(recs), baseline=records.is_baseline(folder))
    rec, promotable = best_record(recs, is_current, shapes)
    if rec is None:
        return row
    row.record_id = rec["record_id"]
    row.status = rec["status"]
    row.promotable = promotable and not row.baseline
    row.dirty = rec["dirty"]
    row.stale = not is_current(rec)
    if row.stale and explain is not None:
        row.stale_why = explain(rec)
    row.device = rec["device"]["name"]
    row.created = rec["created"]
    row.code_unchanged_since = rec["code_unchanged_since"]
    row.err_ratio = _worst_err_ratio(rec)
    if rec["status"] == "passed":
        row.incorrect_same_code = _incorrect_same_code(rec, recs)
    row.prod_ratio = records.prod_ratio(rec)
    row.rank_score = records.rank_score(rec, shapes)
    prod = next((s for s in rec["shapes"] if s["name"] == "prod"), None)
    if prod is not None:
        for direction in ("fwd", "bwd"):
            t = prod.get(direction)
            if not t:
                continue
            setattr(row, f"{direction}_ms", t["candidate_ms"]["median"])
            setattr(row, f"fla_{direction}_ms", t["baseline_ms"]["median"])
            setattr(row, f"{direction}_ratio", t["ratio"])
            setattr(row, f"{direction}_fraction_of_copy", t["fraction_of_copy"])
        host = prod.get("host_us")
        if host:
            row.host_fwd_us = host["fwd"]["candidate"]
            row.fla_host_fwd_us = host["fwd"]["baseline"]
            row.host_fwdbwd_us = host["fwdbwd"]["candidate"]
            row.fla_host_fwdbwd_us = host["fwdbwd"]["baseline"]
            row.torch_op_us = host.get("torch_op")
        mem = prod.get("peak_mem_bytes")
        if mem:
            row.peak_mem_bytes = mem["candidate"]
            row.fla_peak_mem_bytes = mem["baseline"]
    return row


def _pair(a: float | None, b: float | None, scale: float, spec: str) -> str:
    """ "a/b" scaled and formatted; "-" when the record lacks them."""
    if a is None or b is None:
        return "-"
    return f"{format(a / scale, spec)}/{format(b / scale, spec)}"


def _tbps(min_bytes: int, ms: float) -> float:
    return min_bytes / (ms * 1e-3) / 1e12


def shape_points(folder: str, recs: list[dict], best: dict | None) -> list[ShapePoint]:
    """The per-shape view of one idea: for each shape name, the entry of the newest passed
    record (``recs`` oldest first) whose code_sha, device name and dirty flag equal
    ``best``'s (so a clean best record is never joined by a dirty bench of the same code).
    Shapes come in order of first appearance over those records, oldest first. Empty when
    ``best`` is None or not passed."""
    if best is None or best["status"] != "passed":
        return []
    chosen: dict[str, tuple[dict, dict]] = {}
    for rec in recs:
        if (
            rec["status"] == "passed"
            and rec["code_sha"] == best["code_sha"]
            and rec["device"]["name"] == best["device"]["name"]
            and rec["dirty"] == best["dirty"]
        ):
            for s in rec["shapes"]:
                chosen[s["name"]] = (rec, s)  # a newer record replaces the entry in place
    out = []
    for name, (rec, s) in chosen.items():
        fwd, bwd = s["fwd"], s["bwd"]
        out.append(
            ShapePoint(
                idea=folder,
                shape=name,
                record_id=rec["record_id"],
                fields={
                    k: v for k, v in s.items() if k != "name" and k not in records.SHAPE_RESULT_KEYS
                },
                copy_ceiling_TBps=rec["copy_ceiling_TBps"],
                fwd_ms=fwd["candidate_ms"]["median"],
                fla_fwd_ms=fwd["baseline_ms"]["median"],
                bwd_ms=bwd["candidate_ms"]["median"],
                fla_bwd_ms=bwd["baseline_ms"]["median"],
                fwd_TBps=_tbps(fwd["min_bytes"], fwd["candidate_ms"]["median"]),
                fla_fwd_TBps=_tbps(fwd["min_bytes"], fwd["baseline_ms"]["median"]),
                bwd_TBps=_tbps(bwd["min_bytes"], bwd["candidate_ms"]["median"]),
                fla_bwd_TBps=_tbps(bwd["min_bytes"], bwd["baseline_ms"]["median"]),
                fwd_fraction_of_copy=fwd["fraction_of_copy"],
                bwd_fraction_of_copy=bwd["fraction_of_copy"],
            )
        )
    return out


def build_board(family: str, root: Path | None = None, *, device: str | None = None) -> Board:
    """Rows for every idea folder of the family (records whose device name contains
    ``device``, case-insensitive; default the family's TARGET_DEVICE, "" for all), and the
    winner per :func:`ladder.records.winner` (or the reason there is none)."""
    fam = paths.load_family(family, root)
    dev = str(fam.TARGET_DEVICE) if device is None else device
    code_of = records.current_code_sha_of(family, root)
    cases_of = records.current_cases_of(family, root)
    required = promote_cases(fam)
    rank = records.rank_shapes(fam)
    fdir = paths.family_dir(family, root)

    def is_current(rec: dict) -> bool:
        return rec["code_sha"] == code_of(Path(rec["_path"]).parent.parent.name)

    rows, points = [], []
    for folder in paths.list_ideas(family, root):
        every = records.load_idea_records(fdir / "ideas" / folder)
        recs = [r for r in every if dev.lower() in r["device"]["name"].lower()]
        others = sorted({r["device"]["name"] for r in every} - {r["device"]["name"] for r in recs})
        row = row_for(
            folder,
            recs,
            is_current,
            lambda rec, d=fdir / "ideas" / folder: records.explain_stale(rec, d),
            rank,
        )
        if required and not row.baseline:
            declared = cases_of(folder)
            row.cases_unreadable = declared is None
            row.missing_cases = missing_promote_cases(required, declared)
            row.promotable = row.promotable and not row.missing_cases
        row.other_devices = others
        rows.append(row)
        best = next((r for r in recs if r["record_id"] == row.record_id), None)
        points.extend(shape_points(folder, recs, best))
    win, reason = None, None
    try:
        win = records.winner(
            family,
            root,
            device=dev,
            code_sha_of=code_of,
            cases_of=cases_of,
            explain=lambda rec: records.explain_stale(
                rec, fdir / "ideas" / Path(rec["_path"]).parent.parent.name
            ),
        )
    except records.NoWinner as exc:
        reason = str(exc)
    if win is not None:
        for row in rows:
            if row.idea == win.idea and row.record_id == win.record["record_id"]:
                row.winner = True
    return Board(
        family=family,
        device=dev,
        rows=rows,
        winner=win,
        no_winner=reason,
        shapes=points,
        rank_shapes=rank,
    )


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _status(r: BoardRow) -> str:
    flags = [
        f for f, on in (("baseline", r.baseline), ("dirty", r.dirty), ("stale", r.stale)) if on
    ]
    return (r.status or "no record") + (f" ({', '.join(flags)})" if flags else "")


def _ranked(board: Board) -> bool:
    """Whether the family ranks on more than prod (RANK_SHAPES): the board then shows the
    rank score beside the prod ratio."""
    return board.rank_shapes != ("prod",)


def _title(board: Board) -> str:
    dev = board.device or "any device"
    rank = (
        f"; rank x = geometric mean of the fwd+bwd ratios at {', '.join(board.rank_shapes)}"
        if _ranked(board)
        else ""
    )
    return f"{board.family} on {dev} (prod shape; ratio = fla / idea{rank})"


def _board_table(board: Board) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title=_title(board),
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    ranked = _ranked(board)
    for col, justify in [
        ("", "left"),
        ("idea", "left"),
        ("status", "left"),
        ("fwd\nms", "right"),
        ("fla\nfwd", "right"),
        ("bwd\nms", "right"),
        ("fla\nbwd", "right"),
        ("fwd\nx", "right"),
        ("bwd\nx", "right"),
        ("prod\nx", "right"),
        *([("rank\nx", "right")] if ranked else []),
        ("fwd\n%copy", "right"),
        ("bwd\n%copy", "right"),
        ("max err\nratio", "right"),
        ("device", "left"),
        ("date", "left"),
        ("code unchanged\nsince", "left"),
        ("host us\nfwd (fla)", "right"),
        ("peak MiB\n(fla)", "right"),
    ]:
        table.add_column(col, justify=justify, no_wrap=True)
    for r in board.rows:
        table.add_row(
            "★" if r.winner else "",
            r.idea,
            _status(r),
            _fmt(r.fwd_ms, ".4f"),
            _fmt(r.fla_fwd_ms, ".4f"),
            _fmt(r.bwd_ms, ".4f"),
            _fmt(r.fla_bwd_ms, ".4f"),
            _fmt(r.fwd_ratio, ".3f"),
            _fmt(r.bwd_ratio, ".3f"),
            _fmt(r.prod_ratio, ".3f"),
            *([_fmt(r.rank_score, ".3f")] if ranked else []),
            _pct(r.fwd_fraction_of_copy),
            _pct(r.bwd_fraction_of_copy),
            _fmt(r.err_ratio, ".3f"),
            r.device or "-",
            (r.created or "-")[:10],
            r.code_unchanged_since or "-",
            _pair(r.host_fwd_us, r.fla_host_fwd_us, 1.0, ".0f"),
            _pair(r.peak_mem_bytes, r.fla_peak_mem_bytes, float(1 << 20), ".0f"),
        )
    return table


def _stacked_lines(board: Board) -> list[str]:
    """The board as a few short lines per idea, for a console too narrow for the table."""
    lines = [_title(board)]
    for r in board.rows:
        lines.append("")
        lines.append(f"{'★ ' if r.winner else ''}{r.idea}  {_status(r)}")
        if r.record_id is None:
            continue
        rank = f"  rank ratio {_fmt(r.rank_score, '.3f')}" if _ranked(board) else ""
        lines.append(
            f"    prod ratio {_fmt(r.prod_ratio, '.3f')}{rank}  "
            f"max err ratio {_fmt(r.err_ratio, '.3f')}"
        )
        for d in ("fwd", "bwd"):
            ms, fla = getattr(r, f"{d}_ms"), getattr(r, f"fla_{d}_ms")
            if ms is None:
                continue
            lines.append(
                f"    {d} {_fmt(ms, '.4f')} ms  fla {_fmt(fla, '.4f')} ms  "
                f"ratio {_fmt(getattr(r, f'{d}_ratio'), '.3f')}  "
                f"{_pct(getattr(r, f'{d}_fraction_of_copy'))}% of copy"
            )
        if r.host_fwd_us is not None or r.peak_mem_bytes is not None:
            lines.append(
                f"    host us fwd {_pair(r.host_fwd_us, r.fla_host_fwd_us, 1.0, '.0f')}  "
                f"peak MiB {_pair(r.peak_mem_bytes, r.fla_peak_mem_bytes, float(1 << 20), '.0f')}"
            )
        lines.append(f"    {r.device or '-'}  {(r.created or '-')[:10]}")
        lines.append(f"    code unchanged since {r.code_unchanged_since or '-'}")
    lines.append("")
    return lines


def render_board(board: Board, console: Any) -> None:
    """Print the board on a rich ``console``: a table when it fits the console's width, else
    a few lines per idea; every number and name in full either way. Then a line per stale
    record saying which files differ, and the winner (or why there is none)."""
    from rich.measure import Measurement
    from rich.text import Text

    table = _board_table(board)
    natural = Measurement.get(console, console.options.update_width(1 << 16), table).maximum
    if natural <= console.width:
        console.print(table)
    else:
        for line in _stacked_lines(board):
            console.print(Text(line), overflow="fold")
    for r in board.rows:
        if r.stale and r.stale_why:
            console.print(
                Text(f"stale: {r.idea} record {r.record_id}: {r.stale_why}"), overflow="fold"
            )
    elsewhere = [r for r in board.rows if r.record_id is None and r.other_devices]
    if elsewhere:
        named = "; ".join(f"{r.idea} ({', '.join(r.other_devices)})" for r in elsewhere)
        console.print(
            Text(
                f"no record on {board.device or 'any device'}, records on other devices: {named}; "
                f"`python -m ladder board {board.family} --device ''` shows every device"
            ),
            overflow="fold",
        )
    for r in board.rows:
        for bad in r.incorrect_same_code:
            console.print(
                Text(
                    f"also incorrect: {r.idea}'s code and knobs of record {r.record_id} failed "
                    f"the check in record {bad['record_id']} (seed "
                    f"{'not recorded' if bad['seed'] is None else bad['seed']}, max err ratio "
                    f"{_fmt(bad['err_ratio'], '.3f')}): it passes at some seeds only"
                ),
                overflow="fold",
            )
    for r in board.rows:
        if r.cases_unreadable:
            why = "its kernel.py's CASES is not a literal tuple of strings (read without importing)"
        elif r.missing_cases:
            why = f"it lacks case(s) {', '.join(r.missing_cases)}"
        else:
            continue
        console.print(
            Text(
                f"not promotable: {r.idea}: {why}; the family promotes only ideas with every "
                "case of its PROMOTE_CASES"
            ),
            overflow="fold",
        )
    if any(r.baseline for r in board.rows):
        console.print(
            "baseline: 000-* is the family's baseline benched as an idea: shown, never promoted"
        )
    if board.winner is not None:
        w = board.winner
        console.print(
            f"winner: {w.idea} record {w.record['record_id']} "
            f"({records.score_text(w.score, w.rank_shapes)})"
        )
    else:
        console.print(Text(f"no winner: {board.no_winner}"), overflow="fold")


# The plot lives in ladder/boardplot.py; these names stay importable from here.
from ladder.boardplot import board_figure, plot_board, plot_formats, plot_path  # noqa: E402
