"""Ranking a family's ideas on several shapes (its RANK_SHAPES): the winner's and the board's
score is the geometric mean of the fwd+bwd ratios at those shapes; a record that does not time
every one of them is never promoted; a family without RANK_SHAPES ranks on prod as before."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ladder import board, codehash, records
from ladder.cli import app
from ladder.recview import rank_line
from tests.fixtures.ladder.helpers import copy_toy, idea_path
from tests.fixtures.ladder.recgen import fake_sha, make_record, shape_entry

RANK = ("prod", "d16-w2")  # two shapes of the toy family's SHAPES
# (candidate ms, fla ms) for fwd and bwd: A is the better idea at prod (2.0 against 1.5),
# B over both shapes (geometric mean 1.5 against A's sqrt(2 * 1.0) = 1.414).
A = {"prod": ((0.5, 1.0), (1.0, 2.0)), "d16-w2": ((1.0, 1.0), (2.0, 2.0))}
B = {"prod": ((1.0, 1.5), (2.0, 3.0)), "d16-w2": ((1.0, 1.5), (2.0, 3.0))}


def _toy(tmp_path: Path, rank: tuple[str, ...] | None = RANK) -> Path:
    """A toy tree without records, its family ranking on ``rank`` (None: no RANK_SHAPES).
    A family module is imported once per tree, so each setting gets a tree of its own."""
    root = copy_toy(tmp_path / ("flat" if rank is None else "ranked"), records=False)
    if rank is not None:
        fam = root / "kernels" / "toy" / "family.py"
        fam.write_text(fam.read_text() + f"\nRANK_SHAPES = {rank!r}\n")
    return root


def _put(root: Path, folder: str, created: str, timings: dict, **kw) -> dict:
    """Write a passed record of ``folder`` timed at the shapes of ``timings`` ({shape name:
    ((fwd cand, fwd fla), (bwd cand, bwd fla))}); code_sha the idea's current one unless
    given."""
    sha = kw.pop("code_sha", None) or codehash.code_sha(
        codehash.idea_files_from_dir(idea_path(root, folder))
    )
    rec = make_record(idea=folder, code_sha=sha, created=created, sweep=False, **kw)
    rec["shapes"] = [shape_entry(name, fwd, bwd) for name, (fwd, bwd) in timings.items()]
    records.write_record(idea_path(root, folder), rec)
    return rec


def _render(b: board.Board, width: int = 250) -> str:
    out = io.StringIO()
    board.render_board(b, Console(file=out, width=width, color_system=None))
    return out.getvalue()


# ------------------------------------------------------------------------------------------
# the score
# ------------------------------------------------------------------------------------------


def test_rank_score_is_the_geometric_mean_of_the_shape_ratios() -> None:
    rec = make_record(idea="001-fast", code_sha="1" * 64, created="2026-02-01T00:00:00Z")
    rec["shapes"] = [
        shape_entry("prod", (0.5, 1.0), (1.0, 2.5)),  # 3.5 / 1.5
        shape_entry("d16-w2", (1.0, 1.2), (2.0, 2.0)),  # 3.2 / 3.0
        shape_entry("s-b2-t9-d8-w4", (1.0, 0.8), (1.0, 0.8)),  # 1.6 / 2.0, slower than fla
        shape_entry("fwd-only", (1.0, 2.0), None),
    ]
    three = ("prod", "d16-w2", "s-b2-t9-d8-w4")
    want = ((3.5 / 1.5) * (3.2 / 3.0) * (1.6 / 2.0)) ** (1 / 3)
    assert records.rank_score(rec, three) == pytest.approx(want, rel=1e-12)
    assert records.rank_score(rec, three) == pytest.approx(1.258052, abs=1e-6)
    assert records.rank_score(rec, tuple(reversed(three))) == pytest.approx(want, rel=1e-12)
    assert records.rank_score(rec, ("prod", "d16-w2")) == pytest.approx(
        math.sqrt((3.5 / 1.5) * (3.2 / 3.0)), rel=1e-12
    )
    # on prod alone it is the prod ratio, to the last bit
    assert records.rank_score(rec, ("prod",)) == records.prod_ratio(rec) == 3.5 / 1.5
    assert records.rank_score(rec) == records.prod_ratio(rec)
    # a shape without both directions timed, or absent, leaves the record unscored
    assert records.rank_score(rec, ("prod", "fwd-only")) is None
    assert records.rank_score(rec, ("prod", "absent")) is None
    assert records.shape_ratio(rec, "d16-w2") == pytest.approx(3.2 / 3.0)
    with pytest.raises(ValueError, match="shapes is empty"):
        records.rank_score(rec, ())
    # medians that pass the schema but whose fwd + bwd sum overflows: a ratio of 0, no score
    rec["shapes"].append(shape_entry("huge", (1e308, 1e-10), (1e308, 1e-10)))
    assert records.shape_ratio(rec, "huge") == 0.0
    assert records.rank_score(rec, ("prod", "huge")) is None


def test_rank_shapes_of_a_family(tmp_path: Path) -> None:
    from ladder import paths

    flat, ranked = _toy(tmp_path, rank=None), _toy(tmp_path)
    assert records.rank_shapes(paths.load_family("toy", flat, complete=True)) == ("prod",)
    assert records.rank_shapes(paths.load_family("kda")) == ("prod",)
    assert records.rank_shapes(paths.load_family("toy", ranked, complete=True)) == RANK
    assert records.score_text(1.5, ("prod",)) == "prod ratio 1.500"
    assert records.score_text(1.5, RANK) == "rank ratio 1.500 over prod, d16-w2"


# ------------------------------------------------------------------------------------------
# the winner
# ------------------------------------------------------------------------------------------


def test_the_geometric_mean_picks_the_winner(tmp_path: Path) -> None:
    flat, ranked = _toy(tmp_path, rank=None), _toy(tmp_path)
    for root in (flat, ranked):  # the same records (same code) in both trees
        a = _put(root, "001-fast", "2026-02-01T00:00:00Z", A)
        b = _put(root, "003-wrong-taps", "2026-02-02T00:00:00Z", B)
    # without RANK_SHAPES: prod alone, as always
    won = records.winner("toy", flat)
    assert won.record["record_id"] == a["record_id"]
    assert won.score == records.prod_ratio(a) == 2.0
    assert won.rank_shapes == ("prod",)
    won = records.winner("toy", ranked)
    assert won.idea == "003-wrong-taps" and won.record["record_id"] == b["record_id"]
    assert won.score == pytest.approx(1.5)
    assert won.rank_shapes == RANK
    assert records.rank_score(a, RANK) == pytest.approx(math.sqrt(2.0))


def test_a_record_lacking_a_rank_shape_is_not_promotable(tmp_path: Path) -> None:
    root = _toy(tmp_path)
    prod_only = {"prod": ((0.25, 1.0), (0.5, 2.0))}  # prod ratio 4.0, far ahead
    only = _put(root, "001-fast", "2026-02-01T00:00:00Z", prod_only)
    with pytest.raises(records.NoWinner) as err:
        records.winner("toy", root)
    msg = str(err.value)
    assert "(1 no timing at every rank shape (prod, d16-w2))" in msg
    assert "no prod timing" not in msg
    assert "--shapes prod,d16-w2" in msg and "\n" not in msg
    b = _put(root, "003-wrong-taps", "2026-02-02T00:00:00Z", B)
    assert records.winner("toy", root).record["record_id"] == b["record_id"]
    rows = {r.idea: r for r in board.build_board("toy", root).rows}
    fast = rows["001-fast"]
    assert fast.record_id == only["record_id"] and fast.prod_ratio == 4.0
    assert fast.rank_score is None and not fast.promotable and not fast.winner
    assert rows["003-wrong-taps"].winner and rows["003-wrong-taps"].rank_score == pytest.approx(1.5)


def test_without_rank_shapes_the_old_label_holds(tmp_path: Path) -> None:
    root = _toy(tmp_path, rank=None)
    _put(root, "001-fast", "2026-02-01T00:00:00Z", {"d16-w2": B["d16-w2"]})  # a sweep bench
    with pytest.raises(records.NoWinner) as err:
        records.winner("toy", root)
    msg = str(err.value)
    assert "(1 no prod timing)" in msg and "rank shape" not in msg and "--shapes" not in msg


def test_a_winner_beats_fla_at_prod_and_over_the_rank_shapes(tmp_path: Path) -> None:
    root = _toy(tmp_path)
    slow_at_prod = {"prod": ((1.0, 0.9), (2.0, 1.8)), "d16-w2": ((1.0, 2.0), (2.0, 4.0))}
    slow_overall = {"prod": ((1.0, 1.2), (2.0, 2.4)), "d16-w2": ((2.0, 1.0), (4.0, 2.0))}
    a = _put(root, "001-fast", "2026-02-01T00:00:00Z", slow_at_prod)
    b = _put(root, "003-wrong-taps", "2026-02-02T00:00:00Z", slow_overall)
    assert records.rank_score(a, RANK) == pytest.approx(math.sqrt(0.9 * 2.0))  # > 1
    assert records.prod_ratio(b) == pytest.approx(1.2)  # > 1
    assert records.rank_score(b, RANK) == pytest.approx(math.sqrt(1.2 * 0.5))  # < 1
    with pytest.raises(records.NoWinner, match=r"\(2 not faster than fla\)"):
        records.winner("toy", root)


def test_a_better_stale_record_is_named_with_its_rank_score(tmp_path: Path) -> None:
    flat, ranked = _toy(tmp_path, rank=None), _toy(tmp_path)
    best = {"prod": ((1.0, 3.0), (2.0, 6.0)), "d16-w2": ((1.0, 3.0), (2.0, 6.0))}
    for root in (flat, ranked):
        stale = _put(root, "001-fast", "2026-02-01T00:00:00Z", best, code_sha=fake_sha("old"))
        _put(root, "003-wrong-taps", "2026-02-02T00:00:00Z", B)
    won = records.winner("toy", ranked, explain=lambda rec: "kernel.py changed")
    assert won.idea == "003-wrong-taps"
    assert won.passed_over == [
        f"001-fast record {stale['record_id']} (rank 3.000x over 2 shapes) is stale: "
        "kernel.py changed"
    ]
    won = records.winner("toy", flat, explain=lambda rec: "kernel.py changed")
    assert won.passed_over == [
        f"001-fast record {stale['record_id']} (prod 3.000x) is stale: kernel.py changed"
    ]


# ------------------------------------------------------------------------------------------
# the board and the commands
# ------------------------------------------------------------------------------------------


def test_board_ranks_an_ideas_records_like_the_winner(tmp_path: Path) -> None:
    flat_root, root = _toy(tmp_path, rank=None), _toy(tmp_path)
    for where in (flat_root, root):  # two records of one idea, the same code
        a = _put(where, "001-fast", "2026-02-01T00:00:00Z", A)
        b = _put(where, "001-fast", "2026-02-02T00:00:00Z", B)
    flat = board.build_board("toy", flat_root)
    row = next(r for r in flat.rows if r.idea == "001-fast")
    assert row.record_id == a["record_id"] and row.winner and row.rank_score == row.prod_ratio
    text = _render(flat)
    assert "rank" not in text
    assert f"winner: 001-fast record {a['record_id']} (prod ratio 2.000)" in text
    assert flat.to_json()["rank_shapes"] == ["prod"]

    ranked = board.build_board("toy", root)
    row = next(r for r in ranked.rows if r.idea == "001-fast")
    assert row.record_id == b["record_id"] and row.winner and row.promotable
    assert row.rank_score == pytest.approx(1.5) and row.prod_ratio == pytest.approx(1.5)
    recs = records.load_idea_records(idea_path(root, "001-fast"))
    assert board.best_record(recs, lambda r: True)[0]["record_id"] == a["record_id"]
    assert board.best_record(recs, lambda r: True, RANK)[0]["record_id"] == b["record_id"]
    text = _render(ranked)
    header = next(line for line in text.splitlines() if "prod" in line and "rank" in line)
    assert header.index("prod") < header.index("rank")
    assert "geometric mean of the fwd+bwd ratios at prod, d16-w2" in text
    assert f"winner: 001-fast record {b['record_id']} (rank ratio 1.500 over prod, d16-w2)" in text
    narrow = _render(ranked, width=80)  # a few lines per idea
    assert "prod ratio 1.500  rank ratio 1.500" in narrow
    result = CliRunner().invoke(app, ["--root", str(root), "board", "toy", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["rank_shapes"] == list(RANK)
    assert data["winner"]["score"] == pytest.approx(1.5)
    jrow = next(r for r in data["rows"] if r["idea"] == "001-fast")
    assert jrow["rank_score"] == pytest.approx(1.5) and jrow["record_id"] == b["record_id"]


def test_winner_show_and_bench_lines_say_the_rank_ratio(tmp_path: Path) -> None:
    root = _toy(tmp_path)
    a = _put(root, "001-fast", "2026-02-01T00:00:00Z", A)
    prod_only = _put(root, "003-wrong-taps", "2026-02-02T00:00:00Z", {"prod": A["prod"]})
    win = CliRunner().invoke(app, ["--root", str(root), "winner", "toy"])
    assert win.exit_code == 0, win.output
    assert f"record {a['record_id']} (rank ratio 1.414 over prod, d16-w2 vs fla" in win.stdout
    data = json.loads(
        CliRunner().invoke(app, ["--root", str(root), "winner", "toy", "--json"]).stdout
    )
    assert data["rank_shapes"] == list(RANK)
    assert data["score"] == pytest.approx(math.sqrt(2.0))
    show = CliRunner().invoke(app, ["--root", str(root), "show", "toy", a["record_id"]])
    assert show.exit_code == 0, show.output
    assert "prod ratio (fwd + bwd): 2.000" in show.stdout
    assert "rank ratio (geometric mean of the fwd + bwd ratios at prod, d16-w2): 1.414" in (
        show.stdout
    )
    assert rank_line(prod_only, RANK) == (
        "no rank ratio: this record does not time fwd and bwd at every rank shape (prod, "
        "d16-w2), so it cannot win; bench with `--shapes prod,d16-w2` or `--shapes all`"
    )
    assert rank_line(a, ("prod",)) is None
    from ladder.cli import render_record

    out = io.StringIO()
    render_record(a, Console(file=out, width=250, color_system=None), RANK)
    assert "rank ratio (geometric mean of the fwd + bwd ratios at prod, d16-w2): 1.414" in (
        out.getvalue()
    )
