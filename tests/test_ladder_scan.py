"""A second family through the generic protocol: scan (tests/fixtures/scan), whose forward
returns two outputs and a context, whose backward takes the context and both output
gradients, with dense and varlen cases. check runs on CPU tensors, bench on the CPU
stand-in machine, and board/winner read what bench wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ladder import bench, check, paths, records, timing
from ladder.cli import app
from tests.fixtures.ladder.helpers import SCAN_ROOT, copy_scan
from tests.test_ladder_bench import CpuRuntime

SHAPES_BY_NAME = {
    s.name: s for v in paths.load_family("scan", SCAN_ROOT).SHAPES.values() for s in v
}


def fam():
    return paths.load_family("scan", SCAN_ROOT, complete=True)


def run_cli(root: Path, *args: str):
    return CliRunner().invoke(app, ["--root", str(root), *args])


@pytest.fixture
def interpret_env(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("LADDER_COMMIT", "c" * 40)
    monkeypatch.setenv("LADDER_DIRTY", "0")


# ------------------------------------------------------------------------------------------
# the fixture family itself: its oracle and baseline agree with independent computations
# ------------------------------------------------------------------------------------------


def test_varlen_reference_is_the_dense_reference_per_sequence() -> None:
    f = fam()
    shape = SHAPES_BY_NAME["varlen-3"]
    x, g, cu, do, dht = f.make_inputs(shape, "cpu", 3)
    o, ht, dx, dg = f.reference(x, g, cu, do, dht)
    bounds = cu.tolist()
    for n, (s, e) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        part = [t[:, s:e] for t in (x, g)] + [None, do[:, s:e], dht[n : n + 1]]
        po, pht, pdx, pdg = f.reference(*part)
        torch.testing.assert_close(o[:, s:e], po, rtol=0, atol=0)
        torch.testing.assert_close(ht[n : n + 1], pht, rtol=0, atol=0)
        torch.testing.assert_close(dx[:, s:e], pdx, rtol=0, atol=0)
        torch.testing.assert_close(dg[:, s:e], pdg, rtol=0, atol=0)


def test_reference_of_one_row_is_closed_form() -> None:
    # T = 2: h1 = x1, h2 = a2 x1 + x2; o = (h1, h2); ht = h2.
    f = fam()
    x = torch.tensor([[[0.5], [2.0]]], dtype=torch.float64)
    g = torch.tensor([[[0.3], [-1.0]]], dtype=torch.float64)
    do = torch.tensor([[[1.0], [3.0]]], dtype=torch.float64)
    dht = torch.tensor([[2.0]], dtype=torch.float64)
    o, ht, dx, dg = f.reference(x, g, None, do, dht)
    a2 = torch.sigmoid(torch.tensor(-1.0, dtype=torch.float64))
    assert o.flatten().tolist() == pytest.approx([0.5, float(a2 * 0.5 + 2.0)])
    assert ht.item() == pytest.approx(float(a2 * 0.5 + 2.0))
    # dL/dh2 = do2 + dht = 5; dL/dh1 = do1 + a2 * 5
    assert dx.flatten().tolist() == pytest.approx([float(1.0 + a2 * 5), 5.0])
    assert dg.flatten().tolist() == pytest.approx([0.0, float(5 * 0.5 * a2 * (1 - a2))])


@pytest.mark.parametrize("name", ["prod", "varlen-3", "s-varlen"])
def test_baseline_matches_the_oracle(name: str) -> None:
    f = fam()
    inputs = f.make_inputs(SHAPES_BY_NAME[name], "cpu", 5)
    got = f.run(f.BASELINE, inputs, lambda specs: None)
    for out, ref, tol in zip(got, f.reference(*inputs), f.TOLERANCES.values(), strict=True):
        assert check.rel_err(out, ref) < tol / 10


# ------------------------------------------------------------------------------------------
# check: cases, two forward outputs, a context between directions
# ------------------------------------------------------------------------------------------


def test_check_shape_runs_the_protocol_and_poisons_each_direction(monkeypatch) -> None:
    f = fam()
    calls: list[list] = []
    monkeypatch.setattr(check, "_poison", lambda specs, device: calls.append(specs))
    shape = SHAPES_BY_NAME["varlen-3"]
    idea = paths.load_idea("scan", "0", SCAN_ROOT)
    res = check.check_shape(f, idea, shape, "cpu", 1, baseline=True)
    assert res.passed, res
    assert list(res.candidate_err) == ["o", "ht", "dx", "dg"]
    assert res.err_ratio == {k: pytest.approx(1.0) for k in f.TOLERANCES}
    # the warm-up calls get a no-op; the checked candidate call poisons fwd then bwd sizes
    assert calls == [
        [((1, 24, 8), torch.float32), ((3, 8), torch.float32)],
        [((1, 24, 8), torch.float32), ((1, 24, 8), torch.float32)],
    ]


def test_a_varlen_bug_fails_varlen_only() -> None:
    f = fam()
    idea = paths.load_idea("scan", "2", SCAN_ROOT)
    dense = check.check_shape(f, idea, SHAPES_BY_NAME["prod"], "cpu", 2, baseline=True)
    varlen = check.check_shape(f, idea, SHAPES_BY_NAME["varlen-3"], "cpu", 2, baseline=True)
    assert dense.passed
    assert not varlen.passed and varlen.candidate_err["ht"] > f.TOLERANCES["ht"]


def test_contract_problems_fail_a_shape(monkeypatch) -> None:
    f = fam()
    idea = paths.load_idea("scan", "0", SCAN_ROOT)
    monkeypatch.setattr(f, "contract_problems", lambda outs, inputs: ["ht: wrong layout"])
    res = check.check_shape(f, idea, SHAPES_BY_NAME["prod"], "cpu", 2, baseline=False)
    assert not res.passed and res.problems == ["ht: wrong layout"]


def test_cli_check_on_cpu_skips_cases_the_idea_lacks(interpret_env) -> None:
    ok = run_cli(SCAN_ROOT, "check", "scan", "1", "--interpret", "--seed", "4")
    assert ok.exit_code == 0, ok.output
    assert "s-dense: ok" in ok.stdout
    assert "s-varlen" in ok.stdout and "skipped" in ok.stdout
    assert "no strided layouts" in ok.stdout
    assert "passed: 1 checks" in ok.stdout
    both = run_cli(SCAN_ROOT, "check", "scan", "0", "--interpret", "--seed", "4")
    assert both.exit_code == 0 and "passed: 2 checks" in both.stdout, both.output
    bad = run_cli(SCAN_ROOT, "check", "scan", "2", "--interpret", "--seed", "4")
    assert bad.exit_code == 1, bad.output
    assert "FAILED: s-varlen" in bad.stdout and "s-dense: ok" in bad.stdout


def test_an_idea_claiming_an_unknown_case_is_one_line(tmp_path: Path, interpret_env) -> None:
    root = copy_scan(tmp_path)
    kernel = root / "kernels/scan/ideas/001-dense-loop/kernel.py"
    kernel.write_text(kernel.read_text() + '\nCASES = ("dense", "paged")\n')
    result = run_cli(root, "check", "scan", "1", "--interpret")
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert "\n" not in err and "Traceback" not in result.output
    assert "ideas/001-dense-loop/kernel.py: CASES must be a tuple of the family's cases" in err


# ------------------------------------------------------------------------------------------
# bench: records of the second family
# ------------------------------------------------------------------------------------------


class MemoryRuntime(CpuRuntime):
    """The CPU stand-in with a peak-memory probe that runs the call and reports a size
    derived from the number of calls, so the test sees which callables it got."""

    def __init__(self) -> None:
        super().__init__()
        self.probed: list[object] = []

    def measure(self, state):
        def peak(fn) -> int:
            fn()
            self.probed.append(fn)
            return 1000 * len(self.probed)

        bench.measure(
            state,
            device="cpu",
            clock=timing.WallClock(),
            l2_bytes=1 << 16,
            copy_bytes=1 << 20,
            peak_bytes=peak,
        )


def _opts(root: Path, idea: str, **kw) -> bench.BenchOptions:
    base = {"family": "scan", "idea": idea, "shapes": "all", "rounds": 2, "reps": 2, "root": root}
    base.update(kw)
    return bench.BenchOptions(**base)


def test_bench_records_only_the_cases_an_idea_implements(tmp_path: Path, env) -> None:
    root = copy_scan(tmp_path)
    rt = MemoryRuntime()
    rec, path = bench.run_bench(_opts(root, "1"), runtime=rt)
    back = records.read_record(path)
    assert back["status"] == "passed"
    assert [s["name"] for s in back["shapes"]] == ["prod", "d4"]  # varlen-3 is absent
    prod = back["shapes"][0]
    assert {k: prod[k] for k in ("B", "T", "D", "case", "seqlens")} == {
        "B": 2,
        "T": 24,
        "D": 8,
        "case": "dense",
        "seqlens": [],
    }
    assert list(prod["correctness"]["candidate_err"]) == ["o", "ht", "dx", "dg"]
    for s in back["shapes"]:
        for d in ("fwd", "bwd", "fwdbwd"):
            assert s[d]["candidate_ms"]["n"] == 4
        host = s["host_us"]
        assert host["calls"] == bench.HOST_CALLS and host["rounds"] == bench.HOST_ROUNDS
        for d in ("fwd", "fwdbwd"):
            assert host[d]["candidate"] > 0 and host[d]["baseline"] > 0
        assert host["torch_op"] > 0
        # the same op through autograd, forward and backward, costs more than its forward
        assert host["torch_op_fwdbwd"] > host["torch_op"]
        # the scan's python loops cost far more host time than one torch op
        assert host["fwd"]["baseline"] > host["torch_op"]
    # one probe per side per shape, candidate first, each a real fwd+bwd callable
    assert [s["peak_mem_bytes"] for s in back["shapes"]] == [
        {"candidate": 1000, "baseline": 2000},
        {"candidate": 3000, "baseline": 4000},
    ]
    from rich.console import Console

    from ladder.cli import render_record

    con = Console(record=True, width=250)
    render_record(back, con)
    text = con.export_text()
    assert "peak MiB (fla)" in text and "host us of one torch op (x.mul(1.0)), the floor" in text
    all_rec, _ = bench.run_bench(_opts(root, "0", out=root / "o"), runtime=CpuRuntime())
    varlen = next(s for s in all_rec["shapes"] if s["name"] == "varlen-3")
    assert varlen["case"] == "varlen" and varlen["seqlens"] == [5, 11, 8]
    assert "peak_mem_bytes" not in varlen  # no probe on this runtime: absent, not zero


def test_bench_of_a_varlen_bug_is_incorrect_without_measurements(tmp_path: Path, env) -> None:
    root = copy_scan(tmp_path)
    rec, path = bench.run_bench(_opts(root, "2"), runtime=MemoryRuntime())
    assert rec["status"] == "incorrect"
    failed = [s["name"] for s in rec["shapes"] if not s["correctness"]["passed"]]
    assert failed == ["varlen-3"]
    for s in rec["shapes"]:
        assert not {"fwd", "bwd", "fwdbwd", "host_us", "peak_mem_bytes"} & set(s)
    records.read_record(path)


def test_bench_with_no_shape_of_the_ideas_cases_is_refused(tmp_path: Path, env, monkeypatch):
    root = copy_scan(tmp_path)
    f = paths.load_family("scan", root)
    only_varlen = [s for s in f.SHAPES["sweep"] if s.case == "varlen"]
    monkeypatch.setitem(f.SHAPES, "sweep", only_varlen)
    with pytest.raises(paths.LadderError, match="implements the cases dense, and no 'sweep'"):
        bench.run_bench(_opts(root, "1", shapes="sweep"), runtime=MemoryRuntime())


# ------------------------------------------------------------------------------------------
# board and winner of the second family
# ------------------------------------------------------------------------------------------


def test_board_and_winner_without_records_are_clean(tmp_path: Path) -> None:
    root = copy_scan(tmp_path)
    board = run_cli(root, "board", "scan")
    assert board.exit_code == 0, board.output
    assert "no record" in board.stdout and "no scan records yet" in board.stdout
    win = run_cli(root, "winner", "scan")
    assert win.exit_code == 1 and "no scan records yet" in win.stderr
    assert "Traceback" not in win.output


def test_board_and_winner_after_benches(tmp_path: Path, env) -> None:
    root = copy_scan(tmp_path)
    for idea in ("0", "1"):
        bench.run_bench(_opts(root, idea), runtime=MemoryRuntime())
    result = run_cli(root, "board", "scan", "--json", "--device", "")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {r["idea"]: r for r in data["rows"]}
    assert rows["000-base"]["status"] == rows["001-dense-loop"]["status"] == "passed"
    assert rows["001-dense-loop"]["peak_mem_bytes"] == 1000
    assert rows["001-dense-loop"]["host_fwd_us"] > 0
    # timed on the CPU: whether 001 beats the baseline varies, the rule does not
    if rows["001-dense-loop"]["prod_ratio"] > 1.0:
        assert data["winner"]["idea"] == "001-dense-loop"
    else:
        assert data["winner"] is None
    pts = {(p["idea"], p["shape"]) for p in data["shapes"]}
    assert ("000-base", "varlen-3") in pts and ("001-dense-loop", "varlen-3") not in pts
    table = run_cli(root, "board", "scan", "--device", "")
    assert "host us" in table.stdout and "peak MiB" in table.stdout
