"""ladder.knobs: every accepted knob form, every refused environment read, value conversion.

The conversion is checked against the code itself: each module is executed with the
environment set and the constants it computes are compared with ``effective_values``.
"""

from __future__ import annotations

import os
import re
import textwrap

import pytest

from ladder.knobs import Knob, KnobError, effective_values, parse_value, scan_idea, scan_source

HEADER = """\
import os
import os as o
from os import environ, getenv
from os import environ as env
import triton
import triton.language as tl
"""

# (assignment, key, name, kind, default, constexpr)
ACCEPTED = [
    (
        'TARGET = int(os.environ.get("TOY_TARGET", "2048"))',
        "TOY_TARGET",
        "TARGET",
        "int",
        2048,
        False,
    ),
    ('SCALE = float(os.getenv("TOY_SCALE", "0.5"))', "TOY_SCALE", "SCALE", "float", 0.5, False),
    ('FAST = os.environ.get("TOY_FAST", "1") == "1"', "TOY_FAST", "FAST", "bool", True, False),
    ('SLOW = os.environ.get("TOY_SLOW", "0") != "0"', "TOY_SLOW", "SLOW", "bool", False, False),
    ('MODE = os.environ.get("TOY_MODE", "strip")', "TOY_MODE", "MODE", "str", "strip", False),
    ('ALIAS = int(o.environ.get("TOY_ALIAS", "3"))', "TOY_ALIAS", "ALIAS", "int", 3, False),
    ('FROM = environ.get("TOY_FROM", "x")', "TOY_FROM", "FROM", "str", "x", False),
    ('GET = int(getenv("TOY_GET", "7"))', "TOY_GET", "GET", "int", 7, False),
    ('RENAMED = env.get("TOY_RENAMED", "1") == "1"', "TOY_RENAMED", "RENAMED", "bool", True, False),
    ('KW = float(os.getenv("TOY_KW", default="1.5"))', "TOY_KW", "KW", "float", 1.5, False),
    ('CE = tl.constexpr(os.environ.get("TOY_CE", "1") == "1")', "TOY_CE", "CE", "bool", True, True),
    ('CI = tl.constexpr(int(os.environ.get("TOY_CI", "64")))', "TOY_CI", "CI", "int", 64, True),
    ('CF = triton.language.constexpr(o.getenv("TOY_CF", "a"))', "TOY_CF", "CF", "str", "a", True),
    ('_PRIV = int(os.environ.get("TOY_PRIV", "1"))', "TOY_PRIV", "_PRIV", "int", 1, False),
]


@pytest.mark.parametrize(("line", "key", "name", "kind", "default", "constexpr"), ACCEPTED)
def test_accepted_forms(line, key, name, kind, default, constexpr):
    src = HEADER + "\n" + line + "\n"
    (knob,) = scan_source(src, "kernel.py", "toy")
    assert (knob.key, knob.name, knob.kind, knob.constexpr) == (key, name, kind, constexpr)
    assert knob.default == default and type(knob.default) is type(default)
    assert knob.file == "kernel.py"
    assert knob.line == src.count("\n")  # the assignment is the last line


def test_all_forms_in_one_module_in_source_order():
    src = HEADER + "\n".join(a[0] for a in ACCEPTED) + "\n"
    knobs = scan_source(src, "k.py", "toy")
    assert [k.key for k in knobs] == [a[1] for a in ACCEPTED]
    assert [k.line for k in knobs] == sorted(k.line for k in knobs)


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        ("0", 'FAST = os.environ.get("TOY_FAST", "1") == "1"'),
        ("1", 'FAST = os.environ.get("TOY_FAST", "1") == "1"'),
        ("yes", 'FAST = os.environ.get("TOY_FAST", "1") == "1"'),
        ("0", 'FAST = os.environ.get("TOY_FAST", "1") != "0"'),
        ("", 'FAST = os.environ.get("TOY_FAST", "1") != "0"'),
        (" 12", 'FAST = int(os.environ.get("TOY_FAST", "1"))'),
        ("1_000", 'FAST = int(os.environ.get("TOY_FAST", "1"))'),
        ("-3", 'FAST = int(os.environ.get("TOY_FAST", "1"))'),
        ("2.5e-1", 'FAST = float(os.getenv("TOY_FAST", "1"))'),
        ("inf", 'FAST = float(os.getenv("TOY_FAST", "1"))'),
        ("tiled", 'FAST = os.environ.get("TOY_FAST", "strip")'),
        ("0", 'FAST = tl.constexpr(os.environ.get("TOY_FAST", "1") == "1")'),
    ],
)
def test_values_match_what_the_code_computes(monkeypatch, raw, line):
    src = HEADER + line + "\n"
    knobs = {k.key: k for k in scan_source(src, "k.py", "toy")}
    for env in ({}, {"TOY_FAST": raw}):
        monkeypatch.delenv("TOY_FAST", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        namespace: dict = {}
        exec(compile(src, "k.py", "exec"), namespace)
        got = namespace["FAST"]
        if hasattr(got, "value"):  # tl.constexpr
            got = got.value
        want = effective_values(knobs, os.environ)["TOY_FAST"]
        assert want == got and type(want) is type(got)


def test_parse_value_rejects_what_the_code_would_reject():
    (knob,) = scan_source(HEADER + 'N = int(os.getenv("TOY_N", "1"))\n', "k.py", "toy")
    with pytest.raises(ValueError):
        int("four")
    with pytest.raises(KnobError, match=r"^k\.py:\d+: TOY_N='four' is not a valid int"):
        parse_value(knob, "four")
    with pytest.raises(KnobError):
        effective_values([knob], {"TOY_N": "four"})
    assert effective_values([knob], {"OTHER": "x"}) == {"TOY_N": 1}


def test_names_are_matched_by_qualified_name_not_text():
    # A dict that happens to be called environ is not the environment: no knob, no refusal.
    src = 'environ = {"TOY_A": "1"}\nA = environ.get("TOY_A", "1") == "1"\n'
    assert scan_source(src, "k.py", "toy") == []
    # ...while an aliased import of the real one is recognised.
    src = 'from os import environ as e\nA = e.get("TOY_A", "1") == "1"\n'
    assert [k.key for k in scan_source(src, "k.py", "toy")] == ["TOY_A"]


REFUSED = [
    ("non-literal key", 'K = "TOY_A"\nA = os.getenv(K, "1")', 8, "not a string literal"),
    ("f-string key", 'A = os.getenv(f"TOY_{1}", "1")', 7, "not a string literal"),
    ("missing default", 'A = os.environ.get("TOY_A")', 7, "has no default"),
    ("non-string default", 'A = int(os.environ.get("TOY_A", 3))', 7, "default is not a string"),
    ("bad default", 'A = int(os.environ.get("TOY_A", "x"))', 7, "not a valid int"),
    ("subscript", 'A = os.environ["TOY_A"]', 7, "os.environ[...]"),
    ("subscript elsewhere", 'print(os.environ["TOY_A"])', 7, "knob assignment"),
    ("inside a function", 'def f():\n    return os.getenv("TOY_A", "1")', 8, "inside a function"),
    (
        "environ in a function",
        'def f():\n    return environ.get("TOY_A", "1")',
        8,
        "inside a function",
    ),
    ("inside a method", 'class K:\n    A = os.getenv("TOY_A", "1")', 8, "inside a function"),
    ("assigned twice", 'A = os.getenv("TOY_A", "1")\nA = "2"', 8, "assigned twice"),
    (
        "rebound by a loop",
        'A = os.getenv("TOY_A", "1")\nfor A in ():\n    pass',
        8,
        "assigned twice",
    ),
    (
        "through global",
        'A = os.getenv("TOY_A", "1")\ndef f():\n    global A\n    A = "3"',
        10,
        "through `global`",
    ),
    ("augmented", 'A = int(os.getenv("TOY_A", "1"))\nA += 1', 8, "augmented"),
    ("other read", "E = dict(os.environ)", 7, "unsupported form"),
    ("copy", "E = os.environ.copy()", 7, "unsupported form"),
    ("bare statement", 'os.environ.setdefault("TOY_A", "1")', 7, "knob assignment"),
    ("passed around", "def f(e=environ):\n    return e", 7, "inside a function"),
    ("aliased", "E = environ", 7, "unsupported form"),
    ("os as a value", 'X = getattr(os, "environ")', 7, "os module is used as a value"),
    ("putenv", 'os.putenv("TOY_A", "1")', 7, "knob assignment"),
    ("no prefix", 'A = os.getenv("OTHER_A", "1")', 7, "does not start with 'TOY_'"),
    ("bare prefix", 'A = os.getenv("TOY_", "1")', 7, "does not start with 'TOY_'"),
    ("lower-case target", 'mode = os.getenv("TOY_MODE", "a")', 7, "not an ALL-CAPS"),
    ("tuple target", 'A, B = os.getenv("TOY_A", "1"), 2', 7, "one plain name"),
    ("two targets", 'A = B = os.getenv("TOY_A", "1")', 7, "one plain name"),
    ("two reads", 'A = os.getenv("TOY_A", "1") + os.getenv("TOY_B", "1")', 7, "unsupported"),
    ("under if", 'if True:\n    A = os.getenv("TOY_A", "1")', 8, "outside a module-level"),
    ("same key twice", 'A = os.getenv("TOY_A", "1")\nB = os.getenv("TOY_A", "1")', 8, "read twice"),
    ("bool() wrapper", 'A = bool(os.getenv("TOY_A", "1"))', 7, "unsupported form"),
    ("method on the read", 'A = os.getenv("TOY_A", "1").lower() == "1"', 7, "unsupported form"),
    ("two statements", 'A = os.getenv("TOY_A", "1"); B = 2', 7, "single knob assignment"),
    ("star import", "from os import *", 7, "import *"),
    # dynamic imports and the module table hand out os unseen
    ("__import__", 'E = __import__("os").environ', 7, "imports a module at run time"),
    (
        "__import__ in knob form",
        'A = __import__("os").environ.get("TOY_A", "1")',
        7,
        "imports a module at run time",
    ),
    (
        "import_module",
        'import importlib\nE = importlib.import_module("os").environ',
        8,
        "importlib.import_module imports a module at run time",
    ),
    (
        "import_module imported",
        'from importlib import import_module as im\nG = im("os").getenv("TOY_A", "1")',
        8,
        "imports a module at run time",
    ),
    ("__builtins__", 'I = __builtins__["__import__"]', 7, "__import__ and the builtins"),
    ("sys.modules", 'import sys\nE = sys.modules["os"].environ', 8, "sys.modules hands out"),
    (
        "sys.modules in a function",
        'import sys\ndef f():\n    return sys.modules["os"].environ.get("TOY_A")',
        9,
        "sys.modules hands out",
    ),
    # path expansion reads HOME and $VARS
    ("expandvars", 'P = os.path.expandvars("$HOME/x")', 7, "reads the environment"),
    ("expanduser", 'P = os.path.expanduser("~")', 7, "reads the environment"),
    (
        "expandvars imported",
        'from os.path import expandvars\nP = expandvars("$X")',
        8,
        "expandvars reads the environment",
    ),
    (
        "Path.expanduser",
        'import pathlib\nP = pathlib.Path("~").expanduser()',
        8,
        "reads the environment",
    ),
    ("Path.home", "from pathlib import Path\nP = Path.home()", 8, "reads the environment (HOME)"),
    # copies of the environment, bytes reads, the posix and nt modules
    ("copy in a function", "def f():\n    return os.environ.copy()", 8, "inside a function"),
    ("dict in a function", "def f():\n    return dict(os.environ)", 8, "inside a function"),
    ("getenvb", 'B = os.getenvb(b"TOY_A", b"1")', 7, "unsupported form"),
    ("getenvb imported", 'from os import getenvb\nB = getenvb(b"TOY_A", b"1")', 8, "unsupported"),
    (
        "posix.environ",
        'import posix\nE = posix.environ.get(b"TOY_A", b"1")',
        8,
        "unsupported form",
    ),
    ("posix.environ[...]", 'import posix\nE = posix.environ[b"TOY_A"]', 8, "posix.environ[...]"),
    ("nt.environ", "import nt\nE = nt.environ", 8, "unsupported form"),
    (
        "nt environ imported",
        "from nt import environ as ntenv\ndef f():\n    return ntenv",
        9,
        "inside a function",
    ),
    # os reached through another module, by another name, or by reflection
    ("os through shutil", "import shutil\nE = shutil.os.environ", 8, "through another module"),
    ("os through os.path", 'E = os.path.os.getenv("TOY_A", "1")', 7, "through another module"),
    (
        "os imported from a module",
        "from shutil import os as sos\nE = sos.environ",
        8,
        "sos reaches the os module through another module",
    ),
    ("environ of a parameter", "def f(m):\n    return m.environ", 8, "but not as a knob"),
    ("module __dict__", 'E = os.__dict__["environ"]', 7, "reflects on an object"),
    ("getattr by name", 'import shutil\nE = getattr(shutil, "os")', 8, "getattr(..., 'os')"),
    ("hasattr by name", 'import shutil\nE = hasattr(shutil, "environ")', 8, "hasattr(..., "),
    ("vars", "import shutil\nE = vars(shutil)", 8, "vars(...) reflects"),
]


@pytest.mark.parametrize(("what", "body", "line", "fragment"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_forms(what, body, line, fragment):
    src = HEADER + body + "\n"
    with pytest.raises(KnobError) as info:
        scan_source(src, "ideas/x/kernel.py", "toy")
    msg = str(info.value)
    assert "\n" not in msg
    assert re.match(r"^ideas/x/kernel\.py:(\d+): ", msg), msg
    assert int(msg.split(":")[1]) == line, msg
    assert fragment in msg, msg


def test_syntax_error_names_the_line():
    with pytest.raises(KnobError, match=r"^k\.py:2: syntax error"):
        scan_source("import os\ndef f(:\n", "k.py", "toy")


def test_scan_idea_keys_files_and_refusals():
    files = {
        "kernel.py": b'import os\nA = int(os.getenv("TOY_A", "1"))\n',
        "util.py": b'import os\n\nB = os.environ.get("TOY_B", "x")\n',
        "NOTES.md": b"os.environ['TOY_C']\n",
        "records/r.json": b"{}",
    }
    knobs = scan_idea(files, "toy")
    assert set(knobs) == {"TOY_A", "TOY_B"}
    assert knobs["TOY_B"] == Knob(
        key="TOY_B",
        name="B",
        kind="str",
        default="x",
        file="util.py",
        line=3,
        constexpr=False,
        source_default="x",
    )
    files["util.py"] = b'import os\nA2 = os.getenv("TOY_A", "2")\n'
    with pytest.raises(KnobError, match=r"^util\.py:2: knob TOY_A is also read in kernel\.py:2"):
        scan_idea(files, "toy")
    with pytest.raises(KnobError, match=r"^bad\.py:1: not UTF-8"):
        scan_idea({"bad.py": b"\xff\xfe"}, "toy")


def test_the_real_idea_scans():
    from ladder.codehash import idea_files_from_dir
    from ladder.paths import kernels_dir

    ideas = kernels_dir() / "cconv" / "ideas"
    folders = sorted(p for p in ideas.iterdir() if p.is_dir()) if ideas.is_dir() else []
    if not folders:
        pytest.skip("no cconv ideas in this checkout yet")
    for folder in folders:
        knobs = scan_idea(idea_files_from_dir(folder), "cconv")
        assert all(k.startswith("CCONV_") for k in knobs)


def test_ordinary_code_is_not_refused():
    # Names that merely resemble the refused roads stay allowed: no false refusals.
    src = textwrap.dedent(
        """
        import os
        import importlib.util
        import sys
        import triton
        import triton.language as tl

        A = int(os.environ.get("TOY_A", "1"))
        ROOT = os.path.join(os.path.dirname(__file__), "data")
        HAVE_FLA = importlib.util.find_spec("fla") is not None
        MAX = sys.maxsize
        CE = getattr(tl, "constexpr")


        def dtype(name):
            return getattr(triton, name, None)


        def grid(n, block):
            return (triton.cdiv(n, block),)
        """
    )
    assert [k.key for k in scan_source(src, "k.py", "toy")] == ["TOY_A"]


def test_module_level_constants_are_not_knobs():
    src = textwrap.dedent(
        """
        import os
        WMAX = 4
        PATH = os.path.join("a", "b")
        """
    )
    assert scan_source(src, "k.py", "toy") == []
