"""``ladder board``: one row per idea from its committed records, the winner marked.

An idea's row shows its best record on the chosen device: the best promotable one (passed,
clean, current code) by prod ratio, else the best passed one, else its latest record (so an
idea whose only records are "incorrect" or "error" still shows up, with that status).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ladder import paths, records

__all__ = ["Board", "BoardRow", "best_record", "build_board", "plot_board", "row_for"]


@dataclass
class BoardRow:
    """One idea. Times in ms at the prod shape (candidate and fla), ratios fla/candidate
    (> 1: faster than fla), fractions of the record's copy ceiling, err_ratio the worst over
    outputs and shapes. Everything is None when the idea has no record on the device."""

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
    fwd_fraction_of_copy: float | None = None
    bwd_fraction_of_copy: float | None = None
    err_ratio: float | None = None
    device: str | None = None
    created: str | None = None
    code_unchanged_since: str | None = None
    winner: bool = False


@dataclass
class Board:
    """The board of a family on ``device`` (a name substring; "" = every device)."""

    family: str
    device: str
    rows: list[BoardRow]
    winner: records.Winner | None
    no_winner: str | None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: family, device, rows, winner (or null) and no_winner (reason)."""
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
            "rows": [asdict(r) for r in self.rows],
            "winner": win,
            "no_winner": self.no_winner,
        }


def _worst_err_ratio(rec: dict) -> float | None:
    vals = [
        v
        for s in rec.get("shapes", [])
        for v in (s.get("correctness", {}).get("err_ratio") or {}).values()
        if isinstance(v, (int, float)) and math.isfinite(v)
    ]
    return max(vals) if vals else None


def best_record(recs: list[dict], is_current: Any) -> tuple[dict | None, bool]:
    """(best record, promotable) among one idea's records (oldest first); see module doc.
    is_current(rec) says whether the record's code_sha is the idea's current code."""
    if not recs:
        return None, False

    def ranked(pool: list[dict]) -> dict | None:
        scored = [(records.prod_ratio(r), r) for r in pool]
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


def row_for(folder: str, recs: list[dict], is_current: Any) -> BoardRow:
    """The board row of one idea from its records on the device."""
    row = BoardRow(idea=folder, records=len(recs))
    rec, promotable = best_record(recs, is_current)
    if rec is None:
        return row
    row.record_id = rec["record_id"]
    row.status = rec["status"]
    row.promotable = promotable
    row.dirty = rec["dirty"]
    row.stale = not is_current(rec)
    row.device = rec["device"]["name"]
    row.created = rec["created"]
    row.code_unchanged_since = rec["code_unchanged_since"]
    row.err_ratio = _worst_err_ratio(rec)
    row.prod_ratio = records.prod_ratio(rec)
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
    return row


def build_board(family: str, root: Path | None = None, *, device: str | None = None) -> Board:
    """Rows for every idea folder of the family (records whose device name contains
    ``device``, case-insensitive; default the family's TARGET_DEVICE, "" for all), and the
    winner per :func:`ladder.records.winner` (or the reason there is none)."""
    fam = paths.load_family(family, root)
    dev = str(fam.TARGET_DEVICE) if device is None else device
    code_of = records.current_code_sha_of(family, root)
    fdir = paths.family_dir(family, root)

    def is_current(rec: dict) -> bool:
        return rec["code_sha"] == code_of(Path(rec["_path"]).parent.parent.name)

    rows = []
    for folder in paths.list_ideas(family, root):
        recs = [
            r
            for r in records.load_idea_records(fdir / "ideas" / folder)
            if dev.lower() in r["device"]["name"].lower()
        ]
        rows.append(row_for(folder, recs, is_current))
    win, reason = None, None
    try:
        win = records.winner(family, root, device=dev, code_sha_of=code_of)
    except records.NoWinner as exc:
        reason = str(exc)
    if win is not None:
        for row in rows:
            if row.idea == win.idea and row.record_id == win.record["record_id"]:
                row.winner = True
    return Board(family=family, device=dev, rows=rows, winner=win, no_winner=reason)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def render_board(board: Board, console: Any) -> None:
    """Print the board as a rich table on ``console``."""
    from rich.table import Table

    dev = board.device or "any device"
    table = Table(title=f"{board.family} on {dev} (prod shape; ratio = fla / idea)")
    for col, justify in [
        ("", "left"),
        ("idea", "left"),
        ("status", "left"),
        ("fwd ms", "right"),
        ("fla fwd", "right"),
        ("bwd ms", "right"),
        ("fla bwd", "right"),
        ("fwd x", "right"),
        ("bwd x", "right"),
        ("prod x", "right"),
        ("fwd %copy", "right"),
        ("bwd %copy", "right"),
        ("err ratio", "right"),
        ("device", "left"),
        ("date", "left"),
        ("code unchanged since", "left"),
    ]:
        table.add_column(col, justify=justify)
    for r in board.rows:
        flags = []
        if r.dirty:
            flags.append("dirty")
        if r.stale:
            flags.append("stale")
        status = (r.status or "no record") + (f" ({', '.join(flags)})" if flags else "")
        table.add_row(
            "★" if r.winner else "",
            r.idea,
            status,
            _fmt(r.fwd_ms, ".4f"),
            _fmt(r.fla_fwd_ms, ".4f"),
            _fmt(r.bwd_ms, ".4f"),
            _fmt(r.fla_bwd_ms, ".4f"),
            _fmt(r.fwd_ratio, ".3f"),
            _fmt(r.bwd_ratio, ".3f"),
            _fmt(r.prod_ratio, ".3f"),
            "-" if r.fwd_fraction_of_copy is None else f"{100 * r.fwd_fraction_of_copy:.1f}",
            "-" if r.bwd_fraction_of_copy is None else f"{100 * r.bwd_fraction_of_copy:.1f}",
            _fmt(r.err_ratio, ".3f"),
            r.device or "-",
            (r.created or "-")[:10],
            r.code_unchanged_since or "-",
        )
    console.print(table)
    if board.winner is not None:
        w = board.winner
        console.print(f"winner: {w.idea} record {w.record['record_id']} (prod ratio {w.score:.3f})")
    else:
        console.print(f"no winner: {board.no_winner}")


def plot_board(board: Board, path: Path, root: Path | None = None) -> Path:
    """Achieved bandwidth (min_bytes / candidate median, TB/s) per shape, fwd and bwd, one
    bar per idea (its board record, if passed) plus fla (the median of the baseline over those
    records), against the copy ceiling (median over those records). Written with
    matplotlib's Agg backend to ``path`` (format from the suffix). Raises LadderError when no
    idea has a passed record to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fdir = paths.family_dir(board.family, root)
    recs: list[tuple[str, dict]] = []
    for row in board.rows:
        if row.status != "passed" or row.record_id is None:
            continue
        rpath = fdir / "ideas" / row.idea / "records" / f"{row.record_id}.json"
        recs.append((row.idea, records.read_record(rpath)))
    if not recs:
        raise paths.LadderError(
            f"no passed {board.family} records on {board.device or 'any device'} to plot; "
            f"bench an idea first"
        )
    shape_names: list[str] = []
    for _, rec in recs:
        for s in rec["shapes"]:
            if s["name"] not in shape_names:
                shape_names.append(s["name"])
    ceilings = sorted(rec["copy_ceiling_TBps"] for _, rec in recs)
    ceiling = ceilings[len(ceilings) // 2]
    series = [idea for idea, _ in recs] + ["fla"]
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 1.3 * len(shape_names) + 3), 7.5))
    width = 0.8 / len(series)
    for ax, direction in zip(axes, ("fwd", "bwd"), strict=True):
        top = ceiling
        fla: dict[str, list[float]] = {n: [] for n in shape_names}
        for j, (idea, rec) in enumerate(recs):
            xs, ys = [], []
            for s in rec["shapes"]:
                t = s.get(direction)
                if not t:
                    continue
                k = shape_names.index(s["name"])
                xs.append(k + (j - (len(series) - 1) / 2) * width)
                ys.append(t["min_bytes"] / (t["candidate_ms"]["median"] * 1e-3) / 1e12)
                fla[s["name"]].append(t["min_bytes"] / (t["baseline_ms"]["median"] * 1e-3) / 1e12)
            ax.bar(xs, ys, width=width, label=idea)
            top = max([top, *ys])
        jf = len(series) - 1
        fx = [k + (jf - (len(series) - 1) / 2) * width for k, n in enumerate(shape_names) if fla[n]]
        fy = [sorted(fla[n])[len(fla[n]) // 2] for n in shape_names if fla[n]]
        ax.bar(fx, fy, width=width, label="fla", color="0.6")
        ax.axhline(
            ceiling, color="k", linestyle="--", linewidth=1, label=f"copy {ceiling:.2f} TB/s"
        )
        ax.set_ylim(0, 1.3 * max([top, *fy]))
        ax.set_xticks(range(len(shape_names)), shape_names, rotation=20, fontsize=8)
        ax.set_ylabel(f"{direction} TB/s (min bytes / time)")
        ax.set_title(f"{board.family} {direction} on {board.device or 'any device'}")
        ax.legend(fontsize=7, ncol=min(4, len(series) + 1), loc="upper right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
