"""The cconv family contract: depthwise causal conv1d (W <= 4) followed by silu.

    y[b, t, d] = silu( sum_k w[d, k] * x[b, t - (W-1) + k, d] )      (x = 0 left of t = 0)

This is fla's tap convention (``causal_conv1d_fwd_kernel`` multiplies x[t + i] by
w[:, i + W - 1] for i in -(W-1)..0): the last tap multiplies the current row.

Entry points every idea's ``kernel.py`` exports:

    cconv_fwd(x, w) -> y
    cconv_bwd(x, w, dy) -> (dx, dw)

x, dy: [B, T, D] bfloat16/float16, any strides; w: [D, W] any float dtype, W <= 4.
y, dx: [B, T, D] contiguous in x's dtype; dw: [D, W] in w's dtype.

The ladder reaches all of this through the family protocol (docs/DESIGN.md "The family
contract"): inputs are (x, w, dy), the outputs in TOLERANCES order are (y, dx, dw), and
``run`` / ``timed`` call an idea's pair. Importable without a GPU; fla is imported only
inside the baseline functions.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

__all__ = [
    "BASELINE",
    "ENTRY_POINTS",
    "ENTRY_POINT_ARGS",
    "ERR_RATIO_MAX",
    "FAMILY",
    "INTERPRET_KNOBS",
    "KNOB_RULES",
    "SHAPES",
    "TARGET_DEVICE",
    "TOLERANCES",
    "VENDOR",
    "Shape",
    "autograd_apply",
    "baseline_autograd",
    "baseline_bwd",
    "baseline_fwd",
    "baseline_retune",
    "contract_problems",
    "make_inputs",
    "min_bytes",
    "reference",
    "run",
    "run_pair",
    "strided",
    "timed",
    "timed_pair",
]

FAMILY = "cconv"
ENTRY_POINTS = ("cconv_fwd", "cconv_bwd")
# Argument names of the entry points (what `ladder new` writes into a scaffold).
ENTRY_POINT_ARGS = {"cconv_fwd": ("x", "w"), "cconv_bwd": ("x", "w", "dy")}
TARGET_DEVICE = "H200"

# Relative L2 error bounds per output, and how much worse than fla's own error a candidate
# may be (err <= ERR_RATIO_MAX * baseline_err + 1e-6).
TOLERANCES = {"y": 5e-3, "dx": 8e-3, "dw": 2e-2}
ERR_RATIO_MAX = 1.10

# Knob values for Triton's CPU interpreter (`ladder check --interpret`): it has no inline
# PTX and its autotuner needs a GPU driver. Applied to the knobs an idea reads, unless given
# with --knob.
INTERPRET_KNOBS = {"CCONV_FAST_SIGMOID": "0", "CCONV_AUTOTUNE": "0"}

# Values the family's knobs may take, checked by the ladder (--knob and the environment)
# before an idea is imported: outside them a kernel may not just be slow but wrong (in
# 001-strip-onepass a G other than 4 or 8 writes rows outside its segment). {knob: (what is
# allowed, test)}; a knob not listed takes any value its conversion accepts.
KNOB_RULES = {
    "CCONV_FIXED_G": ("4 or 8", lambda v: v in (4, 8)),
    "CCONV_FIXED_WARPS": ("a power of two from 1 to 16", lambda v: v in (1, 2, 4, 8, 16)),
    "CCONV_TARGET_PROGRAMS": ("a positive integer", lambda v: v > 0),
    "CCONV_SMALL_WORK": ("0 or more", lambda v: v >= 0),
}

# The one declared place mapping idea modules (file stem in the idea folder) to module names
# in package/src/kernel_fun/cconv/_kernels/. An idea not listed cannot be vendored.
VENDOR = {"package": "kernel_fun.cconv", "modules": {"001-strip-onepass": {"kernel": "strip"}}}


@dataclass(frozen=True)
class Shape:
    """A named problem: x [B, T, D] in x_dtype, w [D, W] in w_dtype (torch dtype names)."""

    name: str
    B: int
    T: int
    D: int
    W: int
    x_dtype: str = "bfloat16"
    w_dtype: str = "float32"


SHAPES: dict[str, list[Shape]] = {
    # The production call: a KDA/DeltaNet short conv at training size.
    "prod": [Shape("prod", 16, 8192, 2048, 4)],
    "sweep": [
        Shape("d1024", 16, 8192, 1024, 4),
        Shape("d4096", 16, 8192, 4096, 4),
        Shape("b4-t2048", 4, 2048, 2048, 4),
        Shape("b1-t4096-d768", 1, 4096, 768, 4),
        Shape("ragged-t1000", 16, 1000, 2048, 4),
        Shape("w2", 16, 8192, 2048, 2),
        Shape("w3", 16, 8192, 2048, 3),
    ],
    # Tiny shapes for Triton's CPU interpreter: ragged T and D, every W, both x dtypes,
    # low-precision weights too.
    "small": [
        Shape("s-b2-t37-d40-w4", 2, 37, 40, 4, "bfloat16", "float32"),
        Shape("s-b1-t5-d17-w2", 1, 5, 17, 2, "float16", "float32"),
        Shape("s-b3-t64-d64-w3", 3, 64, 64, 3, "float16", "float16"),
        Shape("s-b2-t19-d24-w1", 2, 19, 24, 1, "bfloat16", "bfloat16"),
    ],
}


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ValueError(f"{name!r} is not a torch floating dtype name")
    return dt


def make_inputs(
    shape: Shape, device: torch.device | str, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fresh random inputs (x, w, dy) for ``shape`` on ``device``, drawn from ``seed``.

    x, dy: [B, T, D] standard normal in shape.x_dtype (contiguous); w: [D, W] normal with
    std W**-0.5 in shape.w_dtype. Never zeros.
    """
    dev = torch.device(device)
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(seed))
    xdt, wdt = _dtype(shape.x_dtype), _dtype(shape.w_dtype)
    size = (shape.B, shape.T, shape.D)
    x = torch.randn(size, generator=gen, device=dev, dtype=torch.float32).to(xdt)
    w = torch.randn((shape.D, shape.W), generator=gen, device=dev, dtype=torch.float32)
    w = (w * shape.W**-0.5).to(wdt)
    dy = torch.randn(size, generator=gen, device=dev, dtype=torch.float32).to(xdt)
    return x, w, dy


def reference(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fp64 oracle: (y, dx, dw) in float64 on x's device.

    x, dy: [B, T, D] any float dtype and strides; w: [D, W]. With z = conv(x),
    g = dy * silu'(z):  y = silu(z),  dx[t] = sum_k w[k] g[t + (W-1) - k],
    dw[d, k] = sum_{b,t} g[b, t, d] x[b, t - (W-1) + k, d]. A loop over the W taps on
    shifted slices keeps memory at a few [B, T, D] float64 tensors (no conv1d im2col).
    Raises ValueError on mismatched shapes.
    """
    if x.dim() != 3 or w.dim() != 2 or w.shape[0] != x.shape[2] or dy.shape != x.shape:
        raise ValueError(
            f"reference wants x [B,T,D], w [D,W], dy like x; got {tuple(x.shape)}, "
            f"{tuple(w.shape)}, {tuple(dy.shape)}"
        )
    T, W = x.shape[1], w.shape[1]
    xd = x.to(torch.float64)
    wd = w.to(device=x.device, dtype=torch.float64)
    z = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for j in range(min(W, T)):  # x[t - j] meets tap k = W-1-j
        z[:, j:, :].addcmul_(xd[:, : T - j, :], wd[:, W - 1 - j])
    s = torch.sigmoid(z)
    y = z * s
    # g = dy * silu'(z) = dy * s * (1 + z (1 - s)), built in place in z.
    z.mul_(1.0 - s).add_(1.0).mul_(s).mul_(dy.to(torch.float64))
    g = z
    del s
    dx = torch.zeros_like(g)
    dw = torch.zeros((w.shape[0], W), dtype=torch.float64, device=x.device)
    for j in range(min(W, T)):
        k = W - 1 - j
        dx[:, : T - j, :].addcmul_(g[:, j:, :], wd[:, k])
        dw[:, k] = torch.einsum("btd,btd->d", g[:, j:, :], xd[:, : T - j, :])
    return y, dx, dw


def _ops():
    from fla.modules.causal_conv1d import ops

    return ops


def baseline_retune() -> list[str]:
    """Make fla's conv kernels autotune again at their next call, i.e. at the next shape.

    fla keys the autotuning of its conv kernels on (D, W) alone, and with its default
    FLA_CACHE_RESULTS=1 Triton keeps each pick on disk: without this, fla would be timed with
    the configuration tuned at whichever shape first ran with that D and W on the machine,
    maybe in another process, maybe under load. On the H200 fla's prod forward at D2048
    timed 0.642 ms with a pick the GPU tests had made at small T, and 0.386 ms tuned at prod
    (docs/results/prodtime-h200-20261129-fla-disk-cached-picks.json against
    docs/results/prodtime-h200-20261129.json).
    For every autotuner in fla's conv module this turns the disk cache off and forgets the
    picks. Returns the names of the kernels reset (empty when fla has none there).
    """
    from triton.runtime.autotuner import Autotuner

    reset = []
    for name, obj in sorted(vars(_ops()).items()):
        seen = 0
        while obj is not None and seen < 8:  # heuristics / autotune / jit wrappers
            if isinstance(obj, Autotuner):
                obj.cache_results = False
                obj.cache.clear()
                reset.append(name)
                break
            obj, seen = getattr(obj, "fn", None), seen + 1
    return reset


def _device_ctx(t: torch.Tensor):
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def baseline_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """fla's forward kernel, called as fla's CausalConv1dFunction.forward calls it
    (x as given, weight contiguous, silu, no bias/residual/state). Returns y [B, T, D]."""
    ops = _ops()
    layout = getattr(ops, "_has_non_standard_layout", None)
    extra = {"layout_fallback": layout(x=x)} if layout is not None else {}
    y, _ = ops.causal_conv1d_fwd(
        x=x,
        weight=w.contiguous(),
        bias=None,
        residual=None,
        initial_state=None,
        output_final_state=False,
        activation="silu",
        cu_seqlens=None,
        cu_seqlens_cpu=None,
        chunk_indices=None,
        **extra,
    )
    return y


def baseline_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """fla's backward kernel, called as CausalConv1dFunction.backward calls it (on the saved
    x and contiguous weight, dy as given). Returns (dx, dw), dw in w's dtype."""
    ops = _ops()
    layout = getattr(ops, "_has_non_standard_layout", None)
    extra = {"layout_fallback": layout(x=x)} if layout is not None else {}
    with _device_ctx(x):
        dx, dw, _db, _dr, _dh0 = ops.causal_conv1d_bwd(
            x=x,
            dy=dy,
            dht=None,
            weight=w.contiguous(),
            bias=None,
            residual=None,
            initial_state=None,
            activation="silu",
            cu_seqlens=None,
            cu_seqlens_cpu=None,
            chunk_indices=None,
            **extra,
        )
    return dx, dw


class _EntryPointsFunction(torch.autograd.Function):
    """Autograd over an idea's (fwd, bwd) pair: saves x and w, calls bwd(x, w, dy)."""

    @staticmethod
    def forward(ctx, x, w, fwd, bwd):  # type: ignore[override]
        ctx.save_for_backward(x, w)
        ctx.bwd = bwd
        return fwd(x, w)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        x, w = ctx.saved_tensors
        dx, dw = ctx.bwd(x, w, dy)
        return dx, dw, None, None


def autograd_apply(fwd, bwd, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = fwd(x, w) with a backward of bwd(x, w, dy) -> (dx, dw), through autograd."""
    return _EntryPointsFunction.apply(x, w, fwd, bwd)


def baseline_autograd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """fla's public ``causal_conv1d(x, w, activation="silu")[0]`` (its autograd Function)."""
    from fla.modules.causal_conv1d import causal_conv1d

    return causal_conv1d(x, w, activation="silu")[0]


def _esize(name: str) -> int:
    return torch.empty((), dtype=_dtype(name)).element_size()


def min_bytes(shape: Shape, direction: str) -> int:
    """The fewest HBM bytes a direction must move: fwd reads x and w and writes y; bwd reads
    x, dy and w and writes dx and dw. Element sizes from the shape's dtypes.
    Raises ValueError for a direction other than "fwd" / "bwd"."""
    n = shape.B * shape.T * shape.D
    xs, ws = _esize(shape.x_dtype), _esize(shape.w_dtype)
    nw = shape.D * shape.W
    if direction == "fwd":
        return 2 * n * xs + nw * ws
    if direction == "bwd":
        return 3 * n * xs + 2 * nw * ws
    raise ValueError(f"direction must be 'fwd' or 'bwd', got {direction!r}")


# fla's kernels under the entry point names; ideas/000-fla delegates to them.
BASELINE = SimpleNamespace(cconv_fwd=baseline_fwd, cconv_bwd=baseline_bwd)

Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Poison = Callable[[list[tuple[tuple[int, ...], torch.dtype]]], None]


def run_pair(fwd: Callable, bwd: Callable, inputs: Inputs, poison: Poison) -> tuple:
    """The correctness call of an (x, w) -> y, (x, w, dy) -> (dx, dw) pair: poison y's size,
    y = fwd(x, w), poison dx's and dw's sizes, dx, dw = bwd(x, w, dy). Returns (y, dx, dw)."""
    x, w, dy = inputs
    poison([(tuple(x.shape), x.dtype)])
    y = fwd(x, w)
    poison([(tuple(x.shape), x.dtype), (tuple(w.shape), w.dtype)])
    dx, dw = bwd(x, w, dy)
    return y, dx, dw


def run(impl: Any, inputs: Inputs, poison: Poison) -> tuple:
    """Protocol ``run``: impl's cconv_fwd then cconv_bwd once; returns (y, dx, dw)."""
    return run_pair(impl.cconv_fwd, impl.cconv_bwd, inputs, poison)


def timed_pair(
    fwd: Callable, bwd: Callable, apply: Callable, inputs: Inputs
) -> dict[str, Callable[[], object]]:
    """Zero-argument callables {"fwd", "bwd", "fwdbwd"} for a pair: fwd(x, w), bwd(x, w, dy),
    and y = apply(x, w) on leaves requiring grad followed by torch.autograd.grad(y, (x, w),
    dy). The leaves are made here, outside the timed calls."""
    x, w, dy = inputs
    xl, wl = x.detach().requires_grad_(True), w.detach().requires_grad_(True)

    def fwdbwd() -> object:
        y = apply(xl, wl)
        return torch.autograd.grad(y, (xl, wl), dy)

    return {"fwd": lambda: fwd(x, w), "bwd": lambda: bwd(x, w, dy), "fwdbwd": fwdbwd}


def timed(impl: Any, inputs: Inputs) -> dict[str, Callable[[], object]]:
    """Protocol ``timed``: impl's pair; fwd+bwd goes through fla's public autograd function
    for BASELINE and through :func:`autograd_apply` of the pair for an idea."""
    fwd, bwd = impl.cconv_fwd, impl.cconv_bwd
    if impl is BASELINE:
        apply = baseline_autograd
    else:

        def apply(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return autograd_apply(fwd, bwd, x, w)

    return timed_pair(fwd, bwd, apply, inputs)


def contract_problems(outs: tuple, inputs: Inputs) -> list[str]:
    """Layout findings: y and dx are [B, T, D] contiguous in x's dtype, dw is w's shape and
    dtype, all on x's device. One line each; empty when all hold."""
    x, w, _ = inputs
    problems = []
    for name, out, like in zip(TOLERANCES, outs, (x, x, w), strict=True):
        if tuple(out.shape) != tuple(like.shape) or out.dtype != like.dtype:
            problems.append(
                f"{name}: got {tuple(out.shape)} {out.dtype}, want {tuple(like.shape)} {like.dtype}"
            )
        elif like is x and not out.is_contiguous():
            problems.append(f"{name}: not contiguous (strides {tuple(out.stride())})")
        if out.device != x.device:
            problems.append(f"{name}: on {out.device}, want {x.device}")
    return problems


def strided(inputs: Inputs) -> Inputs:
    """Copies of (x, w, dy) with the layouts models pass: x a channel slice of a wider
    [B, T, 3D] activation (row stride 3D; the rest NaN, so reading outside the slice shows),
    dy stored time-minor ([B, D, T] transposed)."""
    x, w, dy = inputs
    B, T, D = x.shape
    wide = torch.full((B, T, 3 * D), math.nan, dtype=x.dtype, device=x.device)
    xs = wide[:, :, D : 2 * D]
    xs.copy_(x)
    dys = torch.empty((B, D, T), dtype=dy.dtype, device=dy.device).transpose(1, 2)
    dys.copy_(dy)
    return xs, w, dys
