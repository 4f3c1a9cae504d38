"""cconv/005 small-call-grid: idea 004 with the dense loop's grid sized for occupancy on small
calls.

004's kernels run unchanged (imported from its module, `k4`); only the host's choice of the
time segment per program (TS) differs. 004 takes 001's rule: about TARGET_PROGRAMS programs
per 1024-wide channel strip, at least MIN_SEG = 64 rows per segment. On a small call that
leaves the GPU nearly empty: at B1 T4096 D768 the fixed configuration (BD 256) gets 3
channel strips x 64 segments = 192 programs of 2 warps for 132 SMs, and 001's record has
that forward at half fla's speed (0.0196 ms against 0.0100). Here, when 001's rule leaves
fewer than MIN_PROGRAMS programs, segments shrink (down to MIN_SEG_SMALL rows) until there
are about MIN_PROGRAMS, the rule idea 002's box kernels use for every case (its record has
the same forward at 0.0111 ms). Large calls (at least MIN_PROGRAMS programs under 001's rule)
get exactly 004's launch.

Shorter segments re-read more halo: the W-1 rows before each segment (forward and backward)
and 3 rows after it (backward). At 8 rows per segment that is up to 3/8 more x reads in the
forward, which a launch-bound call does not notice. The backward, whose halo is twice that,
keeps 001's rule unless CCONV_SMALL_BWD=1.

Env knobs (besides 004's, read by 002's and 004's modules):
    CCONV_MIN_PROGRAMS   programs a small call's grid is sized to (0: 004's rule everywhere)
    CCONV_SMALL_BWD      1: the backward takes the small-call rule too
"""

from __future__ import annotations

import os

import torch
import triton
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i002.kernel import (
    AUTOTUNE,
    FIXED_G,
    FIXED_WARPS,
    SMALL_WORK,
)
from ladder.kernels.cconv.ideas.i004 import kernel as k4

MIN_PROGRAMS = int(os.environ.get("CCONV_MIN_PROGRAMS", "1056"))
SMALL_BWD = os.environ.get("CCONV_SMALL_BWD", "0") == "1"

MIN_SEG_SMALL = 8  # the shortest segment: one loop step of the largest G

# The family's cases this idea implements (ladder/kernels/cconv/family.py CASES); the decode
# step (cconv_update) is outside the ladder's fwd/bwd protocol.
CASES = ("dense", "bias-residual", "state", "varlen", "fp32")
WMAX = k4.WMAX

__all__ = [
    "CASES",
    "WMAX",
    "cconv_bwd",
    "cconv_bwd_case",
    "cconv_fwd",
    "cconv_fwd_case",
    "cconv_update",
    "conv_bwd",
    "conv_fwd",
]


def _segment(B: int, T: int, D: int, small: bool) -> int:
    """Rows per program, a multiple of k4.SEG_ALIGN: 004's rule, then, for a call on the fixed
    configuration (`small`) whose grid would hold fewer than MIN_PROGRAMS programs, shorter
    segments (at least MIN_SEG_SMALL rows) until it holds about MIN_PROGRAMS."""
    ts = k4._segment(B, T, D)
    if not small or MIN_PROGRAMS <= 0:
        return ts
    nd = triton.cdiv(D, 4 * 32 * FIXED_WARPS)  # channel strips of the fixed configuration
    if nd * B * triton.cdiv(T, ts) >= MIN_PROGRAMS:
        return ts
    want = (B * T * nd) // MIN_PROGRAMS
    return min(ts, max(MIN_SEG_SMALL, (want // k4.SEG_ALIGN) * k4.SEG_ALIGN))


def cconv_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = silu(causal depthwise conv(x, w)), 004's loop.

    x: [B, T, D] fp16/bf16, any strides. w: [D, W] any float dtype, W <= 4.
    Returns y: [B, T, D] contiguous, x's dtype. Raises ValueError on other shapes/dtypes.
    """
    k4._check(x, w)
    B, T, D = x.shape
    W = w.shape[1]
    w = w.contiguous()
    y = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    tuned = AUTOTUNE and B * T * D >= SMALL_WORK
    TS = _segment(B, T, D, not tuned)
    NS = triton.cdiv(T, TS)
    fast = k4.FAST_SIGMOID and x.dtype == torch.bfloat16
    args = (x, w, y, T, D, TS, k4._work_bucket(B, T, D), *x.stride(), y.stride(0), y.stride(1))
    if tuned:
        k4.cconv_fwd_tuned[lambda m: (triton.cdiv(D, m["BD"]), NS, B)](
            *args, W=W, FAST=fast, EVEN_T=T % TS == 0
        )
    else:
        BD = 4 * 32 * FIXED_WARPS
        k4.cconv_fwd_kernel[(triton.cdiv(D, BD), NS, B)](
            *args, W=W, FAST=fast, EVEN_T=T % TS == 0, BD=BD, G=FIXED_G, num_warps=FIXED_WARPS
        )
    return y


def cconv_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of y = cconv_fwd(x, w) for the upstream gradient dy, 004's loop.

    x, dy: [B, T, D] fp16/bf16, any strides (dy may have zero strides). w: [D, W].
    Returns dx: [B, T, D] contiguous in x's dtype and dw: [D, W] in w's dtype, reduced
    deterministically from fp32 per-program partials.
    """
    if not SMALL_BWD:
        return k4.cconv_bwd(x, w, dy)
    k4._check(x, w)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    B, T, D = x.shape
    W = w.shape[1]
    w_c = w.contiguous()
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if dx.numel() == 0:
        return dx, torch.zeros_like(w)
    tuned = AUTOTUNE and B * T * D >= SMALL_WORK
    TS = _segment(B, T, D, not tuned)
    NS = triton.cdiv(T, TS)
    fast = k4.FAST_SIGMOID and x.dtype == torch.bfloat16
    dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
    args = (x, w_c, dy, dx, dwp, T, D, TS, NS, k4._work_bucket(B, T, D), *x.stride(),
            *dy.stride(), dx.stride(0), dx.stride(1))  # fmt: skip
    if tuned:
        k4.cconv_bwd_tuned[lambda m: (triton.cdiv(D, m["BD"]), NS, B)](
            *args, W=W, FAST=fast, EVEN_T=T % TS == 0
        )
    else:
        BD = 4 * 32 * FIXED_WARPS
        k4.cconv_bwd_kernel[(triton.cdiv(D, BD), NS, B)](
            *args, W=W, FAST=fast, EVEN_T=T % TS == 0, BD=BD, G=FIXED_G, num_warps=FIXED_WARPS
        )
    return dx, dwp.sum(0).to(w.dtype)


def conv_fwd(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    activation: str | None = "silu",
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(y, final_state) of fla's causal_conv1d forward, every case but backend / cp_context:
    004's conv_fwd with this idea's cconv_fwd for 004's dense case. Arguments, results and
    errors as box.conv_fwd (002's)."""
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    dense = k4._dense_case(x, activation, bias, initial_state, cu_seqlens)
    if residual is not None or not dense:
        return box.conv_fwd(
            x, w, bias, residual, initial_state, output_final_state, activation, cu_seqlens
        )
    y = cconv_fwd(x, w)
    hT = None
    if output_final_state:
        B, T, D = x.shape
        hT = torch.empty((N, D, W), dtype=x.dtype, device=x.device)
        BD = 128
        box.final_state_kernel[(triton.cdiv(D, BD), N)](
            x, hT, hT, hT, T, D, *x.stride(), W=W, HAS_H0=False, VARLEN=False, BD=BD,
            num_warps=1,
        )  # fmt: skip
    return y, hT


def conv_bwd(
    x: torch.Tensor,
    w: torch.Tensor,
    dy: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    dht: torch.Tensor | None = None,
    activation: str | None = "silu",
    cu_seqlens: torch.Tensor | None = None,
):
    """(dx, dw, db, dresidual, dh0) of conv_fwd for dy (and dht): 004's conv_bwd with this
    idea's cconv_bwd for 004's dense case. Raises ValueError on bad shapes."""
    box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    dense = k4._dense_case(x, activation, bias, initial_state, cu_seqlens)
    if dht is not None or not dense:
        return box.conv_bwd(
            x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens
        )  # fmt: skip
    dx, dw = cconv_bwd(x, w, dy)
    return dx, dw, None, (dy if residual is not None else None), None


def cconv_update(
    x: torch.Tensor,
    cache: torch.Tensor,
    residual: torch.Tensor | None,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fla's causal_conv1d_update (the decode step): box.cconv_update, 002's kernel."""
    return box.cconv_update(x, cache, residual, w, bias, activation)


def cconv_fwd_case(x: torch.Tensor, w: torch.Tensor, opts: dict):
    """The family's case entry point: conv_fwd with the case's options -> (y, final_state)."""
    return conv_fwd(
        x, w, opts["bias"], opts["residual"], opts["initial_state"],
        bool(opts["output_final_state"]), opts["activation"], opts["cu_seqlens"],
    )  # fmt: skip


def cconv_bwd_case(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, opts: dict):
    """The family's case entry point: conv_bwd -> (dx, dw, db, dh0)."""
    dx, dw, db, _dr, dh0 = conv_bwd(
        x, w, dy, opts["bias"], opts["residual"], opts["initial_state"], opts["dht"],
        opts["activation"], opts["cu_seqlens"],
    )  # fmt: skip
    return dx, dw, db, dh0
