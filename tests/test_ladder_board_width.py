"""The board shows every number and name in full on a narrow console (100 and 80 columns),
as a table when it fits and a few lines per idea when it does not."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from ladder import board
from tests.fixtures.ladder.helpers import FIXTURE_ROOT


def _render(b: board.Board, width: int) -> str:
    out = io.StringIO()
    board.render_board(b, Console(file=out, width=width, color_system=None))
    return out.getvalue()


def _expected(row: board.BoardRow) -> list[str]:
    """Every number and name of a row, formatted as the board formats them."""
    want = [row.idea]
    for value, spec in (
        (row.fwd_ms, ".4f"),
        (row.fla_fwd_ms, ".4f"),
        (row.bwd_ms, ".4f"),
        (row.fla_bwd_ms, ".4f"),
        (row.fwd_ratio, ".3f"),
        (row.bwd_ratio, ".3f"),
        (row.prod_ratio, ".3f"),
        (row.err_ratio, ".3f"),
    ):
        if value is not None:
            want.append(format(value, spec))
    for frac in (row.fwd_fraction_of_copy, row.bwd_fraction_of_copy):
        if frac is not None:
            want.append(f"{100 * frac:.1f}")
    if row.record_id is not None:
        want += [row.device or "", (row.created or "")[:10], row.code_unchanged_since or ""]
    return [w for w in want if w]


BOARDS = {
    "cconv": lambda: board.build_board("cconv"),  # the committed records of this repository
    "toy": lambda: board.build_board("toy", FIXTURE_ROOT, device=""),
}


@pytest.mark.parametrize("width", [200, 100, 80])
@pytest.mark.parametrize("family", sorted(BOARDS))
def test_every_number_in_full_at_any_width(family: str, width: int) -> None:
    b = BOARDS[family]()
    assert any(r.prod_ratio is not None for r in b.rows)
    text = _render(b, width)
    assert "…" not in text
    for line in text.splitlines():
        assert len(line) <= width, line
    # whole: not cut short, not folded over two lines, not run into another number
    for row in b.rows:
        for item in _expected(row):
            pattern = rf"(?<![\w.]){re.escape(item)}(?![\w.])"
            assert re.search(pattern, text), (family, width, row.idea, item)
    if b.winner is not None:
        assert f"winner: {b.winner.idea} record {b.winner.record['record_id']}" in text


def test_table_when_it_fits_lines_when_it_does_not() -> None:
    b = BOARDS["cconv"]()
    # cconv's table, with its rank column (RANK_SHAPES), needs a little over 200 columns
    wide, narrow = _render(b, 220), _render(b, 80)
    assert "%copy" in wide and "% of copy" not in wide
    assert "% of copy" in narrow and "%copy" not in narrow
