"""Own-line comments and pragmas around the statements the vendor removes.

An own-line comment (``# why``, ``# noqa: E731``, ``# type: ignore``, ``# fmt: off``) sits in
the ``leading_lines`` of the statement below it. When the freeze or the prune removes that
statement, its leading lines move to the next statement that stays in the same block, or to
the end of the block when none does, so a comment or pragma is never lost with code it did not
belong to. Comments inside a removed branch go with the branch, except that a ``# fmt: off`` /
``# fmt: on`` pair must go or stay together: :func:`check_fmt_pairs` refuses otherwise.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Callable, Sequence
from typing import TypeVar

import libcst as cst

from .common import VendorError

S = TypeVar("S", bound=cst.CSTNode)

FMT_OFF = ("# fmt: off", "# yapf: disable")
FMT_ON = ("# fmt: on", "# yapf: enable")


def has_comment(lines: Sequence[cst.EmptyLine]) -> bool:
    """True when one of ``lines`` holds a comment."""
    return any(line.comment is not None for line in lines)


def carry_leading_lines(
    body: Sequence[S],
    removed: set[int],
    replaced: Callable[[S, S], None] | None = None,
) -> tuple[list[S], list[cst.EmptyLine]]:
    """``body`` without the statements whose ids are in ``removed``, their leading lines moved onto
    the next statement that stays. Returns (new body, lines left over at the end of the
    block: put them in the block's footer). ``replaced(old, new)`` hears of every statement
    that got lines prepended."""
    out: list[S] = []
    pending: list[cst.EmptyLine] = []
    for stmt in body:
        if id(stmt) in removed:
            lines = list(getattr(stmt, "leading_lines", ()))
            if has_comment(lines):
                pending.extend(lines)
            continue
        if pending:
            new = stmt.with_changes(leading_lines=[*pending, *stmt.leading_lines])
            if replaced is not None:
                replaced(stmt, new)
            stmt = new
            pending = []
        out.append(stmt)
    return out, pending


def with_footer(block: S, lines: Sequence[cst.EmptyLine]) -> S:
    """``block`` (an IndentedBlock or a Module) with ``lines`` before its footer."""
    if not lines:
        return block
    return block.with_changes(footer=[*lines, *block.footer])


def own_line_comments(text: str) -> list[tuple[int, str]]:
    """[(line, comment text)] of the comments alone on their line (tokenize, not regexes, so
    a ``#`` inside a string is no comment)."""
    found: list[tuple[int, str]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT and not tok.line[: tok.start[1]].strip():
                found.append((tok.start[0], tok.string.strip()))
    except (tokenize.TokenError, SyntaxError):  # the parser reports bad code with its line
        pass
    return found


def check_fmt_pairs(text: str, dropped: Sequence[tuple[int, int]], relpath: str) -> None:
    """Refuse when the freeze drops one comment of a ``# fmt: off`` / ``# fmt: on`` pair and
    keeps the other (``dropped``: the line ranges of the removed branches)."""

    def gone(line: int) -> bool:
        return any(a <= line <= b for a, b in dropped)

    opened: int | None = None
    for line, comment in own_line_comments(text):
        if comment in FMT_OFF and opened is None:
            opened = line
        elif comment in FMT_ON and opened is not None:
            if gone(opened) != gone(line):
                lost, kept = (opened, line) if gone(opened) else (line, opened)
                raise VendorError(
                    f"{relpath}:{lost}: this fmt directive is in a branch the knobs remove, but "
                    f"its partner on line {kept} stays; put both inside the branch or both "
                    "outside it"
                )
            opened = None
