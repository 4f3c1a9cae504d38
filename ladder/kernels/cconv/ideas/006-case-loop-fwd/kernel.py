"""cconv/006 case-loop-fwd: idea 004 with the forward of every case other than dense run by
one loop in 004's form.

004 (`k4`) runs 001's dense loop for the production call and idea 002's kernels (`box`) for
every other case. 002's forward handles packed sequences row by row: before each row it asks
whether the row starts a new sequence (a scalar loop over cu_seqlens and a branch), and its
records put that forward at 72% of the copy rate on a packed batch and 75% with a state,
against 91% for the dense loop at prod (NOTES.md). Here the forward of the other cases
(bias, residual, activation None, an initial state, packed sequences, fp16 and fp32 x) is
`case_fwd_kernel`: 004's loop of 4-row groups (all loads of a step issued before any math)
with each option a compile-time flag, and packed sequences checked once per 4-row group:

    at a group's first row t, step to t's sequence (restarting the ring at a new sequence,
    from the initial state or zeros, as 002 does);
    if the group ends inside that sequence (t + 4 <= eos): the 4 rows as the dense loop does
    them, with no further check;
    else: row by row, with 002's per-row step (the group crosses a sequence end).

So a packed batch pays the per-row work only on groups that cross a boundary (at most one
per sequence end), and its 4-row groups of long sequences run as the dense loop's.

What stays as it was in 004:
- the dense case: 004's loop (`k4.cconv_fwd`), bit for bit;
- every backward: `k4.conv_bwd` (004's loop for the dense case, 002's kernels for the rest);
- the final state (002's small kernel) and the decode step (002's `cconv_update`).

The activation: bf16 x takes 004's exact fast sigmoid (one ex2 and one rcp, as the dense
loop); fp16 and fp32 x take 002's form (exp2 and Newton steps, exact into the subnormal
range), as they do in 004 today.

Env knobs (besides 004's, read by 002's and 004's modules):
    CCONV_CASE_FWD   1: the cases' forward through case_fwd_kernel; 0: 004's routing (002's
                     forward kernel), for side-by-side runs
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i002.kernel import (
    AUTOTUNE,
    FIXED_G,
    FIXED_WARPS,
    SMALL_WORK,
)
from ladder.kernels.cconv.ideas.i004 import kernel as k4

CASE_FWD = os.environ.get("CCONV_CASE_FWD", "1") == "1"

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


@triton.jit
def _act(z, ACT: tl.constexpr, FAST: tl.constexpr):
    """silu(z) (ACT 1) or z (ACT 0), fp32: 004's exact fast form on bf16 (FAST), else 002's."""
    if ACT == 1:
        if FAST:
            return k4._silu(z, True)
        else:
            return box._act(z, 1)
    else:
        return z


@triton.jit
def _row(
    py, t, syt, T, m_d, x0, r0, xm1, xm2, xm3, w0, w1, w2, w3, bv,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_RES: tl.constexpr, MD: tl.constexpr, MT: tl.constexpr,
):  # fmt: skip
    """y[t] = act(conv + bias) + residual from x[t] (x0, loaded), its residual row r0 and the
    ring behind it; returns the ring for t + 1."""
    x0 = x0.to(tl.float32)
    z = k4._z(x0, xm1, xm2, xm3, w0, w1, w2, w3, W)
    if HAS_BIAS:
        z += bv
    yv = _act(z, ACT, FAST)
    if HAS_RES:
        yv += r0.to(tl.float32)
    k4._store(py, t, syt, yv, T, m_d, MD, MT)
    return x0, xm1, xm2


@triton.jit
def _group(
    py, cu, ph0_base, t, syt, T, N, D, m_d, n, eos, xa, xb, xc, xd, ra, rb, rc, rd,
    xm1, xm2, xm3, w0, w1, w2, w3, bv,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_RES: tl.constexpr, HAS_H0: tl.constexpr, VARLEN: tl.constexpr, MD: tl.constexpr,
    MT: tl.constexpr,
):  # fmt: skip
    """Rows t .. t+3 from their loaded x (and residual) rows; returns (ring, n, eos) for t+4.
    Packed: one sequence check for the group when it ends inside t's sequence, else one per
    row (module docstring)."""
    if VARLEN:
        n, eos, xm1, xm2, xm3 = box._fseq(
            cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
        )  # fmt: skip
        if t + 4 <= eos:
            xm1, xm2, xm3 = _row(py, t, syt, T, m_d, xa, ra, xm1, xm2, xm3, w0, w1, w2, w3, bv,
                                 W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
            xm1, xm2, xm3 = _row(py, t + 1, syt, T, m_d, xb, rb, xm1, xm2, xm3, w0, w1, w2, w3,
                                 bv, W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
            xm1, xm2, xm3 = _row(py, t + 2, syt, T, m_d, xc, rc, xm1, xm2, xm3, w0, w1, w2, w3,
                                 bv, W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
            xm1, xm2, xm3 = _row(py, t + 3, syt, T, m_d, xd, rd, xm1, xm2, xm3, w0, w1, w2, w3,
                                 bv, W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
        else:
            xm1, xm2, xm3 = _row(py, t, syt, T, m_d, xa, ra, xm1, xm2, xm3, w0, w1, w2, w3, bv,
                                 W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
            n, eos, xm1, xm2, xm3 = box._fseq(
                cu, ph0_base, t + 1, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # fmt: skip
            xm1, xm2, xm3 = _row(py, t + 1, syt, T, m_d, xb, rb, xm1, xm2, xm3, w0, w1, w2, w3,
                                 bv, W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
            n, eos, xm1, xm2, xm3 = box._fseq(
                cu, ph0_base, t + 2, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # fmt: skip
            xm1, xm2, xm3 = _row(py, t + 2, syt, T, m_d, xc, rc, xm1, xm2, xm3, w0, w1, w2, w3,
                                 bv, W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
            n, eos, xm1, xm2, xm3 = box._fseq(
                cu, ph0_base, t + 3, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # fmt: skip
            xm1, xm2, xm3 = _row(py, t + 3, syt, T, m_d, xd, rd, xm1, xm2, xm3, w0, w1, w2, w3,
                                 bv, W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
    else:
        xm1, xm2, xm3 = _row(py, t, syt, T, m_d, xa, ra, xm1, xm2, xm3, w0, w1, w2, w3, bv,
                             W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
        xm1, xm2, xm3 = _row(py, t + 1, syt, T, m_d, xb, rb, xm1, xm2, xm3, w0, w1, w2, w3, bv,
                             W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
        xm1, xm2, xm3 = _row(py, t + 2, syt, T, m_d, xc, rc, xm1, xm2, xm3, w0, w1, w2, w3, bv,
                             W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
        xm1, xm2, xm3 = _row(py, t + 3, syt, T, m_d, xd, rd, xm1, xm2, xm3, w0, w1, w2, w3, bv,
                             W, ACT, FAST, HAS_BIAS, HAS_RES, MD, MT)  # fmt: skip
    return xm1, xm2, xm3, n, eos


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "WORK", "N"])
def case_fwd_kernel(
    x, w, b, res, h0, cu, y,
    T, D, N, TS, WORK,
    sxb, sxt, sxd, srb, srt, srd, syb, syt,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_RES: tl.constexpr, HAS_H0: tl.constexpr, VARLEN: tl.constexpr, EVEN_T: tl.constexpr,
    BD: tl.constexpr, G: tl.constexpr, MD: tl.constexpr,
):  # fmt: skip
    i_d = tl.program_id(0)
    i_s = tl.program_id(1)
    i_b = tl.program_id(2)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    t0 = i_s * TS
    MT: tl.constexpr = not EVEN_T  # only a ragged last segment runs past T

    px = x + i_b.to(tl.int64) * sxb + o_d.to(tl.int64) * sxd
    py = y + i_b.to(tl.int64) * syb + o_d
    pr = res + i_b.to(tl.int64) * srb + o_d.to(tl.int64) * srd
    ph0_base = h0 + o_d * W

    if VARLEN:
        n = box._find_seq(cu, t0, N)
        bos = tl.load(cu + n).to(tl.int32)
        eos = tl.load(cu + n + 1).to(tl.int32)
    else:
        n = i_b
        bos = 0
        eos = T
    ph0 = ph0_base + tl.cast(n, tl.int64) * D * W

    w0 = k4._tap(w, o_d, m_d, W, 0)
    w1 = w0
    w2 = w0
    w3 = w0
    if W >= 2:
        w1 = k4._tap(w, o_d, m_d, W, 1)
    if W >= 3:
        w2 = k4._tap(w, o_d, m_d, W, 2)
    if W >= 4:
        w3 = k4._tap(w, o_d, m_d, W, 3)
    bv = tl.full([BD], 0.0, tl.float32)
    if HAS_BIAS:
        bv = tl.load(b + o_d, mask=m_d, other=0.0).to(tl.float32)
    # the ring behind the segment: x rows of the segment's sequence, else the initial state
    xm1 = box._behind(px, t0 - 1, sxt, bos, ph0, m_d, W, 1, HAS_H0)
    xm2 = box._behind(px, t0 - 2, sxt, bos, ph0, m_d, W, 2, HAS_H0)
    xm3 = box._behind(px, t0 - 3, sxt, bos, ph0, m_d, W, 3, HAS_H0)

    # Every load of a step is issued before any of its stores: Triton cannot prove x, res
    # and y do not alias, so a load after a store is never hoisted above it.
    for t in range(t0, t0 + TS, G):
        xa = k4._load(px, t, sxt, T, m_d, MD, MT)
        xb = k4._load(px, t + 1, sxt, T, m_d, MD, MT)
        xc = k4._load(px, t + 2, sxt, T, m_d, MD, MT)
        xd = k4._load(px, t + 3, sxt, T, m_d, MD, MT)
        ra = xa
        rb = xb
        rc = xc
        rd = xd
        if HAS_RES:
            ra = k4._load(pr, t, srt, T, m_d, MD, MT)
            rb = k4._load(pr, t + 1, srt, T, m_d, MD, MT)
            rc = k4._load(pr, t + 2, srt, T, m_d, MD, MT)
            rd = k4._load(pr, t + 3, srt, T, m_d, MD, MT)
        if G == 8:
            xe = k4._load(px, t + 4, sxt, T, m_d, MD, MT)
            xf = k4._load(px, t + 5, sxt, T, m_d, MD, MT)
            xg = k4._load(px, t + 6, sxt, T, m_d, MD, MT)
            xh = k4._load(px, t + 7, sxt, T, m_d, MD, MT)
            re = xe
            rf = xf
            rg = xg
            rh = xh
            if HAS_RES:
                re = k4._load(pr, t + 4, srt, T, m_d, MD, MT)
                rf = k4._load(pr, t + 5, srt, T, m_d, MD, MT)
                rg = k4._load(pr, t + 6, srt, T, m_d, MD, MT)
                rh = k4._load(pr, t + 7, srt, T, m_d, MD, MT)
        xm1, xm2, xm3, n, eos = _group(
            py, cu, ph0_base, t, syt, T, N, D, m_d, n, eos, xa, xb, xc, xd, ra, rb, rc, rd,
            xm1, xm2, xm3, w0, w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, HAS_RES, HAS_H0, VARLEN,
            MD, MT,
        )  # fmt: skip
        if G == 8:
            xm1, xm2, xm3, n, eos = _group(
                py, cu, ph0_base, t + 4, syt, T, N, D, m_d, n, eos, xe, xf, xg, xh, re, rf, rg,
                rh, xm1, xm2, xm3, w0, w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, HAS_RES, HAS_H0,
                VARLEN, MD, MT,
            )  # fmt: skip


if AUTOTUNE:
    # 004's configurations; the key adds the case flags to 004's (W and the size bucket;
    # the autotuner adds the tensors' dtypes), so each case tunes once per size bucket.
    case_fwd_tuned = triton.autotune(
        configs=k4._configs(),
        key=["W", "WORK", "ACT", "HAS_BIAS", "HAS_RES", "HAS_H0", "VARLEN"],
    )(case_fwd_kernel)


# ----------------------------------------------------------------------------------------
# host
# ----------------------------------------------------------------------------------------


def _case_fwd(x, w, bias, residual, h0, cu, y, N, W, act) -> None:
    """Launch case_fwd_kernel for y (not empty), on 002's grid (its segments: 001's rule, and
    shorter ones on small calls) and 004's configurations."""
    B, T, D = x.shape
    tuned = AUTOTUNE and B * T * D >= SMALL_WORK
    TS = box._segment(B, T, D, 512 if tuned else 4 * 32 * FIXED_WARPS)
    NS = triton.cdiv(T, TS)
    res = residual if residual is not None else x
    args = (
        x, w, bias if bias is not None else w, res, h0 if h0 is not None else w,
        cu if cu is not None else w, y, T, D, N, TS, box._work_bucket(B * T * D),
        *x.stride(), *res.stride(), y.stride(0), y.stride(1),
    )  # fmt: skip
    flags = dict(
        W=W, ACT=act, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16,
        HAS_BIAS=bias is not None, HAS_RES=residual is not None, HAS_H0=h0 is not None,
        VARLEN=cu is not None, EVEN_T=T % TS == 0,
    )  # fmt: skip
    if tuned:
        case_fwd_tuned[lambda m: (triton.cdiv(D, m["BD"]), NS, B)](*args, **flags)
    else:
        BD = 4 * 32 * FIXED_WARPS
        case_fwd_kernel[(triton.cdiv(D, BD), NS, B)](
            *args, **flags, BD=BD, G=FIXED_G, num_warps=FIXED_WARPS
        )


def cconv_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = silu(causal depthwise conv(x, w)): 004's dense loop (k4.cconv_fwd), unchanged."""
    return k4.cconv_fwd(x, w)


def cconv_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of cconv_fwd: 004's dense loop (k4.cconv_bwd), unchanged."""
    return k4.cconv_bwd(x, w, dy)


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
    """(y, final_state) of fla's causal_conv1d forward, every case but backend / cp_context.

    x: [B, T, D] fp16/bf16/fp32 any strides ([1, total, D] with cu_seqlens [N+1] int);
    w: [D, W<=4] any float dtype; bias [D]; residual like x; initial_state [N, D, W].
    y = act(conv(x) + bias) + residual: [B, T, D] contiguous in x's dtype; final_state
    [N, D, W] in x's dtype, or None. 004's dense case (no residual) runs 004's loop; every
    other call case_fwd_kernel (002's kernel with CCONV_CASE_FWD=0). Raises ValueError on
    other shapes and dtypes (002's checks).
    """
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    dense = k4._dense_case(x, activation, bias, initial_state, cu_seqlens)
    if not CASE_FWD or (dense and residual is None):
        return k4.conv_fwd(
            x, w, bias, residual, initial_state, output_final_state, activation, cu_seqlens
        )
    B, T, D = x.shape
    w = w.contiguous()
    h0 = initial_state.contiguous() if initial_state is not None else None
    y = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if y.numel() > 0:
        _case_fwd(x, w, bias, residual, h0, cu_seqlens, y, N, W, box.ACTIVATIONS[activation])
    hT = None
    if output_final_state:
        hT = torch.empty((N, D, W), dtype=x.dtype, device=x.device)
        BD = 128
        box.final_state_kernel[(triton.cdiv(D, BD), N)](
            x, h0 if h0 is not None else hT, cu_seqlens if cu_seqlens is not None else hT,
            hT, T, D, *x.stride(), W=W, HAS_H0=h0 is not None,
            VARLEN=cu_seqlens is not None, BD=BD, num_warps=1,
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
    """(dx, dw, db, dresidual, dh0) of conv_fwd for dy (and dht): 004's conv_bwd, unchanged."""
    return k4.conv_bwd(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)


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
