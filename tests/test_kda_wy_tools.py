"""tools/kda_wy_sass.py (static sm90 compiles of kda ideas' WY kernel and kda/008's fused
forward, CPU) and the CPU side of tools/kda_stage_bench.py (its argument checks, for each
stage; the timing itself needs the H200)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

pytest.importorskip("triton")


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "kda_stage_bench.py"), *args],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.slow
def test_005s_two_pass_epilogue_spills_less_than_004_at_the_promoted_launch() -> None:
    import kda_wy_sass
    from cconv_sass import sass_stats

    try:
        stats = {i: kda_wy_sass.compile_wy(i, 64, 64, 4, 2, None) for i in ("004", "005")}
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    s4, s5 = (sass_stats(stats[i].asm["cubin"]) for i in ("004", "005"))
    assert s4["regs"] == s5["regs"] == 255, (s4, s5)
    # 004 spills hundreds of bytes per thread in its epilogue (488 B with Triton 3.6); 005's
    # two passes an eighth of that (64 B)
    assert s4["stack"] > 0 and s4["stack"] >= 5 * s5["stack"], (s4, s5)
    # the V loop's tiles are staged in shared memory (the pipelined loop) in both
    assert stats["004"].metadata.shared == stats["005"].metadata.shared > 64 * 1024


@pytest.mark.slow
def test_008s_fused_forward_fits_the_sm_without_spills_at_its_default_launch() -> None:
    """kda/008's default launch (BV 64, 4 warps, 2 stages: the fastest of the stage bench's
    launches on the H200, NOTES.md) holds the fp32 state and the chunk's tiles in registers
    without spills, and its staged tiles fit the H200's shared memory (one program per SM)."""
    import kda_wy_sass
    from cconv_sass import sass_stats
    from ladder.kernels.kda.ideas.i008 import fwd

    try:
        k = kda_wy_sass.compile_fwdho("008", fwd.BV, fwd.NUM_WARPS, fwd.NUM_STAGES)
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    s = sass_stats(k.asm["cubin"])
    assert s["stack"] == 0, s
    assert kda_wy_sass.resident(s["regs"], k.metadata.shared, fwd.NUM_WARPS) >= 1, (
        s,
        k.metadata.shared,
    )


@pytest.mark.slow
def test_019s_walk_reading_qg_does_not_spill_where_008s_does() -> None:
    """The static compile behind kda/019's NOTES.md: at kda/014's state-pass launch (BV 128,
    8 warps, 2 stages) kda/008's walk, which forms q * 2^g from q and the fp32 gate tile,
    takes 255 registers and spills; kda/019's, reading qg, takes no stack, fewer
    instructions, a third of the MUFU (exp2) work and less shared memory."""
    import kda_wy_sass
    from cconv_sass import sass_stats

    assert kda_wy_sass.idea_launch("019", "fwdho") == [128, 8, 2]  # its source defaults
    try:
        k8 = kda_wy_sass.compile_fwdho("008", 128, 8, 2)
        k19 = kda_wy_sass.compile_fwdho("019", 128, 8, 2)
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    s8, s19 = sass_stats(k8.asm["cubin"]), sass_stats(k19.asm["cubin"])
    assert s8["stack"] > 0 and s19["stack"] == 0, (s8, s19)
    assert s19["instrs"] < 0.85 * s8["instrs"] and 3 * s19["mufu"] <= s8["mufu"], (s8, s19)
    assert k19.metadata.shared < k8.metadata.shared, (k8.metadata.shared, k19.metadata.shared)


@pytest.mark.slow
def test_020s_wide_state_launches_fit_the_sm_without_spills() -> None:
    """The static compile behind kda/020's NOTES.md: fla's state kernel at kda/020's launch
    (BV 128, 8 warps, 2 stages) holds its [128, K] state without spills in one program per SM,
    where fla's own pick (BV 64, 4 warps, 2 stages) fits two; fla's state-gradient kernel at
    BV 128 and 8 warps spills at 2 stages and not at 1 (kda/006's launch, the sweep's)."""
    import kda_wy_sass
    from cconv_sass import sass_stats

    assert kda_wy_sass.idea_launch("020", "fwdh") == [128, 8, 2]  # its source defaults
    try:
        wide = kda_wy_sass.compile_state("020", "fwdh", 128, 8, 2)
        fla_pick = kda_wy_sass.compile_state("020", "fwdh", 64, 4, 2)
        dhu1 = kda_wy_sass.compile_state("006", "dhu", 128, 8, 1)
        dhu2 = kda_wy_sass.compile_state("006", "dhu", 128, 8, 2)
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    sw, sp = sass_stats(wide.asm["cubin"]), sass_stats(fla_pick.asm["cubin"])
    assert sw["stack"] == 0 and kda_wy_sass.resident(sw["regs"], wide.metadata.shared, 8) == 1
    assert kda_wy_sass.resident(sp["regs"], fla_pick.metadata.shared, 4) == 2, sp
    assert sass_stats(dhu1.asm["cubin"])["stack"] == 0
    assert sass_stats(dhu2.asm["cubin"])["stack"] > 0
    with pytest.raises(ModuleNotFoundError):
        kda_wy_sass.compile_state("014", "fwdh", 128, 8, 2)


def test_without_a_launch_each_idea_compiles_at_its_own_knobs() -> None:
    import kda_wy_sass

    assert kda_wy_sass.idea_launch("008", "fwdho") == [64, 4, 2]
    assert kda_wy_sass.idea_launch("005", "wy") == [64, 64, 4, 2]  # no register cap
    assert kda_wy_sass.idea_launch("004", "wy") == [64, 64, 8, 2]  # its source default
    assert kda_wy_sass.idea_launch("013", "intra") == [32, 2, 2]
    assert kda_wy_sass.idea_launch("014", "intra") == [32, 2, 2, 128]  # its register cap
    with pytest.raises(AttributeError, match="--stage intra knows 003, 013"):
        kda_wy_sass.compile_intra("005", 32, 2, 2)
    assert kda_wy_sass.idea_launch("012", "fwddiag") == [16, 1, 2]  # its source defaults
    assert kda_wy_sass.idea_launch("015", "fwddiag") == [32, 1, 2, 8]  # and its exact K step
    with pytest.raises(AttributeError, match="012's diagonal kernel has no exact_bk"):
        kda_wy_sass.compile_fwddiag("012", 32, 1, 2, 8)


@pytest.mark.slow
def test_015s_exact_tile_path_costs_the_diagonal_kernel_registers() -> None:
    """The static compile behind kda/015's NOTES.md: at BK 32 and 1 warp kda/012's diagonal
    kernel needs 167 registers (12 programs per SM); kda/015's [16, 16, 8] exact path in the
    same kernel raises that past 200, so fewer programs fit, and a wider exact step spills."""
    import kda_wy_sass
    from cconv_sass import sass_stats

    try:
        k12 = kda_wy_sass.compile_fwddiag("012", 32, 1, 2)
        k15, k15w = (kda_wy_sass.compile_fwddiag("015", 32, 1, 2, e) for e in (8, 16))
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    s12, s15, s15w = (sass_stats(k.asm["cubin"]) for k in (k12, k15, k15w))
    assert s12["stack"] == s15["stack"] == 0 and s15w["stack"] > 0, (s12, s15, s15w)
    n12, n15 = (kda_wy_sass.resident(s["regs"], k.metadata.shared, 1)
                for s, k in ((s12, k12), (s15, k15)))  # fmt: skip
    assert s15["regs"] > 200 > s12["regs"] and n15 < n12, (s12, s15, n12, n15)


@pytest.mark.slow
def test_017s_passes_keep_012s_programs_per_sm_at_one_stage_only() -> None:
    """The static compile behind kda/017's default stages: at BK 32 and 1 warp its diagonal
    kernel (the anchored passes in a loop) fits as many programs per SM as kda/012's at one
    pipeline stage, and fewer at two, where kda/012's does not lose any."""
    import kda_wy_sass
    from cconv_sass import sass_stats

    try:
        ks = {(i, st): kda_wy_sass.compile_fwddiag(i, 32, 1, st) for i in ("012", "017")
              for st in (1, 2)}  # fmt: skip
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    n = {}
    for key, kern in ks.items():
        st = sass_stats(kern.asm["cubin"])
        assert st["stack"] == 0, (key, st)
        n[key] = kda_wy_sass.resident(st["regs"], kern.metadata.shared, 1)
    assert n["017", 1] == n["012", 1] == n["012", 2] > n["017", 2], n
    assert kda_wy_sass.idea_launch("017", "fwddiag") == [32, 1, 1]  # its source defaults


@pytest.mark.slow
def test_023s_qg_loop_keeps_017s_registers_at_its_launch() -> None:
    """The static compile behind kda/023's NOTES.md: at kda/017's launch (BK 32, 1 warp, 1
    stage) its diagonal kernel, which also writes qg in a K loop of block pointers after the
    passes, takes kda/017's registers and programs per SM, and more instructions."""
    import kda_wy_sass
    from cconv_sass import sass_stats

    try:
        ks = {i: kda_wy_sass.compile_fwddiag(i, 32, 1, 1) for i in ("017", "023")}
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    st = {i: sass_stats(k.asm["cubin"]) for i, k in ks.items()}
    n = {i: kda_wy_sass.resident(st[i]["regs"], ks[i].metadata.shared, 1) for i in ks}
    assert st["023"]["stack"] == st["017"]["stack"] == 0, st
    assert st["023"]["regs"] == st["017"]["regs"] and n["023"] == n["017"] == 12, (st, n)
    assert st["023"]["instrs"] > st["017"]["instrs"], st
    assert kda_wy_sass.idea_launch("023", "fwddiag") == [32, 1, 1]  # kda/017's knobs


@pytest.mark.slow
def test_018s_first_launch_keeps_003s_registers_and_the_deep_kernel_compiles() -> None:
    """The static compile behind kda/018's NOTES.md: with the deep tiles queued, its first
    launch needs no more registers than kda/003's kernel (uncapped) and spills no more at
    kda/014's cap of 128; the deep tiles' kernel compiles on its own."""
    import kda_wy_sass
    from cconv_sass import sass_stats

    try:
        k = {(i, cap): kda_wy_sass.compile_intra(i, 32, 2, 2, cap) for i in ("003", "018")
             for cap in (None, 128)}  # fmt: skip
        deep = kda_wy_sass.compile_intra_deep("018", 32, 2)
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    st = {key: sass_stats(kern.asm["cubin"]) for key, kern in k.items()}
    assert st["018", None]["regs"] <= st["003", None]["regs"], st
    assert st["018", None]["stack"] == st["003", None]["stack"] == 0, st
    assert st["018", 128]["stack"] <= st["003", 128]["stack"], st
    assert sass_stats(deep.asm["cubin"])["regs"] > 0
    with pytest.raises(AttributeError):
        kda_wy_sass.compile_intra_deep("014", 32, 2)


@pytest.mark.slow
def test_013s_unrolled_intra_kernel_holds_fewer_programs_per_sm_than_003s() -> None:
    """The static compile behind kda/013's NOTES.md: at BK 32 and 2 warps kda/003's kernel
    needs 168 registers (6 programs per SM), kda/013's unrolled one more, so fewer fit."""
    import kda_wy_sass
    from cconv_sass import sass_stats

    try:
        k3, k13 = (kda_wy_sass.compile_intra(i, 32, 2, 2) for i in ("003", "013"))
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    s3, s13 = sass_stats(k3.asm["cubin"]), sass_stats(k13.asm["cubin"])
    assert s3["stack"] == s13["stack"] == 0, (s3, s13)
    n3 = kda_wy_sass.resident(s3["regs"], k3.metadata.shared, 2)
    n13 = kda_wy_sass.resident(s13["regs"], k13.metadata.shared, 2)
    assert s13["regs"] > s3["regs"] and n13 < n3, (s3, s13, n3, n13)


def test_resident_programs_per_sm() -> None:
    import kda_wy_sass

    assert kda_wy_sass.resident(255, 66560, 4) == 2  # registers bind
    assert kda_wy_sass.resident(168, 66560, 4) == 3  # registers and shared memory allow 3
    assert kda_wy_sass.resident(128, 66560, 4) == 3  # shared memory binds
    assert kda_wy_sass.resident(255, 66560, 8) == 1


@pytest.mark.parametrize(
    "args", [["003"], ["007", "--stage", "fwdho"], ["014", "--stage", "fwddiag"]]
)
def test_sass_tool_refuses_an_idea_without_the_kernel(args) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "kda_wy_sass.py"), *args],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2 and args[0] in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("64,64,4", "four or five"),
        ("64,64,4,2,168,1", "four or five"),
        ("64,x,4,2", "integers"),
        ("48,64,4,2", "BK 48 is not a power of two"),
        ("64,64,0,2", "positive"),
        ("8,64,4,2", "BK 8 is below 16"),
        ("64,64,64,2", "warps 64 is past 32"),
        ("64,64,4,2,7", "maxnreg 7 is not in 32..255"),
    ],
)
def test_bench_parse_launch_names_what_is_wrong(spec: str, message: str) -> None:
    import kda_stage_bench

    with pytest.raises(ValueError, match=message):
        kda_stage_bench.parse_launch(spec)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["018", "--stage", "intra", "--launch", "0,2,2"], "BK 0 is not positive"),
        (["018", "--stage", "intra", "--launch", "256,2,2"], "BK 256 is past 128"),
        (["018", "--stage", "intra", "--launch", "32,3,2"], "warps 3 is not a power of two"),
        (["018", "--stage", "intra", "--launch", "32,2,2,7"], "maxnreg 7 is not in 32..255"),
        (["017", "--stage", "fwddiag", "--launch", "32,1,0"], "stages 0 is not positive"),
        (["017", "--stage", "fwddiag", "--launch", "8,1,1"], "BK 8 is below 16"),
        (["017", "--stage", "fwddiag", "--launch", "32,64,1"], "warps 64 is past 32"),
        (["015", "--stage", "fwddiag", "--launch", "32,1,2,0"], "exact_bk 0 is not positive"),
        # an idea's own launch from its KDA_* environment is checked as a given one is
        (["020", "--stage", "fwdh", "KDA_FWDH20_BV=8"], "own launch 8,8,2 (its KDA_* knobs): BV 8"),
        (["020", "--stage", "fwdh", "KDA_FWDH20_WARPS=64"], "64 is past 32 (1024 threads)"),
        (["020", "--stage", "fwdh", "KDA_FWDH20_BV=abc"], "'abc' (check the KDA_* environment)"),
    ],
)
def test_sass_tool_refuses_a_launch_it_cannot_compile(args, message) -> None:
    # refused before any compile, in one line, not a Triton traceback or a count of an
    # empty kernel
    env = dict(os.environ, **dict(a.split("=", 1) for a in args if "=" in a))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "kda_wy_sass.py"), *(a for a in args if "=" not in a)],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and message in err and "Traceback" not in err, proc.stderr[-2000:]


def test_bench_parse_launch_maps_knobs() -> None:
    import kda_stage_bench

    assert kda_stage_bench.parse_launch("32,64,4,2,168") == dict(
        BK=32, BV=64, NUM_WARPS=4, NUM_STAGES=2, MAXNREG=168
    )
    assert kda_stage_bench.parse_launch("64,8,3", "dhu") == dict(BV=64, NUM_WARPS=8, NUM_STAGES=3)
    assert kda_stage_bench.parse_launch("32,4,1", "fwdho") == dict(BV=32, NUM_WARPS=4, NUM_STAGES=1)
    assert kda_stage_bench.parse_launch("64,8", "gate") == dict(BK=64, NUM_WARPS=8)
    assert kda_stage_bench.parse_launch("16,2,4,1", "fwdintra") == dict(
        BK=16, NUM_WARPS=2, SOLVE_WARPS=4, FUSE_WU=1
    )
    assert kda_stage_bench.parse_launch("32,1,1,0,1", "fwdintra") == dict(
        BK=32, NUM_WARPS=1, SOLVE_WARPS=1, FUSE_WU=0, NUM_STAGES=1
    )
    # the knob globals the tool sets are the ones the ideas' modules read
    from ladder.kernels.kda.ideas.i005 import wy
    from ladder.kernels.kda.ideas.i006 import dhu
    from ladder.kernels.kda.ideas.i008 import fwd
    from ladder.kernels.kda.ideas.i009 import gate

    assert all(hasattr(wy, n) for n in kda_stage_bench.KNOBS["wy"])
    assert all(hasattr(dhu, n) for n in kda_stage_bench.KNOBS["dhu"])
    assert all(hasattr(fwd, n) for n in kda_stage_bench.KNOBS["fwdho"])
    assert all(hasattr(gate, n) for n in kda_stage_bench.KNOBS["gate"])
    from ladder.kernels.kda.ideas.i011 import intra_fwd
    from ladder.kernels.kda.ideas.i017 import intra_fwd as intra_fwd17

    # kda/011 has every fwdintra knob but stages; kda/017's diagonal kernel has stages
    assert all(hasattr(intra_fwd, n) for n in kda_stage_bench.KNOBS["fwdintra"][:4])
    assert not hasattr(intra_fwd, "NUM_STAGES") and intra_fwd17.NUM_STAGES in (1, 2)
    assert kda_stage_bench.parse_launch("32,4,2", "intra") == dict(BK=32, NUM_WARPS=4, NUM_STAGES=2)
    assert kda_stage_bench.parse_launch("32,2,2,128", "intra") == dict(
        BK=32, NUM_WARPS=2, NUM_STAGES=2, MAXNREG=128
    )
    from ladder.kernels.kda.ideas.i003 import intra as intra3
    from ladder.kernels.kda.ideas.i013 import intra as intra13
    from ladder.kernels.kda.ideas.i014 import intra as intra14

    # 003 and 013 have no register cap (a launch with one skips them); 014 has every knob
    for mod in (intra3, intra13):
        assert [n for n in kda_stage_bench.KNOBS["intra"] if not hasattr(mod, n)] == ["MAXNREG"]
    assert all(hasattr(intra14, n) for n in kda_stage_bench.KNOBS["intra"])
    with pytest.raises(ValueError, match="three or four positive ints"):
        kda_stage_bench.parse_launch("32,2,2,128,1", "intra")
    with pytest.raises(ValueError, match="BK 48 is not a power of two"):
        kda_stage_bench.parse_launch("48,2,2", "intra")
    # without --launch each idea runs at its own knob values (008's fused forward: its
    # measured best, 64, 4, 2), not at a launch written down in the tool
    current = {n: getattr(fwd, n) for n in kda_stage_bench.KNOBS["fwdho"]}
    assert (
        kda_stage_bench.launch_values({}, current)
        == current
        == dict(BV=64, NUM_WARPS=4, NUM_STAGES=2)
    )
    wy_now = {n: getattr(wy, n) for n in kda_stage_bench.KNOBS["wy"]}
    given = kda_stage_bench.parse_launch("32,64,8,3")
    assert kda_stage_bench.launch_values(given, {**wy_now, "MAXNREG": 168}) == {
        **given,
        "MAXNREG": 0,
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["099"], "no idea '099'"),
        (["006"], "has no wy.py, the --stage wy module; ideas with one: 004"),
        (["005", "--stage", "dhu"], "has no dhu.py"),
        (["007", "--stage", "fwdho"], "has no fwd.py"),
        (["008", "--stage", "fwdho", "--launch", "64,4"], "three positive ints"),
        (["006", "--stage", "dhu", "--launch", "64,8"], "three positive ints"),
        (["006", "--stage", "dhu", "--launch", "48,8,3"], "BV 48 is not a power of two"),
        (["006", "--stage", "bogus"], "wy, dhu, fwdh, fwdho, gate, fwdintra or intra"),
        (
            ["014", "--stage", "fwdh"],
            "has no fwdh.py, the --stage fwdh module; ideas with one: 020",
        ),
        (["020", "--stage", "fwdh", "--launch", "24,8,2"], "BV 24 is not a power of two"),
        # above MAX_K the stage is fla's or refused: nothing of the idea's own to time
        (
            ["019", "--stage", "fwdho", "--K", "160"],
            "019-fwd-state-qg's --stage fwdho runs K <= 128",
        ),
        (["020", "--stage", "fwdh", "--K", "160"], "--stage fwdh runs K <= 128 only"),
        (["006", "--stage", "dhu", "--K", "192"], "--stage dhu runs K <= 128 only"),
        (["011", "--stage", "fwdintra", "--launch", "16,2,2"], "four or five positive ints"),
        (["011", "--stage", "fwdintra", "--launch", "16,2,2,2"], "fuse_wu 2 is not 0 or 1"),
        (["011", "--stage", "fwdintra", "--launch", "16,3,2,0"], "warps 3 is not a power"),
        (["010", "--stage", "fwdintra"], "has no intra_fwd.py"),
        (
            ["008", "--stage", "gate"],
            "has no gate.py, the --stage gate module; ideas with one: 009, 010",
        ),
        (["009", "--stage", "gate", "--launch", "4"], "two positive ints"),
        (["009", "--stage", "gate", "--launch", "32,6"], "warps 6 is not a power of two"),
        (["005", "--T", "100"], "not a multiple of 64"),
        (["005", "--HV", "24"], "not a multiple of H"),
        (["005", "--launch", "64,64"], "four or five"),
    ],
)
def test_bench_usage_errors_exit_2_before_any_gpu_work(
    args: list[str], message: str, tmp_path: Path
) -> None:
    proc = _bench(*args, "--out", str(tmp_path / "r.json"))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "r.json").exists()


def test_bench_creates_no_folder_when_it_cannot_run(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the bench would run")
    proc = _bench("005", "--out", str(tmp_path / "new" / "dir" / "r.json"))
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "new").exists()


def test_bench_refuses_an_out_folder(tmp_path: Path) -> None:
    proc = _bench("005", "--out", str(tmp_path))
    assert proc.returncode == 2 and "is a folder" in proc.stderr, proc.stderr[-2000:]


def test_bench_without_a_gpu_exits_2(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the bench would run")
    proc = _bench("005", "--out", str(tmp_path / "r.json"))
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr, proc.stderr[-2000:]


def test_a_launch_fails_on_a_race_a_large_difference_or_a_non_finite_output() -> None:
    import kda_stage_bench

    ok = {"dq": 1e-4, "dg": 4.7e-4}
    assert kda_stage_bench.judge(ok, True) == ("dg", True)
    assert kda_stage_bench.judge(ok, False) == ("dg", False)  # two calls differed
    assert kda_stage_bench.judge({"dq": 1e-4, "dk": 0.5}, True) == ("dk", False)
    assert kda_stage_bench.judge({"dq": 1e-4, "dh0": math.nan, "dk": 2e-3}, True) == ("dh0", False)


def test_exact_row_share_counts_a_deep_row_and_every_later_row_of_its_tile() -> None:
    import kda_stage_bench
    import torch

    g = -0.25 * torch.arange(32.0).view(1, 32, 1, 1).repeat(1, 1, 2, 4)  # shallow
    assert kda_stage_bench.exact_row_share(g, 112.0) == 0.0
    # in the second tile of head 0, row 5 lies 113 log2 units below the tile's first row in
    # one column: rows 5..15 of that tile take the loop (11 of 64 rows), nothing else
    g[0, 16 + 5, 0, 2] = g[0, 16, 0, 2] - 113.0
    assert kda_stage_bench.exact_row_share(g, 112.0) == 11 / 64
    assert kda_stage_bench.exact_row_share(g, 113.0) == 0.0


def test_segment_passes_treat_nan_as_the_kernels_do_and_refuse_bad_input() -> None:
    import kda_stage_bench
    import torch

    # a NaN exponent ends a segment and, at the next anchor, sends the tile to the exact
    # loop, as in kda/017's and kda/018's kernels: a NaN gate at row 5 of one tile of two
    g = torch.zeros(1, 32, 1, 8)
    g[0, 5, 0, 3] = float("nan")
    assert kda_stage_bench.segment_passes(g, 112.0, 1.0) == ((2 + 1) / 2, 1 / 2)
    for bad, message in [
        (dict(g=torch.zeros(1, 40, 1, 8)), "T 40 is not a multiple of 16"),
        (dict(g=torch.zeros(1, 32, 1, 100), bk=32), "bk 32 does not divide K 100"),
        (dict(g=torch.zeros(1, 0, 1, 8)), "non-empty"),
        (dict(g=torch.zeros(1, 32, 1, 8), limit=0.0), "limit > 0"),
        (dict(g=torch.zeros(1, 32, 1, 8), rise=-0.5), "rise >= 0"),
    ]:
        kw = dict(limit=112.0, rise=1.0) | bad
        with pytest.raises(ValueError, match=message):
            kda_stage_bench.segment_passes(**kw)


def test_segment_passes_follow_the_anchors_and_stop_at_a_rise() -> None:
    import kda_stage_bench
    import torch

    # four tiles of one head, K 4: flat; falling 10 a row in column 1 (row 12 is 120 below
    # row 0: segments 0..11 and 12..15); a cliff in column 3 (row 1 115 below, row 2 back:
    # three passes, the third meeting row 1 below its anchor, so the exact loop); a rise of
    # 0.5 a row in column 0 (the first segment allows +-limit, so one pass)
    g = torch.zeros(1, 64, 1, 4)
    g[0, 16:32, 0, 1] = -10.0 * torch.arange(16.0)
    g[0, 32:48, 0, 3] = torch.tensor([0.0, -115.0] + [-float(i) for i in range(14)])
    g[0, 48:64, 0, 0] = 0.5 * torch.arange(16.0)
    assert kda_stage_bench.segment_passes(g, 112.0, 1.0) == ((1 + 2 + 3 + 1) / 4, 1 / 4)
    # per K slice of 2 columns: the falling and the cliff tiles' other slice is flat
    assert kda_stage_bench.segment_passes(g, 112.0, 1.0, bk=2) == ((6 + 2 + 3) / 8, 1 / 8)
    # kda/018's midpoint pass: a slice whose range is at most `whole` takes one pass (the
    # cliff's 115 too); the falling slice's 150 takes segments of 64: rows 0..6, 7..13, 14..15
    assert kda_stage_bench.segment_passes(g, 64.0, 1.0, bk=2, whole=128.0) == (
        (6 + 3 + 1) / 8,
        0.0,
    )
    # and with a smaller midpoint range the cliff's slice takes segments and stops
    assert kda_stage_bench.segment_passes(g[:, 32:48], 64.0, 1.0, bk=2, whole=100.0) == (
        (1 + 3) / 2,
        1 / 2,
    )


def test_bench_rounds_shuffle_the_order_and_pair_the_ratios() -> None:
    import kda_stage_bench

    ran: list[str] = []

    def make(name: str, ms: float):
        def call():
            ran.append(name)
            return ms

        return call

    calls = {"fla": make("fla", 2.0), "0": make("0", 1.0), "1": make("1", 4.0)}
    times, orders = kda_stage_bench.interleaved_times(calls, 6, lambda f: f(), seed=3)
    assert ran == [n for order in orders for n in order]  # timed in each round's order
    assert all(sorted(o) == ["0", "1", "fla"] for o in orders)
    assert len({tuple(o) for o in orders}) > 1  # shuffled, not one fixed order
    assert times == {"fla": [2.0] * 6, "0": [1.0] * 6, "1": [4.0] * 6}
    again, orders2 = kda_stage_bench.interleaved_times(calls, 6, lambda f: f(), seed=3)
    assert orders2 == orders and again == times  # seeded: a run repeats
    s = kda_stage_bench.round_summary([1.0, 3.0, 2.0], [2.0, 3.0, 5.0])
    assert s == dict(ms_median=2.0, ms_min=1.0, ms_max=3.0, ratio_median=2.0)


def test_bench_a_timed_launch_sets_its_knobs_for_the_call_only() -> None:
    import types

    import kda_stage_bench

    mod = types.SimpleNamespace(BK=64, NUM_WARPS=4)
    call = kda_stage_bench._at_launch(lambda m: (m.BK, m.NUM_WARPS), mod, dict(BK=16, NUM_WARPS=1))
    assert call() == (16, 1)
    assert (mod.BK, mod.NUM_WARPS) == (64, 4)


@pytest.mark.slow
def test_027s_walk_and_diagonal_kernel_compile_as_its_notes_say() -> None:
    """The static compile behind kda/027's NOTES.md: its walk (forming w and u itself) at its
    default launch (BV 128, 8 warps, 2 stages) fits one program per SM with more shared memory
    than kda/019's walk (v, A and beta staged in place of u and w); at BV 64 it
    does not spill. Its diagonal kernel is kda/022's with the kb and kg stores: more memory
    instructions, the same programs per SM."""
    import kda_wy_sass
    from cconv_sass import sass_stats

    assert kda_wy_sass.idea_launch("027", "fwdho") == [128, 8, 2]
    try:
        k19 = kda_wy_sass.compile_fwdho("019", 128, 8, 2)
        k27 = kda_wy_sass.compile_fwdho("027", 128, 8, 2)
        k27_64 = kda_wy_sass.compile_fwdho("027", 64, 8, 2)
        d22 = kda_wy_sass.compile_fwddiag("022", 32, 1, 2)
        d27 = kda_wy_sass.compile_fwddiag("027", 32, 1, 2)
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    s19, s27, s64 = (sass_stats(k.asm["cubin"]) for k in (k19, k27, k27_64))
    assert kda_wy_sass.resident(s27["regs"], k27.metadata.shared, 8) == 1, s27
    assert k27.metadata.shared > k19.metadata.shared, (k27.metadata.shared, k19.metadata.shared)
    assert s64["stack"] == 0, (s27, s64)
    t22, t27 = sass_stats(d22.asm["cubin"]), sass_stats(d27.asm["cubin"])
    assert t27["mem"] > t22["mem"], (t22, t27)
    r22 = kda_wy_sass.resident(t22["regs"], d22.metadata.shared, 1)
    assert kda_wy_sass.resident(t27["regs"], d27.metadata.shared, 1) == r22, (t22, t27)


@pytest.mark.slow
def test_028s_recompute_walk_fits_two_programs_per_sm_as_flas_state_kernel() -> None:
    """The static compile behind kda/028's NOTES.md: its walk at its default launch (BV 64,
    4 warps, 2 stages, fla's state-recompute pick) fits two programs per SM, as fla's kernel
    at that launch does, with more shared memory (A, v, beta and kb staged in place of w and
    u) and more instructions (the w and u products); at 8 warps it does not spill."""
    import kda_wy_sass
    from cconv_sass import sass_stats

    assert kda_wy_sass.idea_launch("028", "bwdwalk") == [64, 4, 2]
    try:
        k28 = kda_wy_sass.compile_bwdwalk("028", 64, 4, 2)
        k28_8 = kda_wy_sass.compile_bwdwalk("028", 64, 8, 2)
        fla = kda_wy_sass.compile_state("020", "fwdh", 64, 4, 2)
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    s28, s8, sf = (sass_stats(k.asm["cubin"]) for k in (k28, k28_8, fla))
    assert kda_wy_sass.resident(s28["regs"], k28.metadata.shared, 4) == 2, s28
    assert kda_wy_sass.resident(sf["regs"], fla.metadata.shared, 4) == 2, sf
    assert k28.metadata.shared > fla.metadata.shared
    assert s28["instrs"] > sf["instrs"], (s28, sf)
    assert s8["stack"] == 0, s8
