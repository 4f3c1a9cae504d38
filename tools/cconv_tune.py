"""What Triton's autotuner picks for the short convolution's kernels, and what a fixed launch
costs at the small calls, on the current GPU.

    python -m tools.cconv_tune --idea 010 --out out/cconv-tune.json

Two parts, one report:
- ``picks``: each tuned launch of the idea's kernels (the dense loop's forward and
  backward, the case loops' forward and backward, the fp32 backward) at one call per size
  bucket and case (``CALLS``): the autotuner's key, every configuration's median ms (its
  own ``do_bench``) and the one it kept. A fixed table of configurations can be read off
  these (with the spread between configurations, which says what a wrong pick costs).
- ``small``: the dense forward and backward kernels of idea 004 (the loop every later idea
  launches for the dense case) at the small shapes (``SMALL``), launched directly at each
  (num_warps, G, rows per program) in ``SMALL_LAUNCHES`` and timed with
  ``triton.testing.do_bench`` (median ms).

Needs a CUDA GPU; exits 2 without one or when --out cannot be written (checked first).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

# (name, B, T, D, W, x dtype, case): one call per size bucket (B*T*D rounded up to a power
# of four: 4^11 is the smallest tuned call, 4^13 the cap) and case.
CALLS = [
    ("dense-4^11", 1, 2048, 2048, 4, "bfloat16", "dense"),
    ("dense-4^12", 4, 2048, 2048, 4, "bfloat16", "dense"),
    ("dense-4^13", 16, 8192, 2048, 4, "bfloat16", "dense"),
    ("dense-fp16-4^13", 16, 8192, 2048, 4, "float16", "dense"),
    ("dense-w2-4^13", 16, 8192, 2048, 2, "bfloat16", "dense"),
    ("bias-residual-4^12", 4, 2048, 2048, 4, "bfloat16", "bias-residual"),
    ("bias-residual-4^13", 16, 8192, 2048, 4, "bfloat16", "bias-residual"),
    ("state-4^12", 4, 2048, 2048, 4, "bfloat16", "state"),
    ("state-4^13", 16, 4096, 2048, 4, "bfloat16", "state"),
    ("varlen-4^12", 1, 8192, 2048, 4, "bfloat16", "varlen"),
    ("varlen-4^13", 1, 131072, 2048, 4, "bfloat16", "varlen"),
    ("fp32-4^12", 4, 2048, 2048, 4, "float32", "fp32"),
    ("fp32-4^13", 8, 8192, 2048, 4, "float32", "fp32"),
]
# --space wide: the configurations every tuned kernel is tried at instead of its own list
# (BD = 4 * 32 * num_warps): the register cap decides how many warps an SM holds.
WIDE = [(2, g, r) for g in (4, 8) for r in (None, 128, 112, 96, 80, 64)] + [(4, 8, 128)]
SMALL = {"b1-t4096-d768": (1, 4096, 768), "b1-t1024-d2048": (1, 1024, 2048)}
SMALL_LAUNCHES = [(nw, g, ts) for nw in (1, 2, 4) for g in (4, 8) for ts in (8, 16, 32, 64)]


def _tuners(idea: str) -> dict:
    """{name: Autotuner} of every autotuned kernel an idea's launches can reach."""
    mods = {i: importlib.import_module(f"ladder.kernels.cconv.ideas.i{i}.kernel")
            for i in ("004", "006", "007", "009")}  # fmt: skip
    importlib.import_module(f"ladder.kernels.cconv.ideas.i{idea}.kernel")
    named = {
        "dense_fwd": getattr(mods["004"], "cconv_fwd_tuned", None),
        "dense_bwd": getattr(mods["004"], "cconv_bwd_tuned", None),
        "case_fwd": getattr(mods["006"], "case_fwd_tuned", None),
        "case_bwd": getattr(mods["007"], "case_bwd_tuned", None),
        "case_bwd_fp32": getattr(mods["009"], "case_bwd_kahan_tuned", None),
    }
    return {k: v for k, v in named.items() if v is not None}


def _wide(tuners: dict) -> None:
    """Swap every tuner's configurations for WIDE's."""
    import triton

    for t in tuners.values():
        t.configs = [
            triton.Config({"BD": 4 * 32 * nw, "G": g}, num_warps=nw,
                          **({} if r is None else {"maxnreg": r}))
            for nw, g, r in WIDE
        ]  # fmt: skip


def _picks(idea: str, calls: list[str] | None = None, wide: bool = False) -> list[dict]:
    import torch

    from ladder.kernels.cconv import family

    k = importlib.import_module(f"ladder.kernels.cconv.ideas.i{idea}.kernel")
    tuners = _tuners(idea)
    if wide:
        _wide(tuners)
    out = []
    for name, B, T, D, W, dt, case in CALLS:
        if calls is not None and name not in calls:
            continue
        dev = torch.device("cuda")
        x = torch.randn(B, T, D, device=dev, dtype=getattr(torch, dt))
        w = torch.randn(D, W, device=dev)
        dy = torch.randn_like(x)
        kw: dict = {}
        if case == "bias-residual":
            kw = {"bias": torch.randn(D, device=dev), "residual": torch.randn_like(x)}
        elif case == "state":
            kw = {"initial_state": torch.randn(B, D, W, device=dev, dtype=x.dtype)}
        elif case == "varlen":
            shape = family.CaseShape(name, 1, T, D, W, case="varlen", min_len=1, max_len=8192)
            lens = family.case_lengths(shape)
            cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device=dev)
            kw = {"cu_seqlens": cu.to(torch.int32)}
        before = {n: dict(t.cache) for n, t in tuners.items()}
        fwd_kw = {k2: v for k2, v in kw.items()}
        k.conv_fwd(x, w, output_final_state=case == "state", **fwd_kw)
        dht = None
        if case == "state":
            dht = torch.randn(B, D, W, device=dev, dtype=x.dtype)
        k.conv_bwd(x, w, dy, dht=dht, **fwd_kw)
        torch.cuda.synchronize()
        for tname, t in tuners.items():
            new = [key for key in t.cache if key not in before[tname]]
            for key in new:
                timings = {str(c): float(v[0] if isinstance(v, (list, tuple)) else v)
                           for c, v in t.configs_timings.items()}  # fmt: skip
                out.append({"call": name, "B": B, "T": T, "D": D, "W": W, "dtype": dt,
                            "case": case, "kernel": tname, "key": [str(v) for v in key],
                            "best": str(t.cache[key]), "ms": timings,
                            "bench_s": float(getattr(t, "bench_time", 0.0))})  # fmt: skip
                print(name, tname, out[-1]["best"], json.dumps(
                    {c: round(v, 4) for c, v in timings.items()}), flush=True)  # fmt: skip
    return out


def _time_small(k4, x, w, dy, nw: int, g: int, ts: int) -> dict:
    """Median ms of the dense forward and backward kernels at one launch."""
    import torch
    import triton

    B, T, D = x.shape
    bd = 4 * 32 * nw
    ns = triton.cdiv(T, ts)
    grid = (triton.cdiv(D, bd), ns, B)
    y = torch.empty_like(x)
    dx = torch.empty_like(x)
    dwp = torch.empty((B * ns, D, 4), device=x.device)
    even = T % ts == 0
    work = k4._work_bucket(B, T, D)

    def fwd():
        k4.cconv_fwd_kernel[grid](
            x, w, y, T, D, ts, work, *x.stride(), y.stride(0), y.stride(1), W=4, FAST=True,
            EVEN_T=even, BD=bd, G=g, num_warps=nw,
        )  # fmt: skip

    def bwd():
        k4.cconv_bwd_kernel[grid](
            x, w, dy, dx, dwp, T, D, ts, ns, work, *x.stride(), *dy.stride(), dx.stride(0),
            dx.stride(1), W=4, FAST=True, EVEN_T=even, BD=bd, G=g, num_warps=nw,
        )  # fmt: skip
        dwp.sum(0)

    row = {"num_warps": nw, "G": g, "TS": ts, "programs": grid[0] * ns * B}
    for d, f in (("fwd", fwd), ("bwd", bwd)):
        row[f"{d}_ms"] = float(triton.testing.do_bench(f, warmup=20, rep=60))
    return row


def _small() -> list[dict]:
    import torch

    k4 = importlib.import_module("ladder.kernels.cconv.ideas.i004.kernel")
    out = []
    for name, (B, T, D) in SMALL.items():
        x = torch.randn(B, T, D, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(D, 4, device="cuda")
        dy = torch.randn_like(x)
        for nw, g, ts in SMALL_LAUNCHES:
            out.append({"shape": name, **_time_small(k4, x, w, dy, nw, g, ts)})
            print(json.dumps(out[-1]), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idea", default="010", help="cconv idea whose launches are tuned")
    ap.add_argument("--out", type=Path, required=True, help="JSON report to write")
    ap.add_argument("--skip-small", action="store_true", help="leave out the small-call sweep")
    ap.add_argument("--calls", help="comma-separated names of CALLS to tune (default: all)")
    ap.add_argument("--space", choices=("own", "wide"), default="own",
                    help="each kernel's own configurations, or WIDE's register caps")  # fmt: skip
    args = ap.parse_args(argv)
    from tools.outpath import out_problem, write_report

    problem = out_problem(args.out, "cconv-tune.json")
    if problem is not None:
        print(f"cconv_tune: {problem}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("cconv_tune: needs a CUDA GPU", file=sys.stderr)
        return 2
    import kernel_fun

    report = {
        "device": torch.cuda.get_device_name(),
        "versions": kernel_fun.versions(),
        "idea": args.idea,
        "space": args.space,
        "picks": _picks(
            args.idea, args.calls.split(",") if args.calls else None, args.space == "wide"
        ),  # fmt: skip
        "small": [] if args.skip_small else _small(),
    }
    write_report(args.out, json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
