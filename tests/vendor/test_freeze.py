"""The freeze pass, input source -> expected source (before ruff format)."""

from __future__ import annotations

import pytest

from tests.ladderfab import vl
from tests.vendor.passes import freeze, src

HEAD = """
import os

A = os.environ.get("TOY_A", "1") == "1"
N = int(os.environ.get("TOY_N", "4"))
"""


def test_knobs_become_literals_and_decided_branches_go():
    code, _ = freeze(
        HEAD
        + """

def toy_fwd(x):
    if A:
        return x
    elif x:
        return 1
    return N if N > 2 else -N
""",
        TOY_A=False,
        TOY_N=8,
    )
    assert code == src(
        """
        import os

        A = False
        N = 8


        def toy_fwd(x):
            if x:
                return 1
            return 8
        """
    )


def test_statements_after_a_decided_return_go():
    """`if KNOB: return ...` decided True leaves the rest of its block unreachable: it goes,
    with its comments, and so does what only it used; a decided branch that does not end
    the block's flow keeps the statements after it."""
    code, freezer = freeze(
        HEAD
        + """

def toy_fwd(x):
    if A:
        y = x + 1
        return y
    # the other way
    z = x * N
    return z


def toy_bwd(x):
    if A:
        x = x + 1
    return x
""",
        TOY_A=True,
    )
    assert code.endswith(
        src(
            """
            def toy_fwd(x):
                y = x + 1
                return y


            def toy_bwd(x):
                x = x + 1
                return x
            """
        )
    )
    # the dead lines are reported as dropped (the fmt-pair and surviving-reference checks
    # read these ranges): from the comment after `return y` through `return z`
    lines = src(HEAD + "\n\ndef toy_fwd(x):").count("\n") + 1  # the def's line
    assert (lines + 4, lines + 6) in freezer.dropped, (lines, freezer.dropped)


def test_comments_above_a_removed_if_move_to_the_next_statement():
    code, _ = freeze(
        HEAD
        + """

def toy_fwd(x):
    y = x
    # why the slow path exists
    # noqa: E731
    if not A:
        y = -x
    return y


def toy_bwd(x):
    # fmt: off
    if not A:
        pass
    # fmt: on
    return x
"""
    )
    assert code.endswith(
        src(
            """
            def toy_fwd(x):
                y = x
                # why the slow path exists
                # noqa: E731
                return y


            def toy_bwd(x):
                # fmt: off
                # fmt: on
                return x
            """
        )
    )


def test_comments_above_a_removed_last_if_go_to_the_end_of_the_block():
    code, _ = freeze(
        HEAD
        + """

def toy_fwd(x):
    x = x + 1
    # type: ignore
    if not A:
        x = 0
"""
    )
    assert code.endswith("def toy_fwd(x):\n    x = x + 1\n    # type: ignore\n")


def test_a_fmt_pair_split_by_a_removed_branch_is_refused():
    text = (
        HEAD
        + """

def toy_fwd(x):
    if not A:
        # fmt: off
        x = [1,
             2]
    x = [3,
         4]
    # fmt: on
    return x
"""
    )
    code, freezer = freeze(text)
    with pytest.raises(vl.VendorError, match=r"k\.py:9: this fmt directive is in a branch"):
        vl.comments.check_fmt_pairs(src(text), freezer.dropped, "k.py")
    # a pair wholly inside the removed branch goes with it, and the check agrees
    inside = text.replace("    x = [3,\n         4]\n    # fmt: on\n", "        # fmt: on\n")
    code, freezer = freeze(inside)
    vl.comments.check_fmt_pairs(src(inside), freezer.dropped, "k.py")
    assert "fmt" not in code
