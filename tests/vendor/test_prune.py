"""The prune pass (after the freeze), input source -> expected source, and ruff's agreement."""

from __future__ import annotations

import libcst as cst
import pytest

from tests.ladderfab import REPO, vl
from tests.vendor.passes import freeze_and_prune, src

SOURCE = """
import os

A = os.environ.get("TOY_A", "1") == "1"


# the slow path's helper
# noqa: E731
def _slow(x):
    return -x


def toy_fwd(x):
    if not A:
        return _slow(x)
    return x


# fmt: off
def _fast(x):
    return x


TABLE = [1,
         2]
# fmt: on
"""


def test_what_became_unused_goes_and_its_comments_stay():
    out = freeze_and_prune(SOURCE)
    assert out.lstrip("\n") == src(
        """
        # the slow path's helper
        # noqa: E731


        def toy_fwd(x):
            return x


        # fmt: off
        def _fast(x):
            return x


        TABLE = [1,
                 2]
        # fmt: on
        """
    )
    # ruff format of the output changes nothing it was not asked to (fmt: off kept the table)
    formatted = vl.format_python(out, "k.py", (REPO / "pyproject.toml").read_bytes()).decode()
    assert "TABLE = [1,\n         2]" in formatted
    again = vl.format_python(formatted, "k.py", (REPO / "pyproject.toml").read_bytes())
    assert again.decode() == formatted


def test_comments_of_a_removed_last_statement_go_to_the_end_of_the_module():
    out = freeze_and_prune(
        """
        import os

        A = os.environ.get("TOY_A", "1") == "1"


        def toy_fwd(x):
            if not A:
                return _gone(x)
            return x


        # type: ignore
        def _gone(x):
            return x
        """
    )
    assert out.endswith("def toy_fwd(x):\n    return x\n\n\n# type: ignore\n")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('["kept", "gone"]', '["kept"]'),
        ('("kept", "gone")', '["kept"]'),
        ('"kept", "gone"', '["kept"]'),
        ('("gone",)', "[]"),
        ('["kept", "other"]', '["kept", "other"]'),
        ('["kept", "go" "ne"]', '["kept"]'),
        ('[\n    "kept",  # why\n    "gone",\n]', '[\n    "kept",  # why\n'),  # the comment stays
    ],
)
@pytest.mark.parametrize(
    "form", ["__all__ = ", "__all__: list[str] = ", "__all__ = []\n__all__ += "]
)
def test_an_imported_module_all_is_cut_to_the_names_left(value, expected, form):
    code = f"{form}{value}\n\n\ndef kept():\n    return 1\n\n\nother = 2\n"
    out = vl.prune._cut_all(cst.parse_module(code), {"kept", "other", "__all__"}).code
    assert out.startswith(f"{form}{expected}"), out
    if expected != value:
        assert "gone" not in out
    # the result is valid Python whose __all__ names only what the module binds
    namespace: dict = {}
    exec(compile(out, "cut.py", "exec"), namespace)
    assert set(namespace["__all__"]) <= {"kept", "other"}


@pytest.mark.parametrize(
    ("source", "dynamic"),
    [
        ('X = 1\n\n\ndef f():\n    return globals()["X"]\n', True),
        ("def f():\n    look = vars\n    return look()\n", True),  # handed on, not called
        ("def f(code):\n    return eval(code)\n", True),
        ("def f():\n    return __import__('os')\n", True),
        ("def globals():\n    return {}\n\n\ndef f():\n    return globals()\n", False),
        ("def f(eval):\n    return eval(1)\n", True),  # a parameter may be passed the builtin
        ("def f(x):\n    return len(x)\n", False),
        # a global that may hold the builtin
        ("from builtins import globals\n\n\ndef f():\n    return globals()\n", True),
        ("try:\n    from safe import eval\nexcept ImportError:\n    pass\nY = eval('1')\n", True),
        ("if X:\n\n    def exec(c):\n        pass\n\n\nexec('1')\n", True),
        ("def s():\n    global exec\n    exec = None\n\n\ndef f(c):\n    exec(c)\n", True),
        ("def f(c):\n    from builtins import exec\n\n    exec(c)\n", True),  # a local import
        (
            "import builtins\n\n\ndef f(c):\n    run = builtins.exec\n    exec = run\n    exec(c)\n",
            True,
        ),
    ],
)
def test_a_module_reading_its_namespace_by_name_is_dynamic(source, dynamic):
    """globals(), vars(), eval, exec and __import__, as the builtins or as any name that may
    hold them (all but an unconditional top-level def), make a module's uses unseen (the
    prune then keeps its freeze-only rule)."""
    from vendorlib.usage import analyse_module

    assert analyse_module(cst.parse_module(source)).dynamic is dynamic
