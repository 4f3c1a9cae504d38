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
    "CASES",
    "PROMOTE_CASES",
    "RANK_SHAPES",
    "CASE_ENTRY_POINTS",
    "CaseShape",
    "case_lengths",
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
    "CCONV_SMALL_FWD_G": ("4 or 8", lambda v: v in (4, 8)),
    "CCONV_SMALL_BWD_G": ("4 or 8", lambda v: v in (4, 8)),
    "CCONV_SMALL_FWD_WARPS": ("a power of two from 1 to 16", lambda v: v in (1, 2, 4, 8, 16)),
    "CCONV_SMALL_BWD_WARPS": ("a power of two from 1 to 16", lambda v: v in (1, 2, 4, 8, 16)),
    "CCONV_SMALL_FWD_PROGRAMS": ("0 or more", lambda v: v >= 0),
    "CCONV_FWD_STAGES": ("1 to 8", lambda v: 1 <= v <= 8),
    "CCONV_BWD_STAGES": ("1 to 8", lambda v: 1 <= v <= 8),
    "CCONV_CASE_BWD_STAGES": ("1 to 8", lambda v: 1 <= v <= 8),
    "CCONV_STATE_BWD_STAGES": ("1 to 8", lambda v: 1 <= v <= 8),
    "CCONV_PACKED_BWD_STAGES": ("1 to 8", lambda v: 1 <= v <= 8),
    "CCONV_SEQ_LOOKAHEAD": ("a power of two from 2 to 64", lambda v: v in (2, 4, 8, 16, 32, 64)),
}

# The one declared place mapping idea modules (file stem in the idea folder) to module names
# in package/src/kernel_fun/cconv/_kernels/. An idea not listed cannot be vendored. A literal:
# the vendor reads it from this file's source. kernel_fun.cconv.ops takes the box kernels
# from the vendored winner's module when it carries every case (ops.box_modules()), else
# from 004 (strip4), 003 (strip3) or 002 (strip2), and 001's dense pair otherwise.
VENDOR = {
    "package": "kernel_fun.cconv",
    "modules": {
        "001-strip-onepass": {"kernel": "strip"},
        "002-strip-box": {"kernel": "strip2"},
        "003-strip-merge": {"kernel": "strip3"},  # imports 002's module (strip2)
        "004-exact-sigmoid": {"kernel": "strip4"},  # imports 002's module (strip2)
        "005-small-call-grid": {"kernel": "strip5"},  # imports 002's and 004's
        "006-case-loop-fwd": {"kernel": "strip6"},  # imports 002's and 004's
        "007-case-loop-bwd": {"kernel": "strip7"},  # imports 002's, 004's and 006's
        "008-case-loop-small-grid": {"kernel": "strip8"},  # imports 004's to 007's
        "009-case-bwd-kahan-dw": {"kernel": "strip9"},  # imports 002's, 007's and 008's
        # imports 004's, 005's and 009's (and through them 002's, 006's to 008's)
        "010-launch-cache": {"kernel": "strip10", "launch": "launch10"},
        # imports 002's, 004's, 006's, 007's, 009's and 010's (and through them 005's, 008's)
        "011-fixed-launch": {"kernel": "strip11"},
        # imports 002's, 004's, 010's and 011's (and through them 005's to 009's)
        "012-launch-plans": {"kernel": "strip12"},
        # imports 002's, 004's, 005's, 010's, 011's and 012's (and through them 006's to 009's)
        "013-small-split": {"kernel": "strip13"},
        # imports 011's and 013's (and through them 002's, 004's, 005's, 010's, 012's)
        "014-typed-front": {"kernel": "strip14"},
        # imports 004's and 010's to 014's (and through them 002's, 005's to 009's)
        "015-pipelined-loops": {"kernel": "strip15", "loops": "loops15"},
        # imports 007's and 011's to 015's (and through them 002's, 004's to 010's)
        "016-pipelined-case-bwd": {"kernel": "strip16", "loops": "loops16"},
        # imports 002's, 004's and 010's to 016's (and through them 005's to 009's)
        "017-case-stages": {"kernel": "strip17"},
        # 018-packed-pipeline is left out: its packed backward differs from 013's on the GPU
        # beyond rounding (its NOTES.md), so it must not be promoted whatever its records
    },
}


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
    std W**-0.5 in shape.w_dtype. Never zeros. A CaseShape gives (x, w, dy, opts)
    (case_make_inputs).
    """
    if isinstance(shape, CaseShape):
        return case_make_inputs(shape, device, seed)
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
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, opts: dict | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fp64 oracle: (y, dx, dw) in float64 on x's device.

    x, dy: [B, T, D] any float dtype and strides; w: [D, W]. With z = conv(x),
    g = dy * silu'(z):  y = silu(z),  dx[t] = sum_k w[k] g[t + (W-1) - k],
    dw[d, k] = sum_{b,t} g[b, t, d] x[b, t - (W-1) + k, d]. A loop over the W taps on
    shifted slices keeps memory at a few [B, T, D] float64 tensors (no conv1d im2col).
    Raises ValueError on mismatched shapes.
    """
    if opts is not None:  # a case beyond dense: see case_reference
        return case_reference(x, w, dy, opts)
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
    Raises ValueError for a direction other than "fwd" / "bwd". CaseShape: case_min_bytes."""
    if isinstance(shape, CaseShape):
        return case_min_bytes(shape, direction)
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
    """Protocol ``run``: impl's cconv_fwd then cconv_bwd once; returns (y, dx, dw).
    Case inputs (x, w, dy, opts) go through case_run."""
    if len(inputs) == 4:
        return case_run(impl, inputs, poison)
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
    for BASELINE and through :func:`autograd_apply` of the pair for an idea. Case inputs
    (x, w, dy, opts) go through case_timed."""
    if len(inputs) == 4:
        return case_timed(impl, inputs)
    fwd, bwd = impl.cconv_fwd, impl.cconv_bwd
    if impl is BASELINE:
        apply = baseline_autograd
    else:

        def apply(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return autograd_apply(fwd, bwd, x, w)

    return timed_pair(fwd, bwd, apply, inputs)


def contract_problems(outs: tuple, inputs: Inputs) -> list[str]:
    """Layout findings: y and dx are [B, T, D] contiguous in x's dtype, dw is w's shape and
    dtype, all on x's device. One line each; empty when all hold. Case inputs:
    case_contract_problems."""
    if len(inputs) == 4:
        return case_contract_problems(outs, inputs)
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
    dy stored time-minor ([B, D, T] transposed). Case inputs keep their options."""
    if len(inputs) == 4:
        return (*strided(inputs[:3]), inputs[3])
    x, w, dy = inputs
    B, T, D = x.shape
    wide = torch.full((B, T, 3 * D), math.nan, dtype=x.dtype, device=x.device)
    xs = wide[:, :, D : 2 * D]
    xs.copy_(x)
    dys = torch.empty((B, D, T), dtype=dy.dtype, device=dy.device).transpose(1, 2)
    dys.copy_(dy)
    return xs, w, dys


# ------------------------------------------------------------------------------------------
# Cases beyond dense: every argument of fla 0.6.0's causal_conv1d but backend / cp_context
# ------------------------------------------------------------------------------------------
#
# A case shape's inputs are (x, w, dy, opts), opts = {"bias", "residual", "initial_state",
# "output_final_state", "activation", "cu_seqlens", "dht"} (absent arguments None). An idea
# that declares a case other than "dense" exports, besides the dense pair,
#
#     cconv_fwd_case(x, w, opts) -> (y, final_state or None)
#     cconv_bwd_case(x, w, dy, opts) -> (dx, dw, db or None, dh0 or None)
#
# with fla's layouts (state [N, D, W]; x [1, total, D] with cu_seqlens [N+1]). The outputs
# keep the family's three names, each folded with the case's extra outputs so that one
# relative error covers them: "y" = y then the final state, "dx" = dx then dh0, "dw" = dw
# then db (flattened, concatenated, in that order). dresidual is dy itself in every
# implementation, so it is not compared. dht's slot 0 is zero in the inputs: fla 0.6.0
# drops that slot's gradient (the decode step never reads it), so a nonzero slot 0 would
# measure that omission, not the kernels.

CASES = {
    "dense": "x bf16/fp16, silu, no optional argument (the production call)",
    "bias-residual": "bias [D] before the activation, residual [B, T, D] after it (fla's order)",
    "state": "initial_state [N, D, W] in, final state out, and the gradients of both",
    "varlen": "packed sequences: x [1, total, D] with cu_seqlens [N+1]",
    "fp32": "x in float32",
}
CASE_ENTRY_POINTS = ("cconv_fwd_case", "cconv_bwd_case")
# The package ships one idea for every call of fla's causal_conv1d it takes: an idea that
# implements the dense case alone (001) is research, however fast; the winner must take
# every case, so packed batches, bias, residual, states and fp32 x reach our kernels too.
PROMOTE_CASES = tuple(CASES)


@dataclass(frozen=True)
class CaseShape:
    """A named problem of a case other than dense: x [B, T, D] in x_dtype, w [D, W] in
    w_dtype, with the optional arguments the case names. varlen: B = 1 and T tokens cut into
    lengths drawn uniformly from [min_len, max_len] by ``random.Random(seed)`` (the last one
    cut to fit), see ``case_lengths``."""

    name: str
    B: int
    T: int
    D: int
    W: int
    x_dtype: str = "bfloat16"
    w_dtype: str = "float32"
    case: str = "dense"
    activation: str = "silu"
    bias: bool = False
    residual: bool = False
    state: bool = False
    min_len: int = 0
    max_len: int = 0
    seed: int = 0


SHAPES["sweep"] += [
    CaseShape("packed-131072-d2048", 1, 131072, 2048, 4, case="varlen", min_len=1, max_len=8192),
    CaseShape(
        "prod-bias-residual", 16, 8192, 2048, 4, case="bias-residual", bias=True, residual=True
    ),  # noqa: E501
    CaseShape("prefill-state", 16, 4096, 2048, 4, case="state", state=True),
    CaseShape("fp32-x", 8, 8192, 2048, 4, "float32", case="fp32"),
    CaseShape("decode-b1-t1", 1, 1, 2048, 4, case="state", state=True),
]
# What ranks the family's ideas (ladder.records.rank_score): the geometric mean of the fwd+bwd
# ratios at these shapes, from one record that times them all. The prod call alone would
# rank an idea by the dense case only, while KDA and GatedDeltaNet training passes packed
# sequences, prefill asks for states, and small calls (short sequences, decode) are where a
# launch-bound kernel loses; the winner is what every one of those users gets.
RANK_SHAPES = (
    "prod",
    "packed-131072-d2048",
    "prod-bias-residual",
    "prefill-state",
    "b1-t4096-d768",
    "b4-t2048",
    "decode-b1-t1",
)
SHAPES["small"] += [
    CaseShape("s-bias-residual", 2, 37, 40, 4, case="bias-residual", bias=True, residual=True),
    CaseShape(
        "s-act-none", 2, 19, 24, 3, "float16", case="bias-residual", activation="none", bias=True
    ),  # noqa: E501
    CaseShape("s-state-t2", 3, 2, 24, 4, case="state", state=True),
    CaseShape("s-state", 2, 45, 40, 3, "float32", case="state", state=True),
    CaseShape("s-varlen", 1, 60, 24, 4, case="varlen", min_len=1, max_len=12, state=True),
    CaseShape("s-fp32", 2, 33, 24, 2, "float32", "bfloat16", case="fp32"),
]


def case_lengths(shape: CaseShape) -> list[int]:
    """The sequence lengths of a varlen shape (deterministic; they sum to shape.T)."""
    import random

    rng = random.Random(shape.seed)
    out: list[int] = []
    left = shape.T
    while left > 0:
        n = min(rng.randint(shape.min_len, shape.max_len), left)
        out.append(n)
        left -= n
    return out


def _case_activation(shape: CaseShape) -> str | None:
    return None if shape.activation == "none" else shape.activation


def case_make_inputs(shape: CaseShape, device: torch.device | str, seed: int) -> tuple:
    """(x, w, dy, opts) for a case shape: x, dy, residual standard normal in x_dtype; w normal
    with std W**-0.5 and bias standard normal in w_dtype; initial state and dht [N, D, W]
    normal in x_dtype (dht's slot 0 zero, see above); cu_seqlens int32 from case_lengths."""
    x, w, dy = make_inputs(Shape(shape.name, shape.B, shape.T, shape.D, shape.W,
                                 shape.x_dtype, shape.w_dtype), device, seed)  # fmt: skip
    dev = x.device
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(seed) + 1)
    xdt, wdt = x.dtype, w.dtype

    def rnd(*size, dtype):
        return torch.randn(size, generator=gen, device=dev, dtype=torch.float32).to(dtype)

    cu = None
    if shape.case == "varlen":
        lengths = case_lengths(shape)
        cu = torch.tensor([0, *itertools_accumulate(lengths)], dtype=torch.int32, device=dev)
    N = shape.B if cu is None else cu.numel() - 1
    dht = None
    if shape.state:
        dht = rnd(N, shape.D, shape.W, dtype=xdt)
        dht[..., 0] = 0
    opts = {
        "bias": rnd(shape.D, dtype=wdt) if shape.bias else None,
        "residual": rnd(shape.B, shape.T, shape.D, dtype=xdt) if shape.residual else None,
        "initial_state": rnd(N, shape.D, shape.W, dtype=xdt) if shape.state else None,
        "output_final_state": shape.state,
        "activation": _case_activation(shape),
        "cu_seqlens": cu,
        "dht": dht,
    }
    return x, w, dy, opts


def itertools_accumulate(values: list[int]) -> list[int]:
    """Running sums of ``values``."""
    import itertools

    return list(itertools.accumulate(values))


def _spans(x: torch.Tensor, cu: torch.Tensor | None) -> list[tuple[int, int, int]]:
    if cu is None:
        return [(b, 0, x.shape[1]) for b in range(x.shape[0])]
    c = [int(v) for v in cu.tolist()]
    return [(0, c[i], c[i + 1]) for i in range(len(c) - 1)]


def case_reference(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, opts: dict) -> tuple:
    """The fp64 oracle of a case: the folded (y, dx, dw) described above, on x's device.

    Per sequence, with xp = [initial state (W rows, zeros without one); x rows]:
    z[t] = sum_k w[:, k] xp[t + 1 + k] + bias, y = act(z) + residual, final = xp[L:L+W];
    g = dy act'(z); dxp[t + 1 + k] += w[:, k] g[t] plus dht on xp[L:L+W]; dx = dxp[W:],
    dh0 = dxp[:W]; dw[:, k] = sum_t g[t] xp[t + 1 + k]; db = sum_t g[t]."""
    f64 = torch.float64
    W = w.shape[1]
    wd = w.to(f64)
    bias, res, h0 = opts["bias"], opts["residual"], opts["initial_state"]
    dht, act = opts["dht"], opts["activation"]
    y = torch.empty(x.shape, dtype=f64, device=x.device)
    dx = torch.empty(x.shape, dtype=f64, device=x.device)
    dw = torch.zeros(w.shape, dtype=f64, device=x.device)
    db = torch.zeros(w.shape[0], dtype=f64, device=x.device)
    finals, dh0s = [], []
    for n, (b, s, e) in enumerate(_spans(x, opts["cu_seqlens"])):
        L = e - s
        pre = h0[n].T.to(f64) if h0 is not None else x.new_zeros((W, x.shape[2]), dtype=f64)
        xp = torch.cat([pre, x[b, s:e].to(f64)], 0)
        z = torch.zeros((L, x.shape[2]), dtype=f64, device=x.device)
        for k in range(W):
            z.addcmul_(xp[1 + k : 1 + k + L], wd[:, k])
        if bias is not None:
            z += bias.to(f64)
        if act is None:
            yv, g = z, dy[b, s:e].to(f64)
        else:
            sg = torch.sigmoid(z)
            yv = z * sg
            g = dy[b, s:e].to(f64) * sg * (1 + z * (1 - sg))
            del sg
        if res is not None:
            yv = yv + res[b, s:e].to(f64)
        y[b, s:e] = yv
        dxp = torch.zeros_like(xp)
        for k in range(W):
            dxp[1 + k : 1 + k + L].addcmul_(g, wd[:, k])
            dw[:, k] += (g * xp[1 + k : 1 + k + L]).sum(0)
        db += g.sum(0)
        if dht is not None:
            dxp[L : L + W] += dht[n].T.to(f64)
        dx[b, s:e] = dxp[W:]
        dh0s.append(dxp[:W].T)
        finals.append(xp[L : L + W].T)
    y_out = (
        torch.cat([y.flatten(), torch.stack(finals).flatten()]) if opts["output_final_state"] else y
    )  # noqa: E501
    dx_out = torch.cat([dx.flatten(), torch.stack(dh0s).flatten()]) if h0 is not None else dx
    dw_out = torch.cat([dw.flatten(), db]) if bias is not None else dw
    return y_out, dx_out, dw_out


def _fold(y, final, dx, dw, db, dh0) -> tuple:
    """(y, dx, dw) folded with the case's extra outputs (module comment above)."""
    if final is not None:
        y = torch.cat([y.flatten(), final.flatten()])
    if dh0 is not None:
        dx = torch.cat([dx.flatten(), dh0.flatten()])
    if db is not None:
        dw = torch.cat([dw.flatten(), db.flatten()])
    return y, dx, dw


def _fla_kwargs(x: torch.Tensor, opts: dict) -> dict:
    ops = _ops()
    layout = getattr(ops, "_has_non_standard_layout", None)
    extra = {"layout_fallback": layout(x=x)} if layout is not None else {}
    return {"cu_seqlens": opts["cu_seqlens"], "cu_seqlens_cpu": None, "chunk_indices": None,
            **extra}  # fmt: skip


def baseline_fwd_case(x: torch.Tensor, w: torch.Tensor, opts: dict) -> tuple:
    """fla's forward for a case, called as CausalConv1dFunction.forward calls it:
    (y, final_state or None)."""
    with _device_ctx(x):
        return _ops().causal_conv1d_fwd(
            x=x, weight=w.contiguous(), bias=opts["bias"], residual=opts["residual"],
            initial_state=opts["initial_state"], output_final_state=opts["output_final_state"],
            activation=opts["activation"], **_fla_kwargs(x, opts),
        )  # fmt: skip


def baseline_bwd_case(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, opts: dict) -> tuple:
    """fla's backward for a case, as CausalConv1dFunction.backward calls it:
    (dx, dw, db or None, dh0 or None)."""
    with _device_ctx(x):
        dx, dw, db, _dr, dh0 = _ops().causal_conv1d_bwd(
            x=x, dy=dy, dht=opts["dht"], weight=w.contiguous(), bias=opts["bias"],
            residual=opts["residual"], initial_state=opts["initial_state"],
            activation=opts["activation"], **_fla_kwargs(x, opts),
        )  # fmt: skip
    return dx, dw, db, dh0


BASELINE.cconv_fwd_case = baseline_fwd_case
BASELINE.cconv_bwd_case = baseline_bwd_case


def _case_impl(impl: Any) -> tuple[Callable, Callable]:
    fwd = getattr(impl, "cconv_fwd_case", None)
    bwd = getattr(impl, "cconv_bwd_case", None)
    if fwd is None or bwd is None:
        raise AttributeError(
            f"{getattr(impl, '__name__', impl)} declares a case beyond dense but lacks "
            f"{' / '.join(CASE_ENTRY_POINTS)} (see ladder/kernels/cconv/family.py)"
        )
    return fwd, bwd


def case_run(impl: Any, inputs: tuple, poison: Poison) -> tuple:
    """``run`` for a case: impl's case pair once; returns the folded (y, dx, dw)."""
    x, w, dy, opts = inputs
    fwd, bwd = _case_impl(impl)
    poison([(tuple(x.shape), x.dtype)])
    y, final = fwd(x, w, opts)
    poison([(tuple(x.shape), x.dtype), (tuple(w.shape), w.dtype)])
    dx, dw, db, dh0 = bwd(x, w, dy, opts)
    return _fold(y, final, dx, dw, db, dh0)


class _CaseFunction(torch.autograd.Function):
    """Autograd over an idea's case pair: leaves x, w, bias, residual, initial state."""

    @staticmethod
    def forward(ctx, x, w, bias, res, h0, opts, fwd, bwd):  # type: ignore[override]
        o = {**opts, "bias": bias, "residual": res, "initial_state": h0}
        ctx.save_for_backward(x, w)
        ctx.o, ctx.bwd = o, bwd
        return fwd(x, w, o)

    @staticmethod
    def backward(ctx, dy, dht):  # type: ignore[override]
        x, w = ctx.saved_tensors
        dx, dw, db, dh0 = ctx.bwd(x, w, dy, {**ctx.o, "dht": dht})
        dr = dy if ctx.o["residual"] is not None else None
        return dx, dw, db, dr, dh0, None, None, None


def case_timed(impl: Any, inputs: tuple) -> dict[str, Callable[[], object]]:
    """``timed`` for a case: fwd, bwd (with dht when the case has a final state) and
    fwd+bwd through autograd (fla's public causal_conv1d for BASELINE)."""
    x, w, dy, opts = inputs
    fwd, bwd = _case_impl(impl)
    names = ("x", "w", "bias", "residual", "initial_state")
    given = {"x": x, "w": w, **{k: opts[k] for k in names[2:]}}
    leaves = {k: (v.detach().requires_grad_(True) if v is not None else None)
              for k, v in given.items()}  # fmt: skip
    grads_of = [v for v in leaves.values() if v is not None]
    dht = opts["dht"]

    def fwdbwd() -> object:
        if impl is BASELINE:
            from fla.modules.causal_conv1d import causal_conv1d

            y, final = causal_conv1d(
                leaves["x"], leaves["w"], leaves["bias"], leaves["residual"],
                leaves["initial_state"], opts["output_final_state"], opts["activation"],
                cu_seqlens=opts["cu_seqlens"],
            )  # fmt: skip
        else:
            y, final = _CaseFunction.apply(
                leaves["x"], leaves["w"], leaves["bias"], leaves["residual"],
                leaves["initial_state"], opts, fwd, bwd,
            )  # fmt: skip
        outs, gouts = [y], [dy]
        if final is not None and dht is not None:
            outs.append(final)
            gouts.append(dht)
        return torch.autograd.grad(outs, grads_of, gouts)

    return {
        "fwd": lambda: fwd(x, w, opts),
        "bwd": lambda: bwd(x, w, dy, opts),
        "fwdbwd": fwdbwd,
    }


def case_min_bytes(shape: CaseShape, direction: str) -> int:
    """The fewest HBM bytes of a case: fwd reads x (and residual, w, bias, initial state)
    and writes y (and the final state); bwd reads x, dy (and w, bias, initial state, dht)
    and writes dx, dw (and db, dh0); dresidual is dy itself."""
    n = shape.B * shape.T * shape.D
    xs, ws = _esize(shape.x_dtype), _esize(shape.w_dtype)
    nw = shape.D * shape.W
    N = len(case_lengths(shape)) if shape.case == "varlen" else shape.B
    ns = N * shape.D * shape.W * xs if shape.state else 0
    nb = shape.D * ws if shape.bias else 0
    if direction == "fwd":
        return (3 if shape.residual else 2) * n * xs + nw * ws + nb + 2 * ns
    if direction == "bwd":
        return 3 * n * xs + 2 * nw * ws + 2 * nb + 3 * ns
    raise ValueError(f"direction must be 'fwd' or 'bwd', got {direction!r}")


def case_contract_problems(outs: tuple, inputs: tuple) -> list[str]:
    """Folded outputs on x's device, in x's / w's dtype."""
    x, w, _dy, opts = inputs
    problems = []
    for name, out, like in zip(TOLERANCES, outs, (x, x, w), strict=True):
        if out.dtype != like.dtype:
            problems.append(f"{name}: dtype {out.dtype}, want {like.dtype}")
        if out.device != x.device:
            problems.append(f"{name}: on {out.device}, want {x.device}")
    return problems
