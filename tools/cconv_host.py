"""Host time per call of the short convolution's public entry points, and where it goes.

    python -m tools.cconv_host --out out/cconv-host.json [--profile out/cconv-host-profile.txt]

Times, in one interleaved run on the current GPU (ladder.timing.host_time_us: blocks of
back-to-back calls behind a queued GPU sleep, so no call waits on the device; the median
over blocks of host microseconds per call), at B1 T4096 D768 and B16 T8192 D2048 (bf16 x,
fp32 weight, silu):
- ``torch_op``: ``x.mul(1.0)`` without autograd, and ``torch_op_grad``: the same op on a
  leaf that requires grad (autograd records the node);
- ``kernel_fun``: ``kernel_fun.cconv.causal_conv1d(x, w, activation="silu")`` without
  autograd, and ``kernel_fun_grad``: the same call on leaves that require grad (the
  forward only; its graph is dropped);
- ``fla`` and ``fla_grad``: fla's ``causal_conv1d``, the same two ways;
- ``kernels``: the vendored dense forward alone (``kernel_fun.cconv._kernels.cconv_fwd``),
  what the package's dispatch adds its checks and autograd node to.
With --profile, cProfile's 25 costliest functions (cumulative) of 2000 package calls, without
and with autograd, at the small shape. Writes JSON {shape: {name: us}} plus the device and
versions. Needs a CUDA GPU and fla; exits 2 without a GPU or when --out / --profile cannot be
written (checked before any GPU work).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
from pathlib import Path

SHAPES = {"b1-t4096-d768": (1, 4096, 768), "prod": (16, 8192, 2048)}
CALLS = 20
ROUNDS = 7


def _fns(B: int, T: int, D: int) -> dict:
    import kernel_fun.cconv as kc
    import torch
    from kernel_fun._common import compat
    from kernel_fun.cconv import _kernels

    fla_conv = compat.fla_causal_conv1d()

    dev = torch.device("cuda")
    x = torch.randn(B, T, D, device=dev, dtype=torch.bfloat16)
    w = torch.randn(D, 4, device=dev)
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()

    def no_grad(f):
        def call(_k: int):
            with torch.no_grad():
                return f()

        return call

    def grad(f):
        def call(_k: int):
            with torch.enable_grad():
                return f()

        return call

    return {
        "torch_op": no_grad(lambda: x.mul(1.0)),
        "torch_op_grad": grad(lambda: xg.mul(1.0)),
        "kernel_fun": no_grad(lambda: kc.causal_conv1d(x, w, activation="silu")),
        "kernel_fun_grad": grad(lambda: kc.causal_conv1d(xg, wg, activation="silu")),
        "fla": no_grad(lambda: fla_conv(x, w, activation="silu")),
        "fla_grad": grad(lambda: fla_conv(xg, wg, activation="silu")),
        "kernels": no_grad(lambda: _kernels.cconv_fwd(x, w)),
    }


def _profile(fns: dict, n: int = 2000) -> str:
    out = io.StringIO()
    for name in ("kernel_fun", "kernel_fun_grad"):
        prof = cProfile.Profile()
        prof.enable()
        for k in range(n):
            fns[name](k)
        prof.disable()
        out.write(f"=== {name}: {n} calls\n")
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON report to write")
    ap.add_argument("--profile", type=Path, help="cProfile report of the package call")
    args = ap.parse_args(argv)
    from tools.outpath import out_problem

    for path, example in ((args.out, "cconv-host.json"), (args.profile, "cconv-host.txt")):
        problem = None if path is None else out_problem(path, example)
        if problem is not None:
            print(f"cconv_host: {problem}", file=sys.stderr)
            return 2
    import torch

    from ladder import timing

    if not torch.cuda.is_available():
        print("cconv_host: needs a CUDA GPU", file=sys.stderr)
        return 2
    import kernel_fun

    report: dict = {
        "device": torch.cuda.get_device_name(),
        "versions": kernel_fun.versions(),
        "calls": CALLS,
        "rounds": ROUNDS,
        "us": {},
    }
    clock = timing.CudaClock()
    small = None
    for name, (B, T, D) in SHAPES.items():
        fns = _fns(B, T, D)
        for f in fns.values():  # compile, autotune and fill every cache first
            for k in range(3):
                f(k)
        torch.cuda.synchronize()
        report["us"][name] = timing.host_time_us(fns, calls=CALLS, rounds=ROUNDS, clock=clock)
        small = small or fns
        print(name, json.dumps({k: round(v, 1) for k, v in report["us"][name].items()}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.profile is not None:
        args.profile.write_text(_profile(small))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
