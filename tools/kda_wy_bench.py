"""Time the fused WY / dq / dk / dg backward stage of kda ideas against fla's, stage alone.

    python tools/kda_wy_bench.py 004 005 --launch 64,64,4,2 --launch 32,64,4,2,168 \\
        --out out/kda-wy-bench.json                                        (on the H200)

The stage is three quarters of what separates the ideas' backward passes from each other
(ladder/kernels/kda/ideas/004-wy-split-k/NOTES.md), and a whole-op bench re-runs fla's
autotuned chain for every launch tried. This tool times only the stage, on random inputs of
its shapes and dtypes at one problem size (default prod: B16 T8192 H16 K128 V256, dense):

- fla 0.6.0's ``chunk_kda_bwd_wy_dqkg_fused`` (state_v_first), autotuned at that size in
  this process on its first call;
- each idea's ``wy.kda_bwd_wy`` at each launch (BK, BV, warps, stages[, maxnreg]; the
  idea module's knob globals are set for the call, the same values the ``KDA_WY_*`` knobs
  give at import; a maxnreg on an idea without that knob is refused).

Per row: the median ms of ``triton.testing.do_bench``, whether two calls gave bitwise equal
outputs, and the largest relative L2 difference of any output (dq, dk, dv2, db, dg, dA)
from fla's on the same inputs. A launch is a lead for a ladder bench, not a record. Exit
status: 0 done; 1 an idea's outputs differ from fla's by more than 1e-2 or are not
deterministic; 2 usage error or no CUDA GPU.
"""

from __future__ import annotations

import importlib
import json
import math
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import typer  # noqa: E402
from outpath import out_problem  # noqa: E402

OUTPUTS = ("dq", "dk", "dv2", "db", "dg", "dA")
MAX_REL = 1e-2  # bf16 operands in both kernels' products: 1e-3 is typical (004's NOTES)
KNOBS = ("BK", "BV", "NUM_WARPS", "NUM_STAGES", "MAXNREG")


def parse_launch(spec: str) -> dict[str, int]:
    """{"BK", "BV", "NUM_WARPS", "NUM_STAGES"[, "MAXNREG"]} of "BK,BV,warps,stages[,maxnreg]";
    ValueError naming what is wrong."""
    try:
        parts = [int(p) for p in spec.split(",")]
    except ValueError:
        raise ValueError(f"--launch {spec!r}: integers BK,BV,warps,stages[,maxnreg]") from None
    if len(parts) not in (4, 5) or min(parts) < 1:
        raise ValueError(
            f"--launch {spec!r}: four or five positive ints, BK,BV,warps,stages[,maxnreg]"
        )
    bk, bv, warps = parts[:3]
    for name, n in (("BK", bk), ("BV", bv), ("warps", warps)):
        if n & (n - 1):
            raise ValueError(f"--launch {spec!r}: {name} {n} is not a power of two")
    return dict(zip(KNOBS, parts))


def inputs(B: int, T: int, H: int, HV: int, K: int, V: int, device: str = "cuda") -> dict:
    """Random inputs of the stage at one size: L2-normalised q, k; a chunk-local cumulative
    gate in log2 units (about -0.05 per token); A unit lower-triangular per chunk."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    NT = T // 64

    def rn(*shape, s=1.0):
        return (torch.randn(*shape, device=device, generator=gen) * s).to(torch.bfloat16)

    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=device, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=device, generator=gen), dim=-1)
    g = -0.1 * torch.rand(B, NT, 64, HV, K, device=device, generator=gen)
    g = g.cumsum(2).view(B, T, HV, K)
    t = torch.arange(64, device=device)
    lower = (t[None, :] < t[:, None]).to(torch.float)  # strictly below the diagonal
    A = torch.randn(B, NT, HV, 64, 64, device=device, generator=gen) * 0.1 * lower + torch.eye(
        64, device=device
    )
    A = A.permute(0, 1, 3, 2, 4).reshape(B, T, HV, 64).to(torch.bfloat16).contiguous()
    return dict(
        q=q.to(torch.bfloat16), k=k.to(torch.bfloat16), v=rn(B, T, HV, V), v_new=rn(B, T, HV, V),
        g=g, beta=torch.rand(B, T, HV, device=device, generator=gen).to(torch.bfloat16), A=A,
        h=rn(B * NT, HV, V, K, s=0.5), do=rn(B, T, HV, V), dh=rn(B * NT, HV, V, K, s=0.5),
        dv=rn(B, T, HV, V), scale=K**-0.5,
    )  # fmt: skip


def rel(a: Any, b: Any) -> float:
    """Relative L2 difference of a from b (in float64)."""
    d = (a.double() - b.double()).norm().item()
    n = b.double().norm().item()
    return d / n if n > 0 else (0.0 if d == 0 else math.inf)


def _usage(message: str) -> None:
    typer.echo(f"kda_wy_bench: error: {message}", err=True)
    raise typer.Exit(2)


def main(
    ideas: list[str] = typer.Argument(..., help="kda idea numbers with a wy.py, e.g. 004 005"),
    launch: list[str] = typer.Option(
        ["64,64,4,2"], help="BK,BV,warps,stages[,maxnreg] (repeatable)"
    ),
    out: Path = typer.Option(Path("out/kda-wy-bench.json"), help="the JSON report"),
    B: int = typer.Option(16, min=1),
    T: int = typer.Option(8192, min=64),
    H: int = typer.Option(16, min=1),
    HV: int = typer.Option(16, min=1),
    K: int = typer.Option(128, min=1, max=256),
    V: int = typer.Option(256, min=1, max=512),
) -> None:
    """Time each idea's WY stage at each launch against fla's, stage alone."""
    try:
        launches = [parse_launch(s) for s in launch]
    except ValueError as exc:
        _usage(str(exc))
    if T % 64:
        _usage(f"T {T} is not a multiple of 64 (the stage's chunk)")
    if HV % H:
        _usage(f"HV {HV} is not a multiple of H {H}")
    problem = out_problem(out, "kda-wy-bench.json")
    if problem:
        _usage(problem)
    import ladder  # noqa: F401  (the idea import finder)

    mods = {}
    for idea in ideas:
        try:
            mods[idea] = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea}.wy")
        except ModuleNotFoundError as exc:
            _usage(f"kda idea {idea} has no wy.py ({exc})")
        for lp in launches:
            if "MAXNREG" in lp and not hasattr(mods[idea], "MAXNREG"):
                _usage(f"kda idea {idea} has no maxnreg knob; drop the fifth value of --launch")
    import torch

    if not torch.cuda.is_available():
        _usage("no CUDA GPU (run it on the H200)")
    import triton
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd_wy_dqkg_fused

    x = inputs(B, T, H, HV, K, V)
    args = [x[n] for n in ("q", "k", "v", "v_new", "g", "beta", "A", "h", "do", "dh", "dv")]

    def fla_stage():
        return chunk_kda_bwd_wy_dqkg_fused(*args, scale=x["scale"], state_v_first=True)

    ref = fla_stage()  # autotunes here
    fla_ms = triton.testing.do_bench(fla_stage)
    typer.echo(f"fla B{B} T{T} H{H} HV{HV} K{K} V{V}: {fla_ms:.3f} ms")
    rows, bad = [], False
    for lp in launches:
        for idea, mod in mods.items():
            saved = {n: getattr(mod, n) for n in KNOBS if hasattr(mod, n)}
            for n in KNOBS:
                if hasattr(mod, n):
                    setattr(mod, n, lp.get(n, 0 if n == "MAXNREG" else saved[n]))
            try:

                def ours(mod=mod):
                    return mod.kda_bwd_wy(*args, x["scale"])

                a, b = ours(), ours()
                same = all(torch.equal(p, q) for p, q in zip(a, b))
                diffs = {n: rel(p, r) for n, p, r in zip(OUTPUTS, a, ref)}
                del a, b
                ms = triton.testing.do_bench(ours)
            finally:
                for n, val in saved.items():
                    setattr(mod, n, val)
            worst = max(diffs, key=diffs.get)
            ok = same and diffs[worst] <= MAX_REL
            bad |= not ok
            row = dict(idea=idea, **lp, ms=ms, fla_ms=fla_ms, deterministic=same, rel_diff=diffs)
            rows.append(row)
            typer.echo(
                f"{idea} {','.join(str(v) for v in lp.values())}: {ms:.3f} ms ({fla_ms / ms:.2f}x "
                f"fla), deterministic {same}, largest difference from fla {diffs[worst]:.1e} "
                f"({worst}){'' if ok else '  <- FAILS'}"
            )
    report = dict(
        tool="kda_wy_bench", device=torch.cuda.get_device_name(), host=platform.node(),
        versions=dict(torch=torch.__version__, triton=triton.__version__,
                      fla=importlib.import_module("fla").__version__),
        shape=dict(B=B, T=T, H=H, HV=HV, K=K, V=V), fla_ms=fla_ms, rows=rows,
    )  # fmt: skip
    out.write_text(json.dumps(report, indent=1) + "\n")
    typer.echo(f"wrote {out}")
    if bad:
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
