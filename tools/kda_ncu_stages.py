"""Launch kda's own stage kernels once each at prod, between cudaProfilerStart/Stop, for ncu.

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section Occupancy --section LaunchStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section SchedulerStats \
        --section ComputeWorkloadAnalysis python tools/kda_ncu_stages.py [STAGE...]

Stages (default: all): intra (kda/003's backward intra-chunk kernel), intra13 (kda/013's:
the same stage on one program per chunk and K slice), intra14 (kda/014's: kda/003's kernel
under a register cap), wy (kda/005's fused WY/dq/dk/dg kernel), fwdho (kda/008's forward
state pass and output), each at its module's knob values, on tools/kda_stage_bench.py's
random inputs at B16 T8192 H16 K128 V256 (dA and the incoming fp32 gradients of the intra
stage drawn here). The knobs are the modules' environment knobs (KDA_INTRA_*, KDA_WY_*,
KDA_FWDHO_*; intra13 reads KDA_INTRA13_*, intra14 KDA_INTRA14_*, its cap 128 by default):
without them fwdho runs 008's default launch (BV 64, 4 warps, 2 stages), not the package's
(BV 128, 8 warps). Each stage is called once and timed with triton.testing.do_bench (median
ms, printed) before the profiled calls, so ncu sees compiled, warm kernels only. Exit status
2 for an unknown or repeated stage name, or without a CUDA GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STAGES = ("intra", "intra13", "intra14", "wy", "fwdho")
app = typer.Typer(
    add_completion=False,
    help=__doc__,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command(help=__doc__)
def main(
    stages: Annotated[
        list[str] | None,
        typer.Argument(help="any of intra, intra13, intra14, wy, fwdho (default: all)"),
    ] = None,
) -> None:
    only = list(stages or STAGES)
    unknown = [s for s in only if s not in STAGES]
    if unknown:
        typer.echo(
            f"kda_ncu_stages: unknown stage {unknown[0]!r}: give any of {', '.join(STAGES)}",
            err=True,
        )
        raise typer.Exit(2)
    twice = next((s for i, s in enumerate(only) if s in only[:i]), None)
    if twice:
        typer.echo(f"kda_ncu_stages: stage {twice!r} given twice; name each once", err=True)
        raise typer.Exit(2)
    import torch

    if not torch.cuda.is_available():
        typer.echo("kda_ncu_stages: no CUDA GPU (run it on the H200, under ncu)", err=True)
        raise typer.Exit(2)
    import kda_stage_bench as sb
    import triton
    from ladder.kernels.kda.ideas.i003 import intra
    from ladder.kernels.kda.ideas.i005 import wy
    from ladder.kernels.kda.ideas.i008 import fwd
    from ladder.kernels.kda.ideas.i013 import intra as intra13
    from ladder.kernels.kda.ideas.i014 import intra as intra14

    B, T, H, HV, K, V = 16, 8192, 16, 16, 128, 256
    x = sb.inputs(B, T, H, HV, K, V)
    gen = torch.Generator(device="cuda").manual_seed(5)
    dAqk = torch.randn(B, T, HV, 64, device="cuda", generator=gen) * 0.1
    dAkk = torch.randn(B, T, HV, 64, device="cuda", generator=gen) * 0.1
    dq, dk, dg = (torch.randn(B, T, HV, K, device="cuda", generator=gen) for _ in range(3))
    db = torch.randn(B, T, HV, device="cuda", generator=gen)
    _gen, kg, w, h0 = sb._state_inputs(x, B, H, HV, K, V, seed=2)
    wy_args = [x[n] for n in ("q", "k", "v", "v_new", "g", "beta", "A", "h", "do", "dh", "dv")]
    intra_args = (x["q"], x["k"], x["g"], x["beta"], dAqk, dAkk, dq, dk, db, dg)
    # the backward intra-chunk stage of kda/003, kda/013 and kda/014 (one signature)
    calls = {
        name: (lambda mod=mod: mod.kda_bwd_intra(*intra_args))
        for name, mod in (("intra", intra), ("intra13", intra13), ("intra14", intra14))
    }
    calls |= {
        "wy": lambda: wy.kda_bwd_wy(*wy_args, x["scale"]),
        "fwdho": lambda: fwd.fwd_h_o(x["q"], kg, w, x["v"], x["g"], x["A"], x["scale"], h0, True),
    }
    for name in only:
        calls[name]()
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(calls[name], warmup=5, rep=50)
        print(f"{name} ms {ms:.3f}", flush=True)
    torch.cuda.cudart().cudaProfilerStart()
    for name in only:
        calls[name]()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    app()
