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
versions, and two more parts:
- ``decode_us``: the decode step end to end (``_wall_time_us``: back-to-back calls, the
  device waited for at the end of each block, so a call costs whichever of its host and
  device time is longer) at N sequences of one token, D2048 W4 bf16, silu, a bf16 cache
  [N, D, W]: ``kernel_fun.cconv.causal_conv1d_update`` against fla's, and ``x.mul(1.0)``.
- ``warmup_s``: in a fresh process with an empty Triton cache, the wall seconds of the first
  forward+backward at a new (D, W, dtype) key (B4 T4096 D1536 W3 fp16, silu), of the same
  call again, of a new T in the same size bucket (T4000), of one in another bucket (B1
  T2731), and of a second new key (B4 T4096 D1024 W4 bf16: what a new key costs once the
  process has paid its one-time costs, the package's loading and checking of fla among
  them), for the package, for each cconv idea given with --idea (its dense ``cconv_fwd`` /
  ``cconv_bwd`` under a bare autograd function: what the package would do once that idea
  is vendored) and for fla, each in its own process. --warmup-only measures this part
  alone. A warmup process running past WARMUP_TIMEOUT_S is stopped and recorded as such,
  and the report is written after the host part and after each warmup process, so a run
  stopped from outside keeps what it measured.
Needs a CUDA GPU and fla; exits 2 without a GPU or when --out / --profile cannot be written
(checked before any GPU work).
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


DECODE_N = (1, 16, 64)
WARMUP_TIMEOUT_S = 300.0
# name: (B, T, D, W, x dtype), run in this order in one process
WARMUP_CALLS = {"first": (4, 4096, 1536, 3, "float16"), "again": (4, 4096, 1536, 3, "float16"),
                "new_t": (4, 4000, 1536, 3, "float16"), "new_bucket": (1, 2731, 1536, 3, "float16"),
                "new_key": (4, 4096, 1024, 4, "bfloat16")}  # fmt: skip
_WARMUP_SRC = """
import json, sys, time, torch
which = sys.argv[1]
if which == "kernel_fun":
    from kernel_fun.cconv import causal_conv1d as conv
elif which.startswith("idea:"):
    import importlib
    import ladder
    k = importlib.import_module(f"ladder.kernels.cconv.ideas.i{which[5:]}.kernel")

    class _Conv(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return k.cconv_fwd(x, w)

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            return k.cconv_bwd(x, w, dy)

    conv = lambda x, w, activation: _Conv.apply(x, w)
else:
    from kernel_fun._common import compat
    conv = compat.fla_causal_conv1d()
out = {}
for name, (B, T, D, W, dt) in json.loads(sys.argv[2]).items():
    w = torch.randn(D, W, device="cuda", requires_grad=True)
    x = torch.randn(B, T, D, device="cuda", dtype=getattr(torch, dt), requires_grad=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    y = conv(x, w, activation="silu")
    y = y[0] if isinstance(y, tuple) else y
    y.sum().backward()
    torch.cuda.synchronize()
    out[name] = time.perf_counter() - t0
print(json.dumps(out))
"""


def _wall_time_us(fns: dict, *, calls: int, rounds: int) -> dict[str, float]:
    """Wall microseconds per call of each callable: ``rounds`` blocks per name, interleaved
    and alternating in order, each ``calls`` back-to-back calls then a synchronize, timed
    together (host and device). Returns {name: median over blocks of block time / calls}."""
    import time

    import torch

    from ladder.timing import percentile

    per_call: dict[str, list[float]] = {n: [] for n in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for k in range(calls):
                fns[name](k)
            torch.cuda.synchronize()
            per_call[name].append((time.perf_counter() - t0) * 1e6 / calls)
    return {n: percentile(v, 50) for n, v in per_call.items()}


def _decode(n: int) -> dict:
    import kernel_fun.cconv as kc
    import torch
    from kernel_fun._common import compat

    fla_update = compat.fla_original("causal_conv1d_update")
    dev = torch.device("cuda")
    D, W = 2048, 4
    x = torch.randn(n, 1, D, device=dev, dtype=torch.bfloat16)
    w = torch.randn(D, W, device=dev, dtype=torch.bfloat16)
    caches = {k: torch.zeros(n, D, W, device=dev, dtype=torch.bfloat16) for k in ("kf", "fla")}
    return {
        "torch_op": lambda _k: x.mul(1.0),
        "kernel_fun": lambda _k: kc.causal_conv1d_update(
            x, caches["kf"], weight=w, activation="silu"
        ),
        "fla": lambda _k: fla_update(x, caches["fla"], weight=w, activation="silu"),
    }


def _warmup(ideas: list[str], save, timeout_s: float = WARMUP_TIMEOUT_S) -> dict:
    """report["warmup_s"] for the package, each idea and fla, each in a fresh process with an
    empty Triton cache; ``save(part)`` after each (a run stopped later keeps what it has). A
    process past ``timeout_s`` is stopped and recorded as such."""
    import os
    import subprocess
    import tempfile

    out: dict = {}
    for which in ("kernel_fun", *(f"idea:{i}" for i in ideas), "fla"):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TRITON_CACHE_DIR": cache}
            try:
                run = subprocess.run(
                    [sys.executable, "-c", _WARMUP_SRC, which, json.dumps(WARMUP_CALLS)],
                    env=env, capture_output=True, text=True, timeout=timeout_s,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                run = None
        if run is None:
            out[which] = {"error": f"stopped after {timeout_s:.0f} s"}
        elif run.returncode != 0:
            out[which] = {"error": run.stderr[-2000:]}
        else:
            out[which] = json.loads(run.stdout.strip().splitlines()[-1])
        print("warmup", which, out[which], flush=True)
        save(out)
    return out


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


def _host_parts(report: dict) -> dict:
    """Fill report["us"] and report["decode_us"]; returns the small shape's callables."""
    import torch

    from ladder import timing

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
    report["decode_us"] = {}
    for n in DECODE_N:
        fns = _decode(n)
        for f in fns.values():
            for k in range(3):
                f(k)
        torch.cuda.synchronize()
        us = _wall_time_us(fns, calls=CALLS * 5, rounds=ROUNDS)
        report["decode_us"][f"n{n}"] = us
        print(f"decode n{n}", json.dumps({k: round(v, 1) for k, v in us.items()}))
    return small


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON report to write")
    ap.add_argument("--profile", type=Path, help="cProfile report of the package call")
    ap.add_argument("--warmup-only", action="store_true", help="only the warmup part")
    ap.add_argument("--idea", action="append", default=[],
                    help="also the warmup of this cconv idea's dense entry points (repeatable)")  # fmt: skip
    args = ap.parse_args(argv)
    from tools.outpath import out_problem, write_report

    for path, example, option in (
        (args.out, "cconv-host.json", "--out"),
        (args.profile, "cconv-host.txt", "--profile"),
    ):
        problem = None if path is None else out_problem(path, example, option)
        if problem is not None:
            print(f"cconv_host: {problem}", file=sys.stderr)
            return 2
    import torch

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
    small = None
    if not args.warmup_only:
        small = _host_parts(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(warm: dict | None = None) -> None:
        if warm is not None:
            report["warmup_s"] = warm
        write_report(args.out, json.dumps(report, indent=1) + "\n")

    save()  # the host part, before the warmup's processes
    _warmup(args.idea, save)
    if args.profile is not None and small is not None:
        write_report(args.profile, _profile(small))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
