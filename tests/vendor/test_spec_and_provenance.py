"""The family spec read as literals, the evaluator, and _provenance.py rendered and parsed."""

from __future__ import annotations

import libcst as cst
import pytest

from tests.ladderfab import REPO, vl

FAMILY = (
    'FAMILY = "toy"\nENTRY_POINTS = ("toy_fwd",)\nTARGET_DEVICE = "H200"\n'
    'VENDOR = {"package": "kernel_fun.toy", "modules": {"001-a": {"kernel": "a"}}}\n'
)


def test_a_complete_family_py_reads():
    spec = vl.parse_family_spec(FAMILY.encode(), "toy", "f.py")
    assert spec.modules == {"001-a": {"kernel": "a"}}
    assert spec.provenance_path == "package/src/kernel_fun/toy/_provenance.py"


def test_a_minimal_family_py_names_what_to_add():
    with pytest.raises(vl.VendorError) as err:
        vl.parse_family_spec(b'FAMILY = "toy"\n', "toy", "f.py")
    msg = str(err.value)
    assert msg.startswith("f.py: defines no ENTRY_POINTS, TARGET_DEVICE, VENDOR; add ")
    assert 'VENDOR = {"package": "kernel_fun.toy"' in msg and "\n" not in msg
    assert '(docs/DESIGN.md, "The family contract")' in msg
    assert "The family contract" in (REPO / "docs" / "DESIGN.md").read_text()


def test_an_unmapped_idea_names_the_map_and_the_entry():
    spec = vl.parse_family_spec(FAMILY.encode(), "toy", "f.py")
    msg = str(vl.unmapped_idea(spec, "002-b"))
    assert msg == (
        "idea 002-b is not in the VENDOR['modules'] map of ladder/kernels/toy/family.py "
        "(mapped: 001-a); add '002-b': {'kernel': '<package module>'} to it and commit"
    )


@pytest.mark.parametrize(
    ("expr", "value"),
    [("K > 2 and K < 9", True), ("not K", False), ("x if K else y", "UNK"), ("K * 2", 8)],
)
def test_the_evaluator_is_three_valued(expr, value):
    node = cst.parse_expression(expr)
    knobs: dict[int, int] = {}  # the Name nodes of K, frozen at 4

    class Find(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:  # noqa: N802
            if n.value == "K":
                knobs[id(n)] = 4

    node.visit(Find())
    got = vl.evaluate.Evaluator(knobs).value(node)
    assert (got is vl.evaluate.UNKNOWN) if value == "UNK" else got == value


def test_provenance_renders_and_parses_back():
    spec = vl.parse_family_spec(FAMILY.encode(), "toy", "f.py")
    prov = {
        "SOURCE_COMMIT": "a" * 40,
        "RECORD": {"idea": "001-a", "record_id": "r1", "sha256": "b" * 64},
        "KNOBS": {"TOY_K": 3},
        "SOURCE_FILES": {"ladder/kernels/toy/ideas/001-a/kernel.py": "c" * 64},
        "OUTPUT_FILES": {"package/src/kernel_fun/toy/_kernels/a.py": "d" * 64},
        "VENDOR": {"libcst": "1", "ruff": "2", "tool_sha256": "e" * 64},
    }
    text = vl.render_provenance(prov, spec, (REPO / "pyproject.toml").read_bytes())
    assert b"\r" not in text
    assert vl.parse_provenance(text, "p.py") == prov
    assert vl.render_provenance(vl.parse_provenance(text, "p"), spec, None) != b"" and (
        vl.parse_provenance(text.replace(b"\n", b"\r\n"), "p.py") == prov
    )


def test_the_fingerprint_covers_every_pass_module():
    files = vl.tool_files()
    for path in (REPO / "tools" / "vendorlib").glob("*.py"):
        assert f"tools/vendorlib/{path.name}" in files
    assert {"tools/vendor.py", "ladder/knobs.py", "ladder/knobvalues.py"} <= set(files)


def test_the_fingerprint_covers_the_ladder_modules_the_scanner_imports():
    import ast

    files = set(vl.tool_files())
    todo, seen = ["ladder/knobs.py"], set()
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        for node in ast.walk(ast.parse((REPO / rel).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ladder."):
                todo.append(node.module.replace(".", "/") + ".py")
    assert seen <= files, f"not fingerprinted: {sorted(seen - files)}"
