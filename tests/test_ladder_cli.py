"""The command line: scaffolding, check, board, winner, and every usage error path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ladder import bench, paths, records
from ladder.cli import app
from tests.fixtures.ladder.helpers import FIXTURE_ROOT, copy_toy, idea_path

REPO = Path(__file__).resolve().parents[1]
ROOT = str(FIXTURE_ROOT)


def run(*args: str, root: Path | str | None = ROOT):
    argv = (["--root", str(root)] if root is not None else []) + list(args)
    return CliRunner().invoke(app, argv)


def assert_usage_error(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert "\n" not in err, err
    assert err.startswith("error: ")
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(bench.GpuRuntime, "unavailable", lambda self: "no CUDA GPU is visible")


@pytest.fixture
def fake_gpu(monkeypatch) -> list:
    """A GPU that is never measured on: the states ``measure`` was called with."""
    calls: list = []
    monkeypatch.setattr(bench.GpuRuntime, "unavailable", lambda self: None)
    monkeypatch.setattr(
        bench.GpuRuntime,
        "device_info",
        lambda self: {"name": "NVIDIA H200", "capability": "9.0", "driver": "none"},
    )
    monkeypatch.setattr(bench.GpuRuntime, "clocks", lambda self: {})
    monkeypatch.setattr(bench.GpuRuntime, "measure", lambda self, state: calls.append(state))
    monkeypatch.setenv("LADDER_COMMIT", "c" * 40)
    monkeypatch.setenv("LADDER_DIRTY", "0")
    return calls


def assert_only_line(result, *needles: str) -> str:
    """A usage error whose message is the whole of stderr: no blank line before it."""
    err = assert_usage_error(result, *needles)
    assert result.stderr == err + "\n", repr(result.stderr)
    return err


@pytest.fixture
def interpret_env(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for key in ("TOY_FAST", "TOY_BLOCK"):
        monkeypatch.delenv(key, raising=False)


# ------------------------------------------------------------------------------------------
# usage errors: one line, exit 2
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "nope", "1"],
        ["bench", "nope", "1"],
        ["board", "nope"],
        ["winner", "nope"],
        ["new", "nope", "an-idea"],
    ],
)
def test_unknown_family(argv: list[str]) -> None:
    assert_usage_error(run(*argv), "unknown family 'nope'", "known: toy")


@pytest.mark.parametrize("cmd", ["check", "bench"])
def test_unknown_idea(cmd: str) -> None:
    assert_usage_error(run(cmd, "toy", "9"), "no idea '9'", "python -m ladder new toy <slug>")


def test_idea_without_entry_points(interpret_env) -> None:
    assert_usage_error(
        run("check", "toy", "2", "--interpret"),
        "ideas/002-no-bwd/kernel.py does not define toy_bwd",
    )


@pytest.mark.parametrize("cmd", ["check", "bench"])
def test_knob_the_idea_never_reads(cmd: str, no_gpu) -> None:
    assert_usage_error(
        run(cmd, "toy", "1", "--knob", "TOY_TURBO=1"),
        "never reads TOY_TURBO",
        "drop --knob TOY_TURBO=1",
    )
    assert_usage_error(run(cmd, "toy", "0", "--knob", "TOY_BLOCK=4"), "never reads TOY_BLOCK")


def test_pool_seeds_outside_2_to_64(no_gpu) -> None:
    assert_usage_error(run("check", "toy", "1", "--pool-seeds", "1"), "give 2 to 64 seeds")


def test_check_refuses_bad_shapes_and_seed_before_scanning_knobs(monkeypatch) -> None:
    from ladder import prepare

    def no_scan(files, family):
        raise AssertionError("the knob scan ran before the argument checks")

    monkeypatch.setattr(prepare, "_SCANNED", {})
    monkeypatch.setattr(prepare.knobs, "scan_idea", no_scan)
    assert_usage_error(run("check", "toy", "1", "--shapes", "bogus"), "bogus")
    assert_usage_error(run("check", "toy", "1", "--seed", "-1"), "seed")
    assert_usage_error(run("check", "toy", "42"), "no idea '42'")
    assert_usage_error(run("check", "toy", "1", "--pool-seeds", "65"), "give 2 to 64 seeds")


def test_pool_seeds_says_when_it_changes_nothing(interpret_env) -> None:
    res = run("check", "toy", "1", "--interpret", "--pool-seeds", "8")
    assert "--pool-seeds 8 changes nothing here" in res.stdout, res.stdout


def test_bad_knob_values(no_gpu) -> None:
    assert_usage_error(run("bench", "toy", "1", "--knob", "TOY_BLOCK=wide"), "TOY_BLOCK")
    assert_usage_error(run("bench", "toy", "1", "--knob", "toy_block=4"), "KEY=VALUE")


def test_bench_without_gpu(no_gpu) -> None:
    assert_usage_error(
        run("bench", "toy", "0"),
        "needs a CUDA GPU",
        "python -m ladder check toy 000-base --interpret",
    )


def test_bench_of_a_baseline_the_interpreter_cannot_run_suggests_no_interpreter_check(
    no_gpu,
) -> None:
    err = assert_usage_error(
        run("bench", "cconv", "0", root=None),  # the repository's own cconv family
        "needs a CUDA GPU",
        "the baseline cannot run on the CPU interpreter",
    )
    assert "--interpret" not in err
    # and the check it would have suggested is indeed refused
    assert (
        "cannot run on Triton's CPU interpreter"
        in run("check", "cconv", "0", "--interpret", root=None).output
    )


def test_bench_error_is_the_only_line_on_stderr(no_gpu) -> None:
    assert_only_line(run("bench", "toy", "0"), "needs a CUDA GPU")
    assert_only_line(run("bench", "toy", "9"), "no idea '9'")


def test_bench_into_a_file_fails_in_one_line_before_measuring(tmp_path: Path, fake_gpu) -> None:
    root = copy_toy(tmp_path)
    blocker = tmp_path / "taken.json"
    blocker.write_text("keep")
    assert_only_line(run("bench", "toy", "0", "--out", str(blocker), root=root), str(blocker))
    assert_only_line(
        run("bench", "toy", "0", "--out", str(blocker / "sub"), root=root),
        "cannot write records in",
    )
    assert fake_gpu == [] and blocker.read_text() == "keep"


def test_bench_off_a_terminal_prints_one_line_per_phase(
    tmp_path: Path, monkeypatch, fake_gpu
) -> None:
    # A bench whose output goes to a file (or a call killed at its time limit) must say
    # where its minutes went: one line per phase, not one per timed block, and no bar. The
    # blocks come in the real interleaved order (candidate, baseline and copy alternating).
    from ladder import timing

    def measure(self, state) -> None:
        fake_gpu.append(state)
        state.progress("prod: correctness (compile + autotune)", 0)
        state.progress("prod: correctness", 1)
        state.progress("prod: baseline re-tune", 0)
        for direction in ("fwd", "bwd"):
            label = f"prod {direction}"
            timing.time_interleaved(
                {"candidate": lambda i: i, "baseline": lambda i: i, "copy": lambda i: i},
                rounds=8,
                reps=2,
                clock=timing.WallClock(),
                on_block=lambda name, r, label=label: state.progress(
                    f"{label}: {name} round {r + 1}/8", 1
                ),
            )
        state.progress("prod: host time and peak memory", 0)

    monkeypatch.setattr(bench.GpuRuntime, "measure", measure)
    root = copy_toy(tmp_path, records=False)
    result = run("bench", "toy", "0", root=root)
    assert len(fake_gpu) == 1
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("[")]
    phases = [ln.split("] ", 1)[1] for ln in lines]
    assert phases == [
        "prod: correctness (compile + autotune)",
        "prod: correctness",
        "prod: baseline re-tune",
        "prod fwd: timing",
        "prod bwd: timing",
        "prod: host time and peak memory",
    ], result.stderr
    assert all(ln[1:7].strip().isdigit() and ln[7:9] == "s]" for ln in lines), lines
    assert "round" not in result.stderr


def test_phase_lines_count_seconds_from_their_start(monkeypatch) -> None:
    from ladder import cli_run

    printed: list[str] = []

    class Console:
        def print(self, text: str, **kw) -> None:
            printed.append(text)

    now = iter([100.0, 100.0, 112.4, 175.0])
    monkeypatch.setattr(cli_run.time, "monotonic", lambda: next(now))
    phases = cli_run.PhaseLines(Console())
    phases("a: correctness")
    phases("a fwd: candidate round 1/8")
    phases("a fwd: baseline round 1/8")  # same phase: no line, no clock read
    phases("b: correctness")
    assert printed == [
        "[     0s] a: correctness",
        "[    12s] a fwd: timing",
        "[    75s] b: correctness",
    ]


@pytest.mark.parametrize("seed", ["-1", "9223372036854775808", "99999999999999999999999"])
def test_out_of_range_seed_is_a_usage_error(
    tmp_path: Path, seed: str, fake_gpu, interpret_env
) -> None:
    root = copy_toy(tmp_path, records=False)
    assert_only_line(
        run("bench", "toy", "0", "--seed", seed, root=root), f"--seed {seed} is out of range"
    )
    assert fake_gpu == []
    assert not list(root.rglob("*.json"))
    assert_usage_error(
        run("check", "toy", "1", "--interpret", "--seed", seed), f"--seed {seed} is out of range"
    )


def test_check_refuses_the_baseline_idea_on_the_interpreter(tmp_path: Path, interpret_env) -> None:
    # cconv's 000-fla is fla's autotuned kernels: they cannot run on the interpreter
    assert_usage_error(
        run("check", "cconv", "0", "--interpret", root=None),
        "000-fla is cconv's baseline",
        "`python -m ladder check cconv 000-fla` on the GPU machine",
    )
    # the toy family says its baseline runs there; without that flag, 000 is refused too
    root = copy_toy(tmp_path, records=False)
    fam = root / "kernels" / "toy" / "family.py"
    text = fam.read_text()
    assert "BASELINE_ON_INTERPRETER = True\n" in text
    fam.write_text(text.replace("BASELINE_ON_INTERPRETER = True\n", ""))
    assert_usage_error(run("check", "toy", "0", "--interpret", root=root), "toy's baseline")
    ok = run("check", "toy", "1", "--interpret", "--no-strided", root=root)
    assert ok.exit_code == 0, ok.output


def test_bad_shape_sets(no_gpu) -> None:
    assert_usage_error(run("bench", "toy", "0", "--shapes", "small"), "--shapes 'small'")
    assert_usage_error(run("check", "toy", "0", "--shapes", "tiny"), "--shapes 'tiny'")
    assert_usage_error(
        run("check", "toy", "0", "--interpret", "--shapes", "prod"),
        "runs the family's small shapes only (s-b2-t9-d8-w4, s-b1-t5-d4-w3); prod is not one",
        "--shapes prod",
    )
    # shape names, as bench takes them: each must be the family's; off the small set, on the
    # GPU only
    assert_usage_error(run("check", "toy", "1", "--shapes", "prod,tiny"), "tiny is neither")
    assert_usage_error(run("check", "toy", "1", "--shapes", "x,y"), "x, y are neither")
    assert_usage_error(run("check", "toy", "1", "--shapes", ","), "names no shape")
    assert_usage_error(
        run("check", "toy", "1", "--shapes", "small,s-b1-t5-d4-w3"),
        "small is a shape set; give one set alone, or shape names only",
    )
    assert_usage_error(
        run("check", "toy", "1", "--shapes", "prod,d16-w2"),
        "prod, d16-w2 are not one of them",
        "--shapes prod,d16-w2",
    )


def test_check_runs_chosen_small_shapes_on_the_interpreter(interpret_env) -> None:
    # a name given twice runs once
    result = run(
        "check",
        "toy",
        "1",
        "--interpret",
        "--shapes",
        "s-b1-t5-d4-w3,s-b1-t5-d4-w3",
        "--no-strided",
    )
    assert result.exit_code == 0, result.output
    assert "s-b1-t5-d4-w3: ok" in result.stdout
    assert "s-b2-t9-d8-w4" not in result.stdout
    assert "passed: 1 check" in result.stdout


def test_new_refuses_bad_and_taken_slugs(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    assert_usage_error(run("new", "toy", "Fast_Path", root=root), "not kebab-case")
    assert_usage_error(run("new", "toy", "fast", root=root), "taken by 001-fast")
    # a slug that reads as an idea number or a numbered folder name would never be reached by
    # its slug: `ladder check toy 001-fast` means idea 001
    assert_usage_error(run("new", "toy", "13", root=root), "reads as an idea number")
    assert_usage_error(run("new", "toy", "001-fast", root=root), "reads as an idea number")
    assert sorted(p.name for p in (root / "kernels/toy/ideas").iterdir())[-1] == "003-wrong-taps"


def test_new_refuses_a_slug_too_long_for_a_folder_name(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    before = sorted(p.name for p in (root / "kernels/toy/ideas").iterdir())
    assert_only_line(run("new", "toy", "a" * 300, root=root), "keep it to 64 or fewer")
    assert sorted(p.name for p in (root / "kernels/toy/ideas").iterdir()) == before


def test_new_refuses_a_slug_ending_in_a_newline(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    before = sorted(p.name for p in (root / "kernels/toy/ideas").iterdir())
    assert_usage_error(run("new", "toy", "nl\n", root=root), "not kebab-case")
    assert sorted(p.name for p in (root / "kernels/toy/ideas").iterdir()) == before


def test_broken_record_is_named(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    rdir = idea_path(root, "000-base") / "records"
    path = next(rdir.glob("*.json"))
    rec = json.loads(path.read_text())
    del rec["versions"]["triton"]
    path.write_text(json.dumps(rec))
    err = assert_usage_error(run("board", "toy", root=root), "versions.triton: missing")
    assert path.name in err


# ------------------------------------------------------------------------------------------
# new
# ------------------------------------------------------------------------------------------


def test_new_scaffolds_the_next_number(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    result = run("new", "toy", "two-pass", root=root)
    assert result.exit_code == 0, result.output
    dest = idea_path(root, "004-two-pass")
    assert f"created {dest}" in result.stdout
    assert (dest / "records" / ".gitkeep").is_file()
    notes = (dest / "NOTES.md").read_text()
    for section in ("## Hypothesis", "## Prediction", "## Result", "## Dead ends"):
        assert section in notes
    mod = paths.load_idea("toy", "4", root)
    with pytest.raises(NotImplementedError, match="toy_fwd is not written yet"):
        mod.toy_fwd(None, None)
    with pytest.raises(NotImplementedError, match="toy_bwd"):
        mod.toy_bwd(None, None, None)
    # a scaffold must pass the repository's lint as it is (CI runs `make lint`)
    for cmd in (["check"], ["format", "--check"]):
        lint = subprocess.run(
            [sys.executable, "-m", "ruff", *cmd, "--no-cache", str(dest / "kernel.py")],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert lint.returncode == 0, lint.stdout


def test_check_of_a_fresh_scaffold_says_so_in_one_line(tmp_path: Path, interpret_env) -> None:
    root = copy_toy(tmp_path)
    assert run("new", "toy", "two-pass", root=root).exit_code == 0
    result = run("check", "toy", "4", "--interpret", root=root)
    assert result.exit_code == 1, result.output
    assert "not written yet" in result.stdout and "nothing checked" in result.stdout
    assert "nan" not in result.stdout.lower()
    assert len(result.stdout.strip().splitlines()) <= 4, result.stdout


def test_new_for_cconv_uses_its_entry_points(tmp_path: Path) -> None:
    fam = tmp_path / "repo" / "ladder" / "kernels" / "cconv"
    (fam / "ideas").mkdir(parents=True)
    shutil.copy(REPO / "ladder/kernels/cconv/family.py", fam / "family.py")
    result = run("new", "cconv", "first-try", root=tmp_path / "repo")
    assert result.exit_code == 0, result.output
    # the first idea of a family is 001: 000 is the baseline's number
    text = (fam / "ideas" / "001-first-try" / "kernel.py").read_text()
    assert "def cconv_fwd(x, w):" in text and "def cconv_bwd(x, w, dy):" in text


@pytest.mark.parametrize("family", ["cconv", "kda"])
def test_a_real_familys_scaffold_passes_lint_and_imports(tmp_path: Path, family: str) -> None:
    """Each family's scaffold as `make lint` checks it (kda's entry points take 14 arguments,
    past the line length on one line), with the family's parameters in order."""
    import ast
    import re

    from ladder import scaffold

    fam = tmp_path / "repo" / "ladder" / "kernels" / family
    (fam / "ideas").mkdir(parents=True)
    shutil.copy(REPO / f"ladder/kernels/{family}/family.py", fam / "family.py")
    assert run("new", family, "first-try", root=tmp_path / "repo").exit_code == 0
    kernel = fam / "ideas" / "001-first-try" / "kernel.py"
    for cmd in (["check"], ["format", "--check"]):
        lint = subprocess.run(
            [sys.executable, "-m", "ruff", *cmd, "--no-cache", str(kernel)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert lint.returncode == 0, lint.stdout + kernel.read_text()
    spec = paths.load_family(family, tmp_path / "repo")
    defs = {n.name: [a.arg for a in n.args.args] for n in ast.parse(kernel.read_text()).body
            if isinstance(n, ast.FunctionDef)}  # fmt: skip
    want = getattr(spec, "ENTRY_POINT_ARGS", {})
    assert defs == {ep: list(want.get(ep, ())) for ep in spec.ENTRY_POINTS}
    width = re.search(r"(?m)^line-length = (\d+)$", (REPO / "pyproject.toml").read_text())
    assert width and scaffold.LINE_LENGTH == int(width.group(1))


# ------------------------------------------------------------------------------------------
# check (correctness)
# ------------------------------------------------------------------------------------------


def test_check_passes_a_correct_idea_on_the_cpu(interpret_env) -> None:
    result = run("check", "toy", "1", "--interpret", "--knob", "TOY_BLOCK=8", "--seed", "7")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "fla's baseline is skipped on the CPU interpreter" in out
    assert "knobs: TOY_BLOCK=8, TOY_FAST=False" in out
    assert "s-b2-t9-d8-w4+strided: ok" in out
    assert "passed: 4 checks" in out


def test_check_fails_wrong_taps(interpret_env) -> None:
    result = run("check", "toy", "3", "--interpret", "--no-strided")
    assert result.exit_code == 1, result.output
    assert "FAILED: s-b2-t9-d8-w4, s-b1-t5-d4-w3" in result.stdout


def test_check_respawns_under_the_interpreter() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "ladder", "--root", ROOT, "check", "toy", "0", "--no-strided"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no CUDA GPU: checking the small shapes on Triton's CPU interpreter" in proc.stdout
    assert "CPU (Triton interpreter)" in proc.stdout
    assert "passed: 2 checks" in proc.stdout


@pytest.mark.slow
def test_check_cconv_strip_kernel_on_the_interpreter() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "ladder", "check", "cconv", "001", "--interpret"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "interpreter settings: CCONV_FAST_SIGMOID=0, CCONV_AUTOTUNE=0" in proc.stdout
    assert "passed:" in proc.stdout and "FAILED" not in proc.stdout


# ------------------------------------------------------------------------------------------
# board and winner
# ------------------------------------------------------------------------------------------


def _fixture_record(folder: str, stem_prefix: str) -> dict:
    (path,) = (FIXTURE_ROOT / "kernels/toy/ideas" / folder / "records").glob(stem_prefix + "*.json")
    return json.loads(path.read_text())


def test_fixture_records_are_current() -> None:
    # The committed fixture records carry the toy ideas' code_sha; after editing a toy kernel,
    # regenerate them with `python tests/fixtures/ladder/recgen.py`.
    from ladder import codehash

    for folder, prefix in (("000-base", "20260102"), ("001-fast", "20260103")):
        rec = _fixture_record(folder, prefix)
        files = codehash.idea_files_from_dir(FIXTURE_ROOT / "kernels/toy/ideas" / folder)
        assert rec["code_sha"] == codehash.code_sha(files), "run tests/fixtures/ladder/recgen.py"


def test_board_json_rows_and_winner() -> None:
    result = run("board", "toy", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {r["idea"]: r for r in data["rows"]}
    assert list(rows) == ["000-base", "001-fast", "002-no-bwd", "003-wrong-taps"]
    best = _fixture_record("001-fast", "20260103")
    prod = next(s for s in best["shapes"] if s["name"] == "prod")
    row = rows["001-fast"]
    assert row["record_id"] == best["record_id"] and row["winner"] is True
    assert row["records"] == 3  # 4 records, but the B300 one is not on this board's device
    assert row["fwd_ms"] == prod["fwd"]["candidate_ms"]["median"]
    assert row["fla_bwd_ms"] == prod["bwd"]["baseline_ms"]["median"]
    want = (prod["fwd"]["baseline_ms"]["median"] + prod["bwd"]["baseline_ms"]["median"]) / (
        prod["fwd"]["candidate_ms"]["median"] + prod["bwd"]["candidate_ms"]["median"]
    )
    assert row["prod_ratio"] == pytest.approx(want)
    assert row["bwd_fraction_of_copy"] == prod["bwd"]["fraction_of_copy"]
    worst = max(v for s in best["shapes"] for v in s["correctness"]["err_ratio"].values())
    assert row["err_ratio"] == pytest.approx(worst)
    assert row["code_unchanged_since"] == best["code_unchanged_since"]
    assert (row["dirty"], row["stale"], row["promotable"]) == (False, False, True)
    assert data["winner"]["idea"] == "001-fast"
    assert data["winner"]["record_id"] == best["record_id"]
    assert rows["002-no-bwd"]["status"] is None and rows["002-no-bwd"]["records"] == 0
    assert rows["003-wrong-taps"]["status"] == "incorrect"
    assert rows["003-wrong-taps"]["prod_ratio"] is None
    assert not rows["000-base"]["winner"]


def test_board_any_device_and_table(tmp_path: Path) -> None:
    data = json.loads(run("board", "toy", "--json", "--device", "").stdout)
    b300 = _fixture_record("001-fast", "20260105")
    assert data["winner"]["record_id"] == b300["record_id"]
    table = run("board", "toy")
    assert table.exit_code == 0
    line = next(ln for ln in table.stdout.splitlines() if "001-fast" in ln)
    assert "★" in line and "1.500" in line
    assert "winner: 001-fast" in table.stdout


def test_board_marks_stale_code(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    kernel = idea_path(root, "001-fast") / "kernel.py"
    kernel.write_text(kernel.read_text() + "\n# changed\n")
    data = json.loads(run("board", "toy", "--json", root=root).stdout)
    rows = {r["idea"]: r for r in data["rows"]}
    dirty = _fixture_record("001-fast", "20260104")
    assert rows["001-fast"]["record_id"] == dirty["record_id"]  # best passed, not promotable
    assert rows["001-fast"]["stale"] is True and rows["001-fast"]["promotable"] is False
    assert rows["000-base"]["baseline"] is True and rows["000-base"]["promotable"] is False
    assert data["winner"] is None and "1 baseline" in data["no_winner"]  # 000 never wins


def test_board_plot(tmp_path: Path) -> None:
    out = tmp_path / "plots" / "board.png"
    result = run("board", "toy", "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {out}" in result.stdout
    empty = copy_toy(tmp_path / "e", records=False)
    assert_usage_error(
        run("board", "toy", "--plot", str(tmp_path / "x.png"), root=empty), "no passed toy records"
    )


def test_board_plot_bad_paths_are_one_line_errors(tmp_path: Path) -> None:
    xyz = tmp_path / "board.xyz"
    err = assert_usage_error(run("board", "toy", "--json", "--plot", str(xyz)), "'.xyz'")
    assert ".png, .svg, .pdf" in err
    assert run("board", "toy", "--json", "--plot", str(xyz)).stdout == ""  # refused up front
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    assert_usage_error(
        run("board", "toy", "--plot", str(blocker / "sub" / "board.png")),
        f"{blocker} is a file, not a folder",
    )
    assert_usage_error(run("board", "toy", "--plot", str(tmp_path)), "is a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    assert blocker.read_text() == "keep"


def test_board_plot_without_suffix_prints_the_file_written(tmp_path: Path) -> None:
    target = tmp_path / "plots" / "board"
    result = run("board", "toy", "--plot", str(target))
    assert result.exit_code == 0, result.output
    written = tmp_path / "plots" / "board.png"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {written}\n" in result.stdout
    assert not target.exists()


def test_board_device_that_matches_no_record_is_an_error() -> None:
    before = sorted(p.stat().st_mtime_ns for p in Path(ROOT).rglob("records/*.json"))
    for extra in ([], ["--json"]):
        result = run("board", "toy", "--device", "A100", *extra)
        assert result.exit_code == 2, result.output
        err = result.stderr.strip()
        assert "no toy record on a device matching 'A100'" in err and "B300" in err, err
        assert "--device ''" in err and "\n" not in err and not result.stdout
    assert sorted(p.stat().st_mtime_ns for p in Path(ROOT).rglob("records/*.json")) == before


def test_winner_command() -> None:
    result = run("winner", "toy", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    best = _fixture_record("001-fast", "20260103")
    assert info["idea"] == "001-fast" and info["record_id"] == best["record_id"]
    assert info["score"] == pytest.approx(records.prod_ratio(best))
    text = run("winner", "toy", "--device", "B300")
    assert "001-fast record " + _fixture_record("001-fast", "20260105")["record_id"] in text.stdout
    none = run("winner", "toy", "--device", "A100")
    assert none.exit_code == 1
    err = none.stderr.strip()
    assert err.startswith("no winner: ") and "\n" not in err and "'A100'" in err
