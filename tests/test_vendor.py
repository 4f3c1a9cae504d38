"""tools/vendor.py on synthetic ladders in temporary git repositories.

The oracle for the freeze is the original module itself: it is executed with the record's
knobs in the environment, the vendored module under a contrary environment, and every
function must return the same values (and make the same calls) for every probe input.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tests.ladderfab import PLAIN, FakeLadder, invoke, vendor, vl

PROBES: list[Any] = [-7, -6, -1, 0, 1, 2, 3, 5, 9, None, "", "s", 0.0, 2.5]


# ------------------------------------------------------------------------------------------
# utilities
# ------------------------------------------------------------------------------------------


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def run_module(source: str, env: dict[str, str]) -> dict[str, Any]:
    """Execute a module's source with exactly these TOY_* variables set."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOY_")}
    with mock.patch.dict(os.environ, {**clean, **env}, clear=True):
        namespace: dict[str, Any] = {"__name__": "probe"}
        exec(compile(source, "probe.py", "exec"), namespace)
    return namespace


def _outcome(fn: Any, x: Any) -> tuple[str, Any]:
    try:
        return ("value", fn(x))
    except Exception as exc:  # the same error is the same behaviour
        return ("raises", type(exc).__name__)


def assert_same_behaviour(original: str, vendored: str, knobs: dict[str, Any], names: list[str]):
    """Every named function of the vendored module agrees with the original under knobs."""
    want_env = {k: _env_text(v) for k, v in knobs.items()}
    contrary = {
        k: ("0" if isinstance(v, bool) and v else "1" if isinstance(v, bool) else "999")
        for k, v in knobs.items()
    }
    a = run_module(original, want_env)
    b = run_module(vendored, contrary)
    for name in names:
        for x in PROBES:
            assert _outcome(a[name], x) == _outcome(b[name], x), (name, x)
    if "CALLS" in a:
        assert a["CALLS"] == b["CALLS"]


def kernel_text(lad: FakeLadder, module: str = "first") -> str:
    return (lad.root / lad.package / "_kernels" / f"{module}.py").read_text()


def function_body(source: str, name: str) -> list[ast.stmt]:
    tree = ast.parse(source)
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name).body


def names_in(source: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}


def module_names(source: str) -> set[str]:
    """Names bound at module level (defs, classes, assignments, imports)."""
    out: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def one_idea(tmp_path: Path, source: str, **kw: Any) -> FakeLadder:
    lad = FakeLadder(tmp_path / "repo", **kw)
    lad.add_idea("001-first", {"kernel.py": source})
    lad.commit("idea")
    return lad


def record_and_vendor(lad: FakeLadder, knobs: dict[str, Any], *args: str):
    rid = lad.add_record("001-first", knobs)
    lad.commit(f"record {rid}")
    return lad.vendor("--record", rid, *args)


def vendor_ideas(
    lad: FakeLadder,
    ideas: dict[str, dict[str, str]],
    winner: str,
    knobs: dict[str, Any] | None = None,
):
    """Add `ideas` (name -> {file: source}) to `lad`, commit them, record `winner` with `knobs`
    and vendor that record: the vendor's result."""
    for name, files in ideas.items():
        lad.add_idea(name, files)
    lad.commit("ideas")
    rid = lad.add_record(winner, knobs or {})
    lad.commit(f"record {rid}")
    return lad.vendor("--record", rid)


def refused(result, fragment: str) -> None:
    assert result.code == 2, (result.stdout, result.stderr)
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("vendor: "), result.stderr
    assert fragment in line, line


# ------------------------------------------------------------------------------------------
# freezing and deciding
# ------------------------------------------------------------------------------------------

BRANCHY = '''
"""Branchy toy kernel."""

from __future__ import annotations

import os

A = os.environ.get("TOY_A", "1") == "1"
B = os.environ.get("TOY_B", "1") == "1"
N = int(os.environ.get("TOY_N", "4"))
MODE = os.environ.get("TOY_MODE", "a")
CALLS = []


def effect(x):
    CALLS.append(x)
    return x


def chain(x):
    if A:
        r = "a"
    elif B:
        r = "b"
    else:
        r = "c"
    return r


def chain_unknown_head(x):
    # a comment that stays
    if x is not None and x > 0:
        r = "pos"
    elif A:
        r = "a"
    elif x is not None and x < -5:
        r = "neg"
    else:
        r = "else"
    return r


def chain_unknown_middle(x):
    r = "none"
    if B:
        r = "b"
    elif x:
        r = "x"
    elif A:
        r = "a"
    return r


def chain_no_else(x):
    r = "none"
    if not A:
        r = "not a"
    elif not B:
        r = "not b"
    return r


def nested(x):
    if A:
        if B:
            return 1
        elif x:
            return 2
        return 3
    else:
        if not B:
            return 4
    return 5


def emptied(x):
    if A:
        if not A:
            return "never"
    return "after"


def ternary(x):
    return ("t" if A else "f", "u" if x else ("v" if B else "w"), 1 if A and x else 0)


def values(x):
    return (A and x, x and A, B or x, x or B, not A, A or B and x, not (A and x), (A or x) and B)


def truth(x):
    out = []
    if x and A:
        out.append(1)
    if x or B:
        out.append(2)
    if not (A or x):
        out.append(3)
    if (x and not B) or (A and not x):
        out.append(4)
    return out


def side(x):
    if effect(x) and A:
        return "y"
    if B or effect(x):
        return "b"
    return "n"


def compare(x):
    out = []
    if N > 3:
        out.append("gt3")
    if N == 4:
        out.append("eq4")
    if 2 < N <= 8:
        out.append("range")
    if MODE in ("a", "b"):
        out.append("ab")
    if MODE not in ["c"]:
        out.append("notc")
    if x is not None and not isinstance(x, str) and N >= x:
        out.append("ge")
    if MODE == "a" or x:
        out.append("or")
    return out + [N * 2 if N > 5 else -N, N + 1 > 5 and MODE != "zz"]


def comprehension(x):
    return [i for i in range(4) if A or i == x]


def toy_fwd(x):
    return chain(x)


def toy_bwd(x):
    return N
'''

FUNCTIONS = [
    "chain",
    "chain_unknown_head",
    "chain_unknown_middle",
    "chain_no_else",
    "nested",
    "emptied",
    "ternary",
    "values",
    "truth",
    "side",
    "compare",
    "comprehension",
    "toy_fwd",
    "toy_bwd",
]

SETTINGS = [
    {},  # every knob takes its default (A, B true; N 4; MODE "a")
    {"TOY_A": True, "TOY_B": False, "TOY_N": 8, "TOY_MODE": "c"},
    {"TOY_A": False, "TOY_B": True, "TOY_N": 2, "TOY_MODE": "b"},
    {"TOY_A": False, "TOY_B": False, "TOY_N": 9, "TOY_MODE": "zz"},
]
DEFAULTS = {"TOY_A": True, "TOY_B": True, "TOY_N": 4, "TOY_MODE": "a"}


def test_conditions_are_decided_soundly(tmp_path):
    lad = one_idea(tmp_path, BRANCHY)
    original = (lad.root / lad.ideas / "001-first/kernel.py").read_text()
    for knobs in SETTINGS:
        res = record_and_vendor(lad, knobs)
        assert res.code == 0, res.stderr
        out = kernel_text(lad)
        effective = {**DEFAULTS, **knobs}
        assert_same_behaviour(original, out, effective, FUNCTIONS)
        # Every condition the knobs take part in is decided or folded: the bool and str
        # knobs are gone entirely, N survives only where it is a value (toy_bwd, N * 2).
        names = names_in(out)
        assert not names & {"A", "B", "MODE", "os"}
        assert "N" in names
        assert f"N = {effective['TOY_N']}" in out
        assert "# a comment that stays" in out
        if effective["TOY_A"]:
            assert [type(s) for s in function_body(out, "chain")] == [ast.Assign, ast.Return]
            assert "never" not in out
        if effective["TOY_A"] and effective["TOY_B"]:
            # no branch left at all: the statement disappears
            body = function_body(out, "chain_no_else")
            assert [type(s) for s in body] == [ast.Assign, ast.Return]
        if not effective["TOY_A"] and not effective["TOY_B"]:
            body = function_body(out, "chain")
            assert ast.unparse(body[0]) == "r = 'c'"
        # The call with an effect survives even where its condition is decided.
        assert ast.unparse(function_body(out, "side")).startswith("if effect(x)")


def test_if_positions_in_detail(tmp_path):
    lad = one_idea(tmp_path, BRANCHY)
    res = record_and_vendor(lad, {"TOY_A": True, "TOY_B": False})
    assert res.code == 0, res.stderr
    out = kernel_text(lad)
    # unknown, then decided true: the true branch becomes the else, the rest goes
    head = function_body(out, "chain_unknown_head")[0]
    assert isinstance(head, ast.If) and ast.unparse(head.test) == "x is not None and x > 0"
    assert ast.unparse(head.orelse) == "r = 'a'"
    # decided false first, then unknown, then decided true: elif becomes if, true -> else
    middle = function_body(out, "chain_unknown_middle")[1]
    assert ast.unparse(middle.test) == "x" and ast.unparse(middle.orelse) == "r = 'a'"
    # decided false, then decided true: only the true body is left, unconditional
    body = function_body(out, "chain_no_else")
    assert ast.unparse(body) == "r = 'none'\nr = 'not b'\nreturn r"
    # nested: outer true -> inner chain decided false -> elif x becomes the if
    nested = function_body(out, "nested")
    assert ast.unparse(nested[0]) == "if x:\n    return 2"
    # a body emptied by pruning keeps a pass
    assert "def emptied(x):\n    return 'after'" in ast.unparse(ast.parse(out))


JIT = '''
"""A Triton toy: knobs as constexpr globals."""

from __future__ import annotations

import os

import triton
import triton.language as tl

FAST = tl.constexpr(os.environ.get("TOY_FAST", "1") == "1")
BLOCK = triton.language.constexpr(int(os.environ.get("TOY_BLOCK", "64")))
UNROLL = tl.constexpr(os.environ.get("TOY_UNROLL", "0") == "1")


@triton.jit
def _act(x, FAST_ARG: tl.constexpr):
    if FAST:
        y = x * 2
    else:
        y = x + 1
    if FAST_ARG:
        y = y + 0
    return y


@triton.jit
def toy_kernel(X, N):
    offs = tl.arange(0, BLOCK)
    if UNROLL and N > 0:
        tl.store(X + offs, tl.load(X + offs) * 3)
    else:
        tl.store(X + offs, _act(tl.load(X + offs), FAST))


def shadow(FAST):
    if FAST:
        return 1
    return 0


def toy_fwd(x):
    return toy_kernel


def toy_bwd(x):
    return shadow(x)
'''


def test_pruning_inside_triton_jit(tmp_path):
    lad = one_idea(tmp_path, JIT)
    res = record_and_vendor(lad, {"TOY_FAST": False, "TOY_BLOCK": 128})
    assert res.code == 0, res.stderr
    out = kernel_text(lad)
    # still referenced as values: kept, frozen, still constexpr in the form written
    assert "FAST = tl.constexpr(False)" in out
    assert "BLOCK = triton.language.constexpr(128)" in out
    # only used in a decided condition: gone
    assert "UNROLL" not in out
    act = ast.unparse(function_body(out, "_act"))
    assert act == "y = x + 1\nif FAST_ARG:\n    y = y + 0\nreturn y"
    kernel = function_body(out, "toy_kernel")
    assert "* 3" not in ast.unparse(kernel) and "_act(tl.load(X + offs), FAST)" in out
    # a parameter that shadows a knob is not the knob
    assert ast.unparse(function_body(out, "shadow")) == "if FAST:\n    return 1\nreturn 0"
    # the output is valid Python that still decorates with triton.jit
    tree = ast.parse(out)
    jitted = [
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in n.decorator_list)
    ]
    assert jitted == ["_act", "toy_kernel"]


def test_knob_inventory_and_defaults(tmp_path):
    lad = one_idea(tmp_path, JIT)
    rid = lad.add_record("001-first", {"TOY_BLOCK": 256})
    lad.commit("record")
    res = lad.vendor("--record", rid, "--dry-run")
    assert res.code == 0, res.stderr
    lines = {ln.split()[0]: ln.split() for ln in res.stdout.splitlines() if ln.startswith("  TOY_")}
    assert lines["TOY_BLOCK"][1:4] == ["BLOCK", "256", "record"]
    assert lines["TOY_FAST"][1:4] == ["FAST", "True", "default"]
    assert lines["TOY_UNROLL"][1:4] == ["UNROLL", "False", "default"]
    assert not (lad.root / lad.package / "_kernels").exists()  # dry-run writes nothing
    assert "+++ b/package/src/kernel_fun/toy/_kernels/first.py" in res.stdout


# ------------------------------------------------------------------------------------------
# removing what became unused
# ------------------------------------------------------------------------------------------

PRUNE = '''
"""Pruning toy."""

from __future__ import annotations

import functools
import json
import os
from math import floor, sqrt

AUTO = os.environ.get("TOY_AUTO", "1") == "1"
__all__ = ["toy_fwd", "toy_bwd", "_listed"]
_REG = json.dumps({})


def _deep():
    return sqrt(4)


def _middle():
    return _deep()


def _listed():
    return 1


def _never_used():
    return 2


def _recursive(n):
    return _recursive(n - 1) if n else 0


def _kept():
    return floor(2.5)


class _Only:
    pass


def toy_fwd(x):
    if AUTO:
        return _middle() + (_Only is not None)
    return _kept()


def toy_bwd(x):
    return x
'''


@pytest.mark.parametrize("auto", [False, True])
def test_removes_only_what_became_unused(tmp_path, auto):
    lad = one_idea(tmp_path, PRUNE)
    res = record_and_vendor(lad, {"TOY_AUTO": auto})
    assert res.code == 0, res.stderr
    out = kernel_text(lad)
    names = module_names(out)
    always = {
        "annotations",
        "functools",
        "json",
        "_REG",
        "__all__",
        "_listed",
        "_never_used",
        "_recursive",
        "toy_fwd",
        "toy_bwd",
    }
    assert always <= names  # originally unused, entry points, __all__, effects: all kept
    assert not names & {"os", "AUTO"}
    if auto:
        # `return _kept()` after the now unconditional return is unreachable: it goes, and
        # so do _kept and floor, which only it used
        assert {"_middle", "_deep", "sqrt", "_Only"} <= names
        assert not names & {"_kept", "floor"}
    else:
        assert not names & {"_middle", "_deep", "sqrt", "_Only"}  # chained removal
        assert {"_kept", "floor"} <= names
    assert_same_behaviour(
        (lad.root / lad.ideas / "001-first/kernel.py").read_text(),
        out,
        {"TOY_AUTO": auto},
        ["toy_fwd", "toy_bwd", "_listed", "_never_used"],
    )


def test_refuses_an_undecided_use_of_a_removed_name(tmp_path):
    src = """
    import os

    A = os.environ.get("TOY_A", "1") == "1"

    if A:
        def scaled():
            return 1


    def toy_fwd(x):
        if x:
            return scaled()
        return 0


    def toy_bwd(x):
        return x
    """
    lad = one_idea(tmp_path, src)
    before = lad.package_bytes()
    res = record_and_vendor(lad, {"TOY_A": False})
    refused(res, "kernel.py:12: scaled is used under a condition the frozen knobs do not decide")
    assert lad.package_bytes() == before
    # With the knob on, the same code vendors.
    assert record_and_vendor(lad, {"TOY_A": True}).code == 0


# ------------------------------------------------------------------------------------------
# imports between ideas
# ------------------------------------------------------------------------------------------

FIRST = """
import os

SCALE = int(os.environ.get("TOY_SCALE", "3"))


def scaled(x):
    return x * SCALE


def toy_fwd(x):
    return scaled(x) + 1


def toy_bwd(x):
    return x
"""
UTIL = """
def twice(x):
    return 2 * x


def thrice(x):
    return 3 * x


def never(x):
    return x
"""
SECOND = """
from __future__ import annotations

import ladder.kernels.toy.ideas.i001.util as u
from ladder.kernels.toy.ideas.i001 import kernel as base
from ladder.kernels.toy.ideas.i001.util import twice

from . import extra


def toy_fwd(x):
    return base.scaled(x) + twice(x) + extra.plus(x) + u.thrice(x)


def toy_bwd(x):
    return base.toy_bwd(x)
"""
EXTRA = """
def plus(x):
    return x + 100
"""
MODULES = {
    "001-first": {"kernel": "first", "util": "util1"},
    "002-second": {"kernel": "second", "extra": "extra2"},
}


def _import_package(kdir: Path, name: str):
    spec = importlib.util.spec_from_file_location(
        name, kdir / "__init__.py", submodule_search_locations=[str(kdir)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def imported(kdir: Path, name: str):
    try:
        yield _import_package(kdir, name)
    finally:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]


def test_cross_idea_imports_are_rewritten_and_pulled_in(tmp_path):
    lad = FakeLadder(tmp_path / "repo", modules=MODULES)
    res = vendor_ideas(
        lad,
        {
            "001-first": {"kernel.py": FIRST, "util.py": UTIL},
            "002-second": {"kernel.py": SECOND, "extra.py": EXTRA},
        },
        "002-second",
        {"TOY_SCALE": 5},
    )
    assert res.code == 0, res.stderr
    kdir = lad.root / lad.package / "_kernels"
    assert sorted(p.name for p in kdir.glob("*.py")) == [
        "__init__.py",
        "extra2.py",
        "first.py",
        "second.py",
        "util1.py",
    ]
    second = (kdir / "second.py").read_text()
    for line in (
        "from . import util1 as u",
        "from . import first as base",
        "from .util1 import twice",
        "from . import extra2 as extra",
    ):
        assert line in second
    for path in kdir.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("ladder") for a in node.names)
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("ladder")
    assert "SCALE = 5" in (kdir / "first.py").read_text()
    # An imported module keeps only what the entry module reaches: never (used by nothing,
    # before the freeze too) goes, and so does 001's own toy_fwd, which 002 does not call.
    util1 = (kdir / "util1.py").read_text()
    assert "def never" not in util1 and "def twice" in util1 and "def thrice" in util1
    first = (kdir / "first.py").read_text()
    assert "def toy_fwd" not in first and "def toy_bwd" in first and "def scaled" in first
    assert "from .second import toy_bwd, toy_fwd" in (kdir / "__init__.py").read_text()
    with imported(kdir, "vendored_toy_pkg") as pkg:
        assert pkg.toy_fwd(1) == 1 * 5 + 2 + 101 + 3
        assert pkg.toy_bwd(7) == 7
    prov = vl.parse_provenance((lad.root / lad.package / "_provenance.py").read_bytes(), "p")
    assert sorted(prov["SOURCE_FILES"]) == [
        "ladder/kernels/toy/ideas/001-first/kernel.py",
        "ladder/kernels/toy/ideas/001-first/util.py",
        "ladder/kernels/toy/ideas/002-second/extra.py",
        "ladder/kernels/toy/ideas/002-second/kernel.py",
    ]


def test_an_import_dropped_by_the_freeze_is_not_pulled_in(tmp_path):
    src = """
    import os

    OLD = os.environ.get("TOY_OLD", "0") == "1"

    if OLD:
        from ladder.kernels.toy.ideas.i001.kernel import scaled
    else:
        def scaled(x):
            return -x


    def toy_fwd(x):
        return scaled(x)


    def toy_bwd(x):
        return x
    """
    lad = FakeLadder(tmp_path / "repo", modules={"002-second": {"kernel": "second"}})
    res = vendor_ideas(
        lad, {"001-first": {"kernel.py": FIRST}, "002-second": {"kernel.py": src}}, "002-second"
    )
    assert res.code == 0, res.stderr
    assert sorted(p.name for p in (lad.root / lad.package / "_kernels").glob("*.py")) == [
        "__init__.py",
        "second.py",
    ]
    # With the knob on, the import is needed, and 001 is not in the map: refused with the line.
    rid = lad.add_record("002-second", {"TOY_OLD": True})
    lad.commit("record")
    refused(lad.vendor("--record", rid), "ladder/kernels/toy/ideas/002-second/kernel.py:6:")


def test_a_module_whose_every_use_was_frozen_away_is_not_written(tmp_path):
    src = """
    import os

    from ladder.kernels.toy.ideas.i002 import helper

    OURS = os.environ.get("TOY_OURS", "0") == "1"


    def toy_fwd(x):
        if OURS:
            return helper.twice(x)
        return x


    def toy_bwd(x):
        return x
    """
    helper = """
    def twice(x):
        return 2 * x
    """
    lad = FakeLadder(
        tmp_path / "repo", modules={"002-second": {"kernel": "second", "helper": "helper"}}
    )
    res = vendor_ideas(lad, {"002-second": {"kernel.py": src, "helper.py": helper}}, "002-second")
    assert res.code == 0, res.stderr
    kernels = lad.root / lad.package / "_kernels"
    assert sorted(p.name for p in kernels.glob("*.py")) == ["__init__.py", "second.py"]
    assert "helper" not in (kernels / "second.py").read_text()
    # With the knob on, the helper is used and written.
    rid = lad.add_record("002-second", {"TOY_OURS": True})
    lad.commit("record")
    res = lad.vendor("--record", rid)
    assert res.code == 0, res.stderr
    assert sorted(p.name for p in kernels.glob("*.py")) == ["__init__.py", "helper.py", "second.py"]


def test_a_name_another_idea_reexports_is_kept(tmp_path):
    first = """
    import os

    OLD = os.environ.get("TOY_OLD", "0") == "1"


    def tool(x):
        return x * 7


    def toy_fwd(x):
        if OLD:
            return tool(x)
        return x


    def toy_bwd(x):
        return x
    """
    second = """
    from ladder.kernels.toy.ideas.i001.kernel import tool, toy_bwd, toy_fwd

    __all__ = ["toy_fwd", "toy_bwd", "tool"]
    """
    lad = FakeLadder(tmp_path / "repo", modules=MODULES)
    assert (
        vendor_ideas(
            lad,
            {"001-first": {"kernel.py": first}, "002-second": {"kernel.py": second}},
            "002-second",
        ).code
        == 0
    )
    kdir = lad.root / lad.package / "_kernels"
    assert "def tool" in (kdir / "first.py").read_text()
    with imported(kdir, "vendored_toy_reexport") as pkg:
        assert pkg.toy_fwd(3) == 3
        assert sys.modules["vendored_toy_reexport.second"].tool(2) == 14


def test_a_borrowed_helper_brings_only_what_it_reaches(tmp_path):
    """003 borrows 002's chain helper; 002's own entry points (and, through its toy_bwd,
    all of 001) are not part of 003's chain: they are not vendored, and 002's __all__ names
    only what is left."""
    first = """
    def toy_fwd(x):
        return x


    def toy_bwd(x):
        return -x
    """
    second = """
    from ladder.kernels.toy.ideas.i001 import kernel as k1

    __all__ = ["CASES", "chain", "toy_bwd", "toy_fwd"]

    CASES = ("dense",)
    toy_bwd = k1.toy_bwd


    def chain(x, stage):
        return stage(x) + 1


    def toy_fwd(x):
        return chain(x, abs)
    """
    third = """
    from ladder.kernels.toy.ideas.i002 import kernel as k2

    __all__ = ["toy_bwd", "toy_fwd"]


    def toy_fwd(x):
        return k2.chain(x, lambda y: 10 * y)


    def toy_bwd(x):
        return 2 * x
    """
    modules = {
        "001-first": {"kernel": "first"},
        "002-second": {"kernel": "second"},
        "003-third": {"kernel": "third"},
    }
    lad = FakeLadder(tmp_path / "repo", modules=modules)
    res = vendor_ideas(
        lad,
        {
            "001-first": {"kernel.py": first},
            "002-second": {"kernel.py": second},
            "003-third": {"kernel.py": third},
        },
        "003-third",
    )
    assert res.code == 0, res.stderr
    kdir = lad.root / lad.package / "_kernels"
    assert sorted(p.name for p in kdir.glob("*.py")) == ["__init__.py", "second.py", "third.py"]
    second_out = (kdir / "second.py").read_text()
    assert module_names(second_out) == {"__all__", "chain"}
    assert '__all__ = ["chain"]' in second_out
    with imported(kdir, "vendored_toy_borrow") as pkg:
        assert pkg.toy_fwd(3) == 31
        assert pkg.toy_bwd(3) == 6
    prov = vl.parse_provenance((lad.root / lad.package / "_provenance.py").read_bytes(), "p")
    assert "ladder/kernels/toy/ideas/001-first/kernel.py" in prov["SOURCE_FILES"]


def test_uses_out_of_sight_keep_their_code_in_an_imported_module(tmp_path):
    """A decorator that registers a function, an import kept for its effect and a lookup
    through globals() are uses the prune cannot see: what they reach stays."""
    first = """
    import json  # noqa: F401

    _REG = {}


    def register(f):
        _REG[f.__name__] = f
        return f


    @register
    def op_a(x):
        return x + 1


    def call(name, x):
        return _REG[name](x)


    def toy_fwd(x):
        return x


    def toy_bwd(x):
        return x
    """
    util = """
    def _op_b(x):
        return x + 2


    def by_name(name, x):
        return globals()["_" + name](x)


    def unused(x):
        return x
    """
    second = """
    from ladder.kernels.toy.ideas.i001 import kernel as k1
    from ladder.kernels.toy.ideas.i001 import util


    def toy_fwd(x):
        return k1.call("op_a", x) + util.by_name("op_b", x)


    def toy_bwd(x):
        return x
    """
    lad = FakeLadder(tmp_path / "repo", modules=MODULES)
    res = vendor_ideas(
        lad,
        {"001-first": {"kernel.py": first, "util.py": util}, "002-second": {"kernel.py": second}},
        "002-second",
    )
    assert res.code == 0, res.stderr
    kdir = lad.root / lad.package / "_kernels"
    names = module_names((kdir / "first.py").read_text())
    assert {"json", "_REG", "register", "op_a", "call"} <= names
    assert not names & {"toy_fwd", "toy_bwd"}  # nothing reaches them
    assert {"_op_b", "by_name", "unused"} <= module_names((kdir / "util1.py").read_text())
    with imported(kdir, "vendored_toy_unseen") as pkg:
        assert pkg.toy_fwd(1) == 2 + 3


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("from ladder.paths import repo_root", "kernel.py:1: imports ladder.paths"),
        ("import ladder.kernels.toy.ideas.i001.kernel", "kernel.py:1: `import ladder.kernels"),
        ("import ladder", "kernel.py:1: imports ladder, which the vendor cannot rewrite"),
        ("from ladder.kernels.toy.ideas.i001 import nothere", "idea 001-first has no module"),
        (
            "from ladder.kernels.toy.ideas.i001 import kernel",
            "001-first/kernel.py, imported here, is not in the VENDOR",
        ),
        ("from ladder.kernels.other.ideas.i001 import kernel", "an idea of family other"),
        ("import os, ladder.kernels.toy.ideas.i001.kernel as k", "on a line of its own"),
    ],
)
def test_refuses_references_to_ladder_it_cannot_rewrite(tmp_path, line, fragment):
    src = line + "\n\n\ndef toy_fwd(x):\n    return x\n\n\ndef toy_bwd(x):\n    return x\n"
    lad = FakeLadder(tmp_path / "repo", modules={"002-second": {"kernel": "second"}})
    lad.add_idea("001-first", {"kernel.py": FIRST})
    lad.add_idea("002-second", {"kernel.py": src})
    lad.commit("ideas")
    rid = lad.add_record("002-second", {})
    lad.commit("record")
    before = lad.package_bytes()
    refused(lad.vendor("--record", rid), fragment)
    assert lad.package_bytes() == before


# ------------------------------------------------------------------------------------------
# selection, idempotence, atomic writes, dry runs
# ------------------------------------------------------------------------------------------


def _provenance(lad: FakeLadder) -> dict[str, Any]:
    return vl.parse_provenance((lad.root / lad.package / "_provenance.py").read_bytes(), "p")


def test_winner_selection(tmp_path):
    lad = FakeLadder(
        tmp_path / "repo",
        modules={"001-first": {"kernel": "first"}, "002-second": {"kernel": "second"}},
    )
    lad.add_idea("001-first", {"kernel.py": PLAIN})
    lad.add_idea("002-second", {"kernel.py": PLAIN.replace("x + K", "x - K")})
    lad.commit("ideas")
    slow = lad.add_record("001-first", {"TOY_K": 1}, ratio=1.2)
    fast = lad.add_record("002-second", {"TOY_K": 2}, ratio=1.8)
    lad.add_record("001-first", {"TOY_K": 3}, ratio=9.0, dirty=True)
    lad.add_record("001-first", {"TOY_K": 4}, ratio=9.0, device="NVIDIA B300")
    lad.add_record("001-first", {"TOY_K": 5}, ratio=9.0, status="incorrect")
    lad.commit("records")
    assert lad.vendor().code == 0
    assert _provenance(lad)["RECORD"]["record_id"] == fast
    assert "K = 2" in kernel_text(lad, "second")
    assert lad.vendor("--idea", "1").code == 0
    prov = _provenance(lad)
    assert (prov["RECORD"]["idea"], prov["RECORD"]["record_id"]) == ("001-first", slow)
    assert prov["KNOBS"] == {"TOY_K": 1}
    assert not (lad.root / lad.package / "_kernels" / "second.py").exists()


def test_two_runs_are_byte_identical_and_a_commit_reproduces(tmp_path):
    lad = one_idea(tmp_path, BRANCHY)
    source = lad.git("rev-parse", "HEAD")
    rid = lad.add_record("001-first", {"TOY_N": 6})
    source = lad.commit("record")
    assert lad.vendor().code == 0
    first = lad.package_bytes()
    res = lad.vendor()  # the outputs are uncommitted now, but exactly a vendor's output
    assert res.code == 0, res.stderr
    assert lad.package_bytes() == first
    assert "0 file(s) changed" in res.stdout
    lad.commit("vendor")
    res = lad.vendor("--commit", source, "--record", rid)
    assert res.code == 0 and lad.package_bytes() == first
    assert lad.git("status", "--porcelain") == ""
    res = lad.vendor("--commit", source, "--dry-run")
    assert res.code == 0 and "no changes" in res.stdout


def test_family_edits_outside_what_the_vendor_reads_do_not_move_the_pin(tmp_path):
    """A later commit that edits family.py (shapes, the baseline...) but not FAMILY,
    ENTRY_POINTS, TARGET_DEVICE or the VENDOR entries of the vendored modules leaves the
    vendor output byte for byte as it was (mapping another idea included); renaming a
    vendored module moves SOURCE_COMMIT to that commit."""
    lad = one_idea(tmp_path, BRANCHY)
    rid = lad.add_record("001-first", {"TOY_N": 6})
    source = lad.commit("record")
    assert lad.vendor().code == 0
    lad.commit("vendor")
    first = lad.package_bytes()
    assert _provenance(lad)["SOURCE_COMMIT"] == source
    family = f"ladder/kernels/{lad.family}/family.py"
    text = lad.read(family).decode()
    lad.write(family, text + '\nSHAPES = {"prod": []}\n\n\ndef baseline_retune():\n    return []\n')
    lad.commit("family: harness-only edit")
    res = lad.vendor()
    assert res.code == 0, res.stderr
    assert lad.package_bytes() == first and "0 file(s) changed" in res.stdout
    lad.set_family({"001-first": {"kernel": "first"}, "002-later": {"kernel": "later"}})
    lad.commit("family: map another idea")
    res = lad.vendor("--record", rid)
    assert res.code == 0, res.stderr
    assert lad.package_bytes() == first and "0 file(s) changed" in res.stdout
    assert _provenance(lad)["SOURCE_COMMIT"] == source
    lad.set_family({"001-first": {"kernel": "first_v2"}, "002-later": {"kernel": "later"}})
    moved = lad.commit("family: rename the vendored module")
    assert lad.vendor("--record", rid).code == 0
    assert _provenance(lad)["SOURCE_COMMIT"] == moved


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4])
def test_a_failure_while_swapping_leaves_the_package_untouched(tmp_path, monkeypatch, fail_at):
    lad = one_idea(tmp_path, PLAIN)
    assert record_and_vendor(lad, {"TOY_K": 1}).code == 0
    (lad.root / lad.package / "_kernels" / "__pycache__").mkdir()
    lad.commit("vendored")
    before = lad.package_bytes()
    rid = lad.add_record("001-first", {"TOY_K": 2})
    lad.commit("record")
    real_replace = os.replace
    calls = {"n": 0}

    def flaky(src, dst):
        calls["n"] += 1
        if calls["n"] == fail_at:
            raise OSError("injected failure")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    res = lad.vendor("--record", rid)
    refused(res, "writing failed, the package is as it was: injected failure")
    assert calls["n"] >= fail_at
    assert lad.package_bytes() == before
    assert (lad.root / lad.package / "_kernels" / "__pycache__").is_dir()
    assert not list((lad.root / lad.package).glob(".vendor-*"))
    monkeypatch.setattr(os, "replace", real_replace)
    assert lad.vendor("--record", rid).code == 0
    assert "K = 2" in kernel_text(lad)


def test_stale_staging_folders_of_its_own_naming_are_removed(tmp_path):
    lad = one_idea(tmp_path, PLAIN)
    pkg = lad.root / lad.package
    # what a vendor killed outright between its renames leaves behind
    killed = pkg / ".vendor-a1b2_c3d"
    (killed / "old" / "_kernels").mkdir(parents=True)
    (killed / "old" / "_kernels" / "first.py").write_text("x = 1\n")
    (killed / "new" / "_provenance.py").parent.mkdir(parents=True)
    (killed / "new" / "_provenance.py").write_text("X = 1\n")
    # not of its naming (a file, other length): left alone, drift names them
    other = pkg / ".vendor-mine"
    other.mkdir()
    (pkg / ".vendor-12345678.txt").write_text("keep\n")
    assert record_and_vendor(lad, {"TOY_K": 2}).code == 0
    assert not killed.exists()
    assert other.is_dir() and (pkg / ".vendor-12345678.txt").is_file()
    assert sorted(p.name for p in pkg.glob(".vendor-*")) == [".vendor-12345678.txt", ".vendor-mine"]
    assert "K = 2" in kernel_text(lad)


def test_a_first_vendor_that_fails_writes_nothing(tmp_path, monkeypatch):
    lad = one_idea(tmp_path, PLAIN)
    rid = lad.add_record("001-first", {})
    lad.commit("record")
    before = lad.package_bytes()

    def broken(src, dst):
        if str(dst).endswith("_provenance.py"):
            raise OSError("disk full")
        return real(src, dst)

    real = os.replace
    monkeypatch.setattr(os, "replace", broken)
    refused(lad.vendor("--record", rid), "disk full")
    assert lad.package_bytes() == before
    assert not (lad.root / lad.package / "_kernels").exists()


def test_generated_header_and_provenance_literals(tmp_path):
    lad = one_idea(tmp_path, PLAIN)
    rid = lad.add_record("001-first", {"TOY_K": 7})
    head = lad.commit("record")
    assert lad.vendor().code == 0
    out = kernel_text(lad)
    assert out.startswith(
        "# Generated by tools/vendor.py from ladder/kernels/toy/ideas/001-first/kernel.py\n"
        f"# at {head}; do not edit: change the idea and re-vendor.\n"
    )
    prov = _provenance(lad)
    record_bytes = lad.read(f"{lad.ideas}/001-first/records/{rid}.json")
    assert prov["SOURCE_COMMIT"] == head
    assert prov["RECORD"] == {
        "idea": "001-first",
        "record_id": rid,
        "sha256": vl.sha256(record_bytes),
    }
    assert prov["KNOBS"] == {"TOY_K": 7}
    assert prov["SOURCE_FILES"] == {
        f"{lad.ideas}/001-first/kernel.py": vl.sha256(lad.read(f"{lad.ideas}/001-first/kernel.py"))
    }
    assert prov["OUTPUT_FILES"] == {
        p: vl.sha256(b)
        for p, b in lad.package_bytes().items()
        if p.startswith(f"{lad.package}/_kernels/")
    }
    assert prov["VENDOR"]["tool_sha256"] == vl.tool_sha256()
    assert prov["VENDOR"]["libcst"] == vl.libcst_version()
    # ruff-formatted: formatting the output again changes nothing
    path = f"{lad.package}/_kernels/first.py"
    pyproject = lad.read("pyproject.toml")
    assert vl.format_python(out, path, pyproject) == out.encode()


# ------------------------------------------------------------------------------------------
# refusals: one line, exit 2, nothing written
# ------------------------------------------------------------------------------------------


def _code_changed(lad: FakeLadder) -> None:
    lad.write(f"{lad.ideas}/001-first/kernel.py", PLAIN.replace("x + K", "x + K + 0"))
    lad.commit("change the code after the bench")


REFUSALS = {
    "unknown family": (lambda lad: None, ["--family-override", "nope"], "unknown family 'nope'"),
    "idea not mapped": (
        lambda lad: (lad.add_idea("002-second", {"kernel.py": PLAIN}), lad.commit()),
        ["--idea", "002"],
        "idea 002-second is not in the VENDOR['modules'] map of ladder/kernels/toy/family.py",
    ),
    "no such idea": (lambda lad: None, ["--idea", "9"], "no single idea '9'"),
    "the baseline": (
        lambda lad: (lad.add_idea("000-fla", {"kernel.py": PLAIN}), lad.commit()),
        ["--idea", "000"],
        "000-fla is family toy's baseline (fla's own op, benched only to compare against): it "
        "is never vendored",
    ),
    "a record of another idea": (
        lambda lad: (
            lad.add_idea("002-second", {"kernel.py": PLAIN}),
            lad.set_family({"001-first": {"kernel": "first"}, "002-second": {"kernel": "second"}}),
            lad.add_record("001-first", {}),  # the fixture's first record id, below
            lad.commit(),
        ),
        ["--idea", "002", "--record", "20260101T000001Z-000001"],
        "record 20260101T000001Z-000001 belongs to idea 001-first, not 002-second; drop --idea, "
        "or pass a record of 002-second",
    ),
    "no winner": (lambda lad: None, [], "no winner for toy"),
    "code_sha mismatch": (
        lambda lad: (lad.add_record("001-first", {}), lad.commit(), _code_changed(lad)),
        ["--idea", "001"],
        "re-bench it: `make bench FAMILY=toy IDEA=001`",
    ),
    "dirty idea": (
        lambda lad: (
            lad.add_record("001-first", {}),
            lad.commit(),
            lad.write(f"{lad.ideas}/001-first/NOTES.md", "edited\n"),
        ),
        [],
        "ladder/kernels/toy/ideas/001-first/NOTES.md has uncommitted changes",
    ),
    "uncommitted record": (
        lambda lad: lad.add_record("001-first", {}),
        [],
        "has uncommitted changes",
    ),
    "dirty family.py": (
        lambda lad: (
            lad.add_record("001-first", {}),
            lad.commit(),
            lad.write(
                "ladder/kernels/toy/family.py",
                lad.read("ladder/kernels/toy/family.py").decode() + "#\n",
            ),
        ),
        [],
        "ladder/kernels/toy/family.py has uncommitted changes",
    ),
    "record knob never read": (
        lambda lad: (lad.add_record("001-first", {"TOY_GHOST": 1}), lad.commit()),
        [],
        "knob TOY_GHOST is not read by the code",
    ),
    "record knob of the wrong type": (
        lambda lad: (lad.add_record("001-first", {"TOY_K": True}), lad.commit()),
        [],
        "knob TOY_K is a int",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals(tmp_path, case):
    prepare, args, fragment = REFUSALS[case]
    lad = one_idea(tmp_path, PLAIN)
    prepare(lad)
    before = lad.package_bytes()
    if args[:1] == ["--family-override"]:
        res = invoke(vendor.app, [args[1], "--repo", str(lad.root)])
    else:
        res = lad.vendor(*args)
    refused(res, fragment)
    assert lad.package_bytes() == before


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ('A = os.environ["TOY_A"]', "kernel.py:3: os.environ[...] is not a knob form"),
        ('A = os.getenv("TOY_A", "1")\nA = 2', "kernel.py:4: knob A (TOY_A) is assigned twice"),
        (
            'A = os.getenv("TOY_A", "1")\n\n\ndef f():\n    global A\n    A = 3',
            "kernel.py:8: knob A (TOY_A) is assigned through `global`",
        ),
        ('def f():\n    return os.getenv("TOY_A", "1")', "kernel.py:4: environment access"),
        ("def f(:\n    pass", "kernel.py:3: syntax error"),
    ],
)
def test_refuses_bad_sources(tmp_path, body, fragment):
    src = (
        "import os\n\n"
        + body
        + "\n\n\ndef toy_fwd(x):\n    return x\n\n\ndef toy_bwd(x):\n    return x\n"
    )
    lad = FakeLadder(tmp_path / "repo")
    lad.write(f"{lad.ideas}/001-first/kernel.py", src)
    lad.commit("idea")
    rid = lad.add_record("001-first", {})
    lad.commit("record")
    refused(lad.vendor("--record", rid), fragment)
    assert not (lad.root / lad.package / "_kernels").exists()


def test_refuses_records_that_do_not_promote(tmp_path):
    lad = one_idea(tmp_path, PLAIN)
    bad = lad.add_record("001-first", {}, status="incorrect")
    dirty = lad.add_record("001-first", {}, dirty=True)
    lad.commit("records")
    refused(lad.vendor("--record", bad), "status is 'incorrect'")
    refused(lad.vendor("--record", dirty), "benched on a dirty tree")
    refused(lad.vendor("--record", "20990101T000000Z-abcdef"), "is in no idea's records/ at")
    _code_changed(lad)
    good = lad.add_record("001-first", {}, code="0" * 64)
    lad.commit("record")
    refused(lad.vendor("--record", good), f"record {good} of 001-first was benched on code")


def test_refuses_hand_edits_it_would_overwrite(tmp_path):
    lad = one_idea(tmp_path, PLAIN)
    assert record_and_vendor(lad, {}).code == 0
    path = lad.root / lad.package / "_kernels" / "first.py"
    path.write_text(path.read_text() + "# hand edit\n")
    rel = path.relative_to(lad.root).as_posix()
    # never committed: the only way back is to drop the outputs and vendor again
    refused(
        lad.vendor(),
        f"{rel} has uncommitted changes that the vendor did not make; commit or discard them "
        f"first (`rm -r {lad.package}/_kernels {lad.package}/_provenance.py` and vendor again;",
    )
    assert path.read_text().endswith("# hand edit\n")
    shutil.rmtree(lad.root / lad.package / "_kernels")
    (lad.root / lad.package / "_provenance.py").unlink()
    assert lad.vendor().code == 0
    lad.commit("vendored")
    # committed: git restores an edited file; an extra file is removed
    path.write_text(path.read_text() + "# hand edit\n")
    refused(lad.vendor(), f"{rel} has uncommitted changes that the vendor did not make")
    refused(lad.vendor(), f"(`git checkout -- {rel}`;")
    lad.git("checkout", "--", rel)
    extra = path.parent / "extra.py"
    extra.write_text("x = 1\n")
    refused(lad.vendor(), f"(`rm {extra.relative_to(lad.root).as_posix()}`;")
    extra.unlink()
    assert lad.vendor().code == 0


def test_refuses_when_an_entry_point_is_gone_after_the_freeze(tmp_path):
    src = textwrap.dedent(
        """
        import os

        NEW = os.environ.get("TOY_NEW", "1") == "1"

        if NEW:
            def toy_fwd(x):
                return x


        def toy_bwd(x):
            return x
        """
    )
    lad = one_idea(tmp_path, src)
    refused(record_and_vendor(lad, {"TOY_NEW": False}), "defines no toy_fwd after freezing")


def test_ruff_missing_is_a_clear_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ruff" else real(name, *a)
    )
    with pytest.raises(vl.VendorError, match="ruff is not installed"):
        vl.format_python("x = 1\n", "a.py", None)


# ------------------------------------------------------------------------------------------
# the real repository
# ------------------------------------------------------------------------------------------

# every family of this checkout (a folder under ladder/kernels with a family.py): the tests
# skip those not vendored yet
REAL_FAMILIES = sorted(p.parent.name for p in (vl.TOOL_ROOT / "ladder/kernels").glob("*/family.py"))


@pytest.mark.parametrize("family", REAL_FAMILIES)
def test_real_repository_package_is_what_the_vendor_makes(family: str):
    skip_in_a_shallow_clone()
    repo = vl.TOOL_ROOT
    prov_path = repo / f"package/src/kernel_fun/{family}/_provenance.py"
    if not prov_path.is_file():
        pytest.skip(f"{family} is not vendored in this checkout yet (no _provenance.py)")
    prov = vl.parse_provenance(prov_path.read_bytes(), "_provenance.py")
    commit = prov["SOURCE_COMMIT"]
    spec_then = vl.load_family_spec(repo, commit, family)
    spec = vl.load_family_spec(repo, "HEAD", family)
    result = vl.build(repo, spec_then, commit, prov["RECORD"]["idea"], prov["RECORD"]["record_id"])
    on_disk = vl.current_outputs(repo, spec)
    for path, data in result.outputs.items():
        if path != spec.provenance_path:
            assert on_disk.get(path) == data, f"{path} is not what the vendor makes"
    assert {k: result.provenance[k] for k in vl.PROVENANCE_KEYS if k != "VENDOR"} == {
        k: prov[k] for k in vl.PROVENANCE_KEYS if k != "VENDOR"
    }


@pytest.mark.parametrize("family", REAL_FAMILIES)
def test_real_repository_vendor_at_head_changes_nothing(family: str):
    """`make vendor FAMILY=<family>` on a clean checkout is a no-op for every vendored family:
    the committed package is what the vendor makes from HEAD from the board's winner (pinned
    to the last commit that changed an input). A new winning record, or a change to the
    winner's code, fails here until the family is re-vendored."""
    skip_in_a_shallow_clone()
    repo = vl.TOOL_ROOT
    if not (repo / f"package/src/kernel_fun/{family}/_provenance.py").is_file():
        pytest.skip(f"{family} is not vendored in this checkout yet (no _provenance.py)")
    if subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--", "tools", "ladder", "package"],
        capture_output=True,
        text=True,
    ).stdout.strip():
        pytest.skip("this checkout has uncommitted changes under tools/, ladder/ or package/")
    res = invoke(vendor.app, [family, "--repo", str(repo), "--dry-run"])
    assert res.code == 0, res.stderr
    assert "no changes: the package already is this vendor output" in res.stdout, res.stdout


@pytest.mark.parametrize("family", REAL_FAMILIES)
def test_real_repository_vendor_at_the_source_commit_changes_nothing(family: str):
    skip_in_a_shallow_clone()
    repo = vl.TOOL_ROOT
    prov_path = repo / f"package/src/kernel_fun/{family}/_provenance.py"
    if not prov_path.is_file():
        pytest.skip(f"{family} is not vendored in this checkout yet (no _provenance.py)")
    prov = vl.parse_provenance(prov_path.read_bytes(), "_provenance.py")
    args = [family, "--repo", str(repo), "--dry-run", "--commit", prov["SOURCE_COMMIT"]]
    res = invoke(vendor.app, [*args, "--record", prov["RECORD"]["record_id"]])
    if res.code == 2 and "uncommitted changes" in res.stderr:
        pytest.skip(f"this checkout has uncommitted changes the vendor reads: {res.stderr}")
    assert res.code == 0, res.stderr
    if "no changes: the package already is this vendor output" in res.stdout:
        return
    # Only the vendor's own fingerprint may differ (the tool was edited since): no code.
    changed = [
        ln
        for ln in res.stdout.splitlines()
        if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))
    ]
    assert changed
    headers = [ln for ln in res.stdout.splitlines() if ln.startswith("+++ ")]
    assert headers == [f"+++ b/package/src/kernel_fun/{family}/_provenance.py"], headers
    assert all(any(k in ln for k in ('"tool_sha256"', '"libcst"', '"ruff"')) for ln in changed)


def skip_in_a_shallow_clone() -> None:
    """These tests re-run the vendor at SOURCE_COMMIT, which a shallow clone may not hold."""
    if vl.is_shallow(vl.TOOL_ROOT):
        pytest.skip(
            "a shallow clone: SOURCE_COMMIT needs the full history (`git fetch --unshallow`)"
        )
