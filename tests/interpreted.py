"""Tests of kernels on Triton's CPU interpreter, shared by the test modules that run them.

TRITON_INTERPRET is read when triton is imported, so each such test runs a script in a fresh
Python (`run_interpreted`). Scripts that call fla 0.6.0's own kernels there first call
`fla_on_the_interpreter()`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run_interpreted(script: str, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run `script` (python -c, with `args`) under TRITON_INTERPRET=1 from the repository root,
    the repository and the package's sources importable, `env` added to the environment. It
    must print a JSON document as its last line of stdout, which is returned. Fails the test
    (AssertionError with the script's stderr) when it exits non-zero."""
    full = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'package' / 'src'}",
        **(env or {}),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=REPO, env=full, capture_output=True,
        text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fla_on_the_interpreter(trim: bool = True) -> None:
    """Make fla 0.6.0's kernels run on the interpreter; call it in the script, after importing
    the fla modules whose kernels it runs (every loaded fla module is adjusted):

    - trim: each autotuned kernel keeps one configuration (`trim_fla_autotune(1)`), so it
      launches without benchmarking, which needs a GPU;
    - fla's kernels call `.to()` on loop indices, which the interpreter leaves Python ints:
      each fla module gets a `range` that yields scalar tensors, as the compiled loop has;
    - fla's `tl.gather` path and its bf16x3 products are compiled-only: its modules take the
      path without gather and fp32 products instead.
    """
    import builtins

    import triton.language as tl

    if trim:
        from kernel_fun._testing import trim_fla_autotune

        trim_fla_autotune(1)

    def _range(*bounds):
        for i in builtins.range(*(int(b) for b in bounds)):
            yield tl.full([], i, tl.int32)

    for name, mod in list(sys.modules.items()):
        if not (name.startswith("fla.") and mod is not None and hasattr(mod, "triton")):
            continue
        mod.range = _range
        if hasattr(mod, "IS_GATHER_SUPPORTED"):
            mod.IS_GATHER_SUPPORTED = False
        if hasattr(mod, "SAFE_GATE_DOT_PRECISION"):
            mod.SAFE_GATE_DOT_PRECISION = tl.constexpr("ieee")


def without_cuda_device() -> None:
    """Make `torch.cuda.device(...)` a no-op context, for chains that enter it around their
    launches: the interpreter has no CUDA device to switch to."""
    import contextlib

    import torch

    torch.cuda.device = lambda *args: contextlib.nullcontext()


def compiled_min_semantics() -> None:
    """Give the interpreter compiled Triton's `tl.minimum` without `propagate_nan`: PTX
    `min.f32` returns the other operand for a NaN, where the interpreter's `np.minimum` keeps
    the NaN. Call it before any kernel runs."""
    import numpy as np
    import triton.runtime.interpreter as interp

    interp.InterpreterBuilder.create_minnumf = lambda self, a, b: self.binary_op(a, b, np.fmin)


def chunk_local_cumsum(step: Any, lens: list[int], packed: bool) -> Any:
    """The cumulative sum of ``step`` [B, T, ...] along T within each 64-token chunk of each
    sequence (``lens``: the sequences' lengths when ``packed``, one batch row's length
    otherwise): the chunk-local gate cumsum the kda stages read, from per-token gate steps."""
    import torch

    out = torch.empty_like(step)
    T = step.shape[1]
    starts = [0, *torch.tensor(lens).cumsum(0).tolist()[:-1]] if packed else [0]
    bounds = [(s, s + n) for s, n in zip(starts, lens)] if packed else [(0, T)]
    for b0, b1 in bounds:
        for c in range(b0, b1, 64):
            out[:, c : min(c + 64, b1)] = step[:, c : min(c + 64, b1)].cumsum(1)
    return out


def kda_chain_inputs(
    B: int, H: int, HV: int, lens: list[int], K: int, V: int, state: bool, lower_bound: Any
) -> tuple[tuple, Any, Any]:
    """Seeded fp32 inputs of a kda chain's forward and backward on the CPU: (the 14 arguments of
    the family's ``kda_fwd``, do, dht). ``lens`` are the sequences' lengths, packed into one
    row with cu_seqlens when B == 1 and there are several, else one length per row; ``state``
    adds an initial state, asks for the final one and gives it a gradient; ``lower_bound``
    (None or a float) turns on the bounded gate (``safe_gate``)."""
    import torch

    torch.manual_seed(0)
    packed = B == 1 and len(lens) > 1
    T = sum(lens) if packed else lens[0]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()]) if packed else None
    N = len(lens) if packed else B
    r = torch.randn
    args = (r(B, T, H, K), r(B, T, H, K), r(B, T, HV, V), r(B, T, HV, K), r(B, T, HV),
            r(HV) * 0.5, r(HV * K) * 0.5, K**-0.5, r(N, HV, V, K) if state else None, state, cu,
            lower_bound, lower_bound is not None, False)  # fmt: skip
    return args, r(B, T, HV, V), r(N, HV, V, K) if state else None


def count_launches(calls: Any, kernels: dict[str, Any] | None = None) -> None:
    """Count launches into the Counter ``calls``: every fla autotuner loaded so far (under the
    tuned kernel's name, one per launch through the autotuner) and each of ``kernels``
    (label -> a Triton kernel, under its label). Wraps each one's ``run`` in place; call it in
    the script after the modules that hold them are imported."""
    from kernel_fun._testing import autotuners

    mods = [m for k, m in list(sys.modules.items()) if k.startswith("fla.") and m is not None]
    wrapped = {name.rsplit(".", 1)[-1]: t for name, t in autotuners(mods).items()}
    wrapped.update(kernels or {})
    for label, obj in wrapped.items():

        def run(*a: Any, _run: Any = obj.run, _label: str = label, **kw: Any) -> Any:
            calls[_label] += 1
            return _run(*a, **kw)

        obj.run = run
