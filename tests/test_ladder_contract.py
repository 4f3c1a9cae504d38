"""The family protocol checked on load (ladder.contract), and ``ladder new-family``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from ladder import contract, paths
from ladder.cli import app
from tests.fixtures.ladder.helpers import copy_scan, copy_toy

REPO = Path(__file__).resolve().parents[1]


def run_cli(root: Path, *args: str):
    return CliRunner().invoke(app, ["--root", str(root), *args])


def one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert "\n" not in err and "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def interpret_env(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for key in ("TOY_FAST", "TOY_BLOCK"):
        monkeypatch.delenv(key, raising=False)


def _edit_family(root: Path, tail: str, family: str = "toy") -> Path:
    path = root / "kernels" / family / "family.py"
    path.write_text(path.read_text() + "\n" + tail + "\n")
    return path


@pytest.mark.parametrize(
    ("tail", "attribute", "what"),
    [
        ("del run", "run", "missing; define it as a function (impl, inputs, poison)"),
        ("del BASELINE", "BASELINE", "missing"),
        ("TOLERANCES = {}", "TOLERANCES", "must be a non-empty dict"),
        ("TOLERANCES = {'y': -1.0}", "TOLERANCES", "positive float"),
        ("ERR_RATIO_MAX = 0.5", "ERR_RATIO_MAX", "a finite number >= 1"),
        ("SHAPES = {'sweep': SHAPES['sweep']}", "SHAPES", 'SHAPES["prod"] a list of exactly one'),
        ("SHAPES = {'prod': [Shape('main', 1, 2, 3, 4)]}", "SHAPES", 'named "prod"'),
        ("SHAPES = {'prod': [('prod', 1)]}", "SHAPES", "frozen dataclass"),
        (
            "SHAPES = {**SHAPES, 'small': [Shape('prod', 1, 5, 4, 3)]}",
            "SHAPES",
            "got 'prod' twice",
        ),
        ("BASELINE = SimpleNamespace(toy_fwd=baseline_fwd)", "BASELINE", "missing toy_bwd"),
        ("ENTRY_POINTS = ['toy_fwd']", "ENTRY_POINTS", "a non-empty tuple"),
        ("ENTRY_POINT_ARGS = {'toy_fwd': ('x',)}", "ENTRY_POINT_ARGS", "each entry point"),
        ("timed = 3", "timed", "must be a function"),
        ("CASES = {}", "CASES", "a non-empty dict"),
        ("CASES = {'varlen': 'packed'}", "SHAPES", "has case 'dense', not one of CASES"),
        ("PROMOTE_CASES = ('dense', 'varlen')", "PROMOTE_CASES", "tuple of the family's cases"),
        ("PROMOTE_CASES = ['dense']", "PROMOTE_CASES", "a non-empty tuple"),
        ("RANK_SHAPES = ('d16-w2',)", "RANK_SHAPES", '"prod" is missing: add it'),
        ("RANK_SHAPES = ('prod', 'd99')", "RANK_SHAPES", "'d99' names no shape of SHAPES (prod,"),
        ("RANK_SHAPES = ('prod', 'd16-w2', 'prod')", "RANK_SHAPES", "'prod' appears more than"),
        ("RANK_SHAPES = ['prod', 'd16-w2']", "RANK_SHAPES", "a non-empty tuple of distinct"),
        ("RANK_SHAPES = 'prod'", "RANK_SHAPES", "a non-empty tuple of distinct names of shapes"),
        ("RANK_SHAPES = ()", "RANK_SHAPES", "got ()"),
        ("RANK_SHAPES = ('prod', 2)", "RANK_SHAPES", "leave RANK_SHAPES out to rank on prod"),
        ("FAMILY = 'other'", "FAMILY", "must be 'toy' (the folder name)"),
    ],
)
def test_a_bad_family_is_a_one_line_error_naming_file_and_attribute(
    tmp_path: Path, interpret_env, tail: str, attribute: str, what: str
) -> None:
    root = copy_toy(tmp_path)
    path = _edit_family(root, tail)
    result = run_cli(root, "check", "toy", "1", "--interpret")
    err = one_line_error(result, f"{path}: {attribute}: ", what)
    assert err.startswith("error: ")
    with pytest.raises(paths.BadFamily):
        paths.load_family("toy", root, complete=True)


def test_board_and_winner_need_only_the_core(tmp_path: Path, interpret_env, monkeypatch) -> None:
    """A half-written family (no run, timed, reference, ...) boards and names no winner
    cleanly; check and bench say what is missing in one line."""
    root = copy_scan(tmp_path)
    path = root / "kernels/scan/family.py"
    path.write_text(
        '"""Half written."""\n\nFAMILY = "scan"\nENTRY_POINTS = ("scan_fwd", "scan_bwd")\n'
        'TARGET_DEVICE = "H200"\n'
    )
    board = run_cli(root, "board", "scan")
    assert board.exit_code == 0, board.output
    assert "no scan records yet" in board.stdout
    win = run_cli(root, "winner", "scan")
    assert win.exit_code == 1 and "no scan records yet" in win.stderr
    one_line_error(run_cli(root, "check", "scan", "0", "--interpret"), "ENTRY_POINT_ARGS: missing")
    monkeypatch.setenv("LADDER_COMMIT", "c" * 40)
    monkeypatch.setenv("LADDER_DIRTY", "0")
    one_line_error(run_cli(root, "bench", "scan", "0"), f"{path}: ENTRY_POINT_ARGS: missing")


def test_a_broken_core_fails_board_in_one_line(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    path = _edit_family(root, "del TARGET_DEVICE")
    one_line_error(run_cli(root, "board", "toy"), f"{path}: TARGET_DEVICE: missing")
    one_line_error(run_cli(root, "winner", "toy"), "TARGET_DEVICE: missing")


def test_rank_shapes_that_name_shapes_of_the_family_load(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    _edit_family(root, "RANK_SHAPES = ('d16-w2', 'prod')")
    fam = paths.load_family("toy", root, complete=True)
    assert fam.RANK_SHAPES == ("d16-w2", "prod")


def test_rank_shapes_outside_the_benched_sets_are_refused(tmp_path: Path) -> None:
    """`--shapes all` benches prod and sweep: a rank shape of another set (the interpreter's
    small shapes) would leave every record of a full bench unranked."""
    root = copy_toy(tmp_path)
    _edit_family(root, "RANK_SHAPES = ('d16-w2', 'prod', 's-b1-t5-d4-w3')")
    err = one_line_error(run_cli(root, "board", "toy"), "RANK_SHAPES: must be ")
    assert "'s-b1-t5-d4-w3' is not in the prod or sweep set" in err


def test_rank_shapes_without_shapes_is_a_one_line_error(tmp_path: Path) -> None:
    """A family still being written boards on its core alone, but RANK_SHAPES, when set,
    needs SHAPES to name its shapes from."""
    root = copy_scan(tmp_path)
    path = root / "kernels/scan/family.py"
    path.write_text(
        '"""Half written."""\n\nFAMILY = "scan"\nENTRY_POINTS = ("scan_fwd", "scan_bwd")\n'
        'TARGET_DEVICE = "H200"\nRANK_SHAPES = ("prod", "long")\n'
    )
    err = one_line_error(run_cli(root, "board", "scan"), f"{path}: RANK_SHAPES: must be ")
    assert "the family defines no SHAPES to name them from: define SHAPES" in err


def test_shape_fields_default_and_hook() -> None:
    fam = paths.load_family("cconv", complete=True)
    prod = fam.SHAPES["prod"][0]
    assert contract.shape_fields(fam, prod) == {
        "name": "prod",
        "B": 16,
        "T": 8192,
        "D": 2048,
        "W": 4,
        "x_dtype": "bfloat16",
        "w_dtype": "float32",
    }
    assert contract.shape_case(prod) == "dense"

    class Hooked:
        @staticmethod
        def shape_fields(shape):
            return {"T": shape.T, "seqlens": (1, 2)}

    assert contract.shape_fields(Hooked, prod) == {"name": "prod", "T": 8192, "seqlens": [1, 2]}


@pytest.mark.parametrize("name", ["cconv", "kda"])
def test_real_families_satisfy_the_whole_protocol(name: str) -> None:
    fam = paths.load_family(name, complete=True)
    for ep in fam.ENTRY_POINTS:
        assert callable(getattr(fam.BASELINE, ep))
    cases = contract.family_cases(fam)
    assert "dense" in cases
    for group in fam.SHAPES.values():
        for shape in group:
            assert contract.shape_case(shape) in cases, (name, shape.name)


# ------------------------------------------------------------------------------------------
# new-family
# ------------------------------------------------------------------------------------------


def test_new_family_scaffold(tmp_path: Path, interpret_env) -> None:
    root = tmp_path / "repo"
    (root / "ladder" / "kernels").mkdir(parents=True)
    result = run_cli(root, "new-family", "kdx")
    assert result.exit_code == 0, result.output
    fdir = root / "ladder/kernels/kdx"
    assert f"created {fdir}" in result.stdout
    idea = fdir / "ideas/000-fla"
    assert (idea / "records/.gitkeep").is_file() and (idea / "NOTES.md").is_file()
    fam = paths.load_family("kdx", root, complete=True)  # every required hook is there
    shape = fam.SHAPES["prod"][0]
    for call in (
        lambda: fam.make_inputs(shape, "cpu", 0),
        lambda: fam.reference(),
        lambda: fam.run(fam.BASELINE, (), None),
        lambda: fam.timed(fam.BASELINE, ()),
        lambda: fam.min_bytes(shape, "fwd"),
        lambda: fam.BASELINE.kdx_fwd(None),
    ):
        with pytest.raises(NotImplementedError, match="ladder/kernels/kdx/family.py: .* is not"):
            call()
    base = paths.load_idea("kdx", "0", root)
    assert base.CASES == ("dense",)
    with pytest.raises(NotImplementedError, match="BASELINE.kdx_bwd"):
        base.kdx_bwd(None, None)
    # board and winner: clean "no records"
    board = run_cli(root, "board", "kdx")
    assert board.exit_code == 0 and "no kdx records yet" in board.stdout, board.output
    # the first idea is 001, and checking it says what is not written yet
    new = run_cli(root, "new", "kdx", "first")
    assert new.exit_code == 0, new.output
    assert (fdir / "ideas/001-first/kernel.py").is_file()
    check = run_cli(root, "check", "kdx", "1", "--interpret")
    assert check.exit_code == 1, check.output
    assert "not written yet" in check.stdout and "make_inputs" in check.stdout
    # the scaffold passes the repository's lint as it is
    for cmd in (["check"], ["format", "--check"]):
        lint = subprocess.run(
            [sys.executable, "-m", "ruff", *cmd, "--no-cache", str(fdir)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert lint.returncode == 0, lint.stdout


def test_new_family_refuses_bad_and_taken_names(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    one_line_error(run_cli(root, "new-family", "Kda-2"), "must be a short lower-case identifier")
    one_line_error(run_cli(root, "new-family", "toy"), "exists; pick another name")
    assert sorted(p.name for p in (root / "kernels").iterdir()) == ["toy"]


def test_a_family_that_cannot_run_on_the_interpreter_says_why(interpret_env) -> None:
    root = Path(__file__).resolve().parents[1] / "ladder"
    result = run_cli(root, "check", "kda", "004", "--interpret")
    err = result.stderr.strip()
    assert result.exit_code != 0 and "\n" not in err and "Traceback" not in result.output, (
        result.output
    )
    assert (
        "family kda cannot run on Triton's CPU interpreter" in err and "test_kda_chains.py" in err
    ), err
    assert contract._problem(SimpleNamespace(NO_INTERPRETER=""), "NO_INTERPRETER")


def test_every_ideas_cases_line_is_readable_without_importing() -> None:
    """The board and the vendor read an idea's CASES from its source without importing it
    (`static_idea_cases`): an idea that writes CASES as an expression (`k8.CASES`) could
    never be promoted, whatever its records. Every committed idea that assigns CASES writes
    a literal tuple of strings (the 000 baselines, shown but never promoted, aside)."""
    from ladder.contract import static_idea_cases

    root = Path(__file__).resolve().parents[1] / "ladder" / "kernels"
    checked = 0
    for kernel in sorted(root.glob("*/ideas/*/kernel.py")):
        if kernel.parent.name.startswith("000-"):
            continue
        source = kernel.read_text()
        if not any(line.startswith("CASES") for line in source.splitlines()):
            continue
        assert static_idea_cases(source) is not None, kernel
        checked += 1
    assert checked >= 16  # cconv 002-009 and kda 001-008
