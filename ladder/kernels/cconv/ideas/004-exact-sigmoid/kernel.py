"""cconv/004 exact-sigmoid: idea 003 (001's dense loop and 002's kernels for every other
case and the decode step, 002's module imported as `box`) with one change: the bf16 fast
sigmoid is a single exact expression instead of 001's tanh form plus 003's tail select.

Which kernels run: `cconv_fwd` / `cconv_bwd` (the family's dense entry points) are 001's
loop. `conv_fwd` / `conv_bwd` (fla's whole signature) run 001's loop for 001's case (x bf16
or fp16, activation silu / swish, no bias, no initial state, no cu_seqlens; the forward may
also write the final state, through box's small kernel, and the backward may have a
residual, whose gradient is dy) and box's kernels otherwise; `cconv_update` is box's. The
case entry points of the family contract wrap conv_fwd / conv_bwd.

The sigmoid (NOTES.md): 001's bf16 form 0.5 * tanh.approx(z/2) + 0.5 cancels for z << 0;
003 fixed that with a second form selected below z = -8, which costs both forms on every
element (about a quarter more SASS instructions in the backward loop, 13% more time at
prod). Here, for every z,

    q = 2^(-z log2 e - 64)            one ex2.approx.ftz
    r = 1 / (2^-64 + q)               one rcp.approx.ftz; r = 2^64 sigmoid(z), normal for
                                      z > -131 (0 below, where silu's bf16 value is -0)
    s = r 2^-64                       sigmoid(z): relative error up to about 2^-19 (the ex2
                                      argument, near 64 to 190 in size, is rounded to fp32),
                                      far under bf16's 2^-9; subnormal below z = -87

so silu(z) = z s and silu'(z) = s (1 + z (1 - s)) are 001's expressions on an s that does
not cancel; two MUFU ops and three FP ops (FMA, add, multiply) per element against 001's
one and two. fp16 keeps 001's accurate ex2 + divide form.

Work layout, both directions:

    program (CTA) = (channel strip of BD, time segment of TS rows, batch row b)
    thread        = BD / (32 * num_warps) contiguous channels, walking the segment's rows in
                    time order, G rows per loop step (all G loads issued before any math)

A thread owns fixed channels and walks time, so the W-1 previous rows of x (and, in the
backward, of g = dy * silu'(z)) stay in registers as a ring that shifts by assignment. Each
element of x is then loaded once, its sigmoid computed once and its output stored once,
where a tiled kernel reloads W shifted tiles. The backward recomputes z = conv(x) from the
same x ring its dw accumulation needs instead of re-running the forward, finishes dx[r]
three rows later (dx[r] = sum_j w_j g[r+j]), reads a 3-row halo of the next segment to
complete its own last rows, and writes one fp32 dw partial per program, reduced on the host
in a fixed order (deterministic: no atomics).

Tap convention (fla's): weight[d, k] multiplies x[t - (W-1) + k], so the tap for x[t-j] is
weight[d, W-1-j]; below, w_j is that tap and taps j >= W do not exist (compile-time W).

Env knobs (DESIGN.md form; the vendor freezes them to the winning record's values; all but
CCONV_FAST_SIGMOID are read by idea 002's module, and imported here):
    CCONV_TARGET_PROGRAMS  rows per segment are sized so a 1024-wide strip has about this
                           many programs
    CCONV_FAST_SIGMOID     on bf16 tensors, sigmoid via the scaled ex2.approx + rcp.approx
                           form above instead of ex2 + divide (fp16 always takes the
                           accurate form)
    CCONV_MAXNREG          add register-capped (maxnreg=128) configs to the autotune space
    CCONV_AUTOTUNE         autotune large calls; 0 = always the fixed configuration below
                           (what Triton's CPU interpreter can run)
    CCONV_SMALL_WORK       B*T*D below which the fixed configuration is used (launch-bound)
    CCONV_FIXED_WARPS, CCONV_FIXED_G   the fixed configuration
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from ladder.kernels.cconv.ideas.i002 import kernel as box

# The knobs 001 and 002 share are read once, by 002's module (the same names and defaults).
from ladder.kernels.cconv.ideas.i002.kernel import (
    AUTOTUNE,
    FIXED_G,
    FIXED_WARPS,
    MAXNREG,
    SMALL_WORK,
    TARGET_PROGRAMS,
)

FAST_SIGMOID = os.environ.get("CCONV_FAST_SIGMOID", "1") == "1"

WMAX = 4  # the register ring holds W-1 <= 3 previous rows
SEG_ALIGN = 8  # TS is a multiple of every G
WORK_CAP = 1 << 26  # above about 64M elements the best configuration no longer moves
MIN_SEG = 64  # below this the backward's 3-row halo re-read costs more than ~5% of a segment

# The family's cases this idea implements (ladder/kernels/cconv/family.py CASES); the decode
# step (cconv_update) is outside the ladder's fwd/bwd protocol.
CASES = ("dense", "bias-residual", "state", "varlen", "fp32")
DENSE_X_DTYPES = (torch.float16, torch.bfloat16)  # 001's loop

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


def _configs() -> list[triton.Config]:
    """BD = 4 * 32 * num_warps: each thread holds one 4-channel vector (8 bytes of bf16) per
    row; G = rows per loop step, i.e. rows in flight per thread. 8-channel vectors (16-byte
    loads) were slower at every point on the H200 (NOTES.md), so they are not searched."""
    cfgs = [
        triton.Config({"BD": 4 * 32 * nw, "G": g}, num_warps=nw) for nw in (2, 4) for g in (4, 8)
    ]
    if MAXNREG:
        # Capping registers trades a few spills for more resident warps, i.e. more bytes in
        # flight per SM, which is what a streaming kernel is short of.
        cfgs += [
            triton.Config({"BD": 4 * 32 * nw, "G": g}, num_warps=nw, maxnreg=128)
            for nw in (2, 4)
            for g in (4, 8)
        ]
    return cfgs


# ----------------------------------------------------------------------------------------
# device helpers
# ----------------------------------------------------------------------------------------


@triton.jit
def _sigmoid(z, FAST: tl.constexpr):
    """sigmoid(z) in fp32 (module docstring): on the fast path 2^-64 / (2^-64 + 2^(-z log2 e
    - 64)), one ex2 and one rcp, no cancellation anywhere; else ex2 + an approximate divide."""
    if FAST:
        q = tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;",
            "=r,r",
            [z * -1.4426950408889634 - 64.0],
            dtype=tl.float32,
            is_pure=True,
            pack=1,
        )
        r = tl.inline_asm_elementwise(
            "rcp.approx.ftz.f32 $0, $1;",
            "=r,r",
            [q + 5.421010862427522e-20],
            dtype=tl.float32,
            is_pure=True,
            pack=1,
        )
        return r * 5.421010862427522e-20
    else:
        # ex2.approx (2^-22) and an approximate divide (2 ulp): fp32-accurate, two MUFU ops.
        return tl.fdiv(tl.zeros_like(z) + 1.0, 1.0 + tl.exp(-z))


@triton.jit
def _silu(z, FAST: tl.constexpr):
    """silu(z) in fp32: z * sigmoid(z) (001's expression)."""
    return z * _sigmoid(z, FAST)


@triton.jit
def _tap(w, o_d, m_d, W: tl.constexpr, j: tl.constexpr):
    """The fp32 tap multiplying x[t-j]: weight[:, W-1-j]. Only called for j < W."""
    return tl.load(w + o_d * W + (W - 1 - j), mask=m_d, other=0.0).to(tl.float32)


@triton.jit
def _z(x0, x1, x2, x3, w0, w1, w2, w3, W: tl.constexpr):
    """Pre-activation of the row whose x is x0, given the rows behind it (x1 = x[t-1] ...)."""
    z = w0 * x0
    if W >= 2:
        z += w1 * x1
    if W >= 3:
        z += w2 * x2
    if W >= 4:
        z += w3 * x3
    return z


@triton.jit
def _dx(g0, g1, g2, g3, w0, w1, w2, w3, W: tl.constexpr):
    """dx[r] from g[r] (g0), g[r+1] (g1), g[r+2] (g2), g[r+3] (g3)."""
    d = w0 * g0
    if W >= 2:
        d += w1 * g1
    if W >= 3:
        d += w2 * g2
    if W >= 4:
        d += w3 * g3
    return d


@triton.jit
def _load(p, t, st, T, m_d, MD: tl.constexpr, MT: tl.constexpr):
    """Row t of a [T, BD] strip, in its storage dtype (converted at the use site, so rows in
    flight cost half the registers). MD/MT: channel / time masks needed at all."""
    ptr = p + tl.cast(t, tl.int64) * st
    if MT:
        return tl.load(ptr, mask=m_d & (t < T), other=0.0)
    elif MD:
        return tl.load(ptr, mask=m_d, other=0.0)
    else:
        return tl.load(ptr)


@triton.jit
def _load_behind(p, t, st, m_d):
    """A row behind a segment start, as fp32; zero left of the sequence."""
    return tl.load(p + tl.cast(t, tl.int64) * st, mask=m_d & (t >= 0), other=0.0).to(tl.float32)


@triton.jit
def _store(p, t, st, v, T, m, MD: tl.constexpr, MT: tl.constexpr):
    ptr = p + tl.cast(t, tl.int64) * st
    v = v.to(p.dtype.element_ty)
    if MT:
        tl.store(ptr, v, mask=m & (t < T))
    elif MD:
        tl.store(ptr, v, mask=m)
    else:
        tl.store(ptr, v)


@triton.jit
def _fwd4(
    py,
    t,
    syt,
    T,
    m_d,
    xa,
    xb,
    xc,
    xd,
    xm1,
    xm2,
    xm3,
    w0,
    w1,
    w2,
    w3,
    W: tl.constexpr,
    FAST: tl.constexpr,
    MD: tl.constexpr,
    MT: tl.constexpr,
):
    """Rows t..t+3 from their loaded x and the ring behind them; returns the ring for t+4."""
    xa = xa.to(tl.float32)
    xb = xb.to(tl.float32)
    xc = xc.to(tl.float32)
    xd = xd.to(tl.float32)
    za = _z(xa, xm1, xm2, xm3, w0, w1, w2, w3, W)
    zb = _z(xb, xa, xm1, xm2, w0, w1, w2, w3, W)
    zc = _z(xc, xb, xa, xm1, w0, w1, w2, w3, W)
    zd = _z(xd, xc, xb, xa, w0, w1, w2, w3, W)
    _store(py, t, syt, _silu(za, FAST), T, m_d, MD, MT)
    _store(py, t + 1, syt, _silu(zb, FAST), T, m_d, MD, MT)
    _store(py, t + 2, syt, _silu(zc, FAST), T, m_d, MD, MT)
    _store(py, t + 3, syt, _silu(zd, FAST), T, m_d, MD, MT)
    return xd, xc, xb


@triton.jit
def _g(z, dy, FAST: tl.constexpr):
    """dy * silu'(z), silu'(z) = s * (1 + z * (1 - s)) (001's expression)."""
    s = _sigmoid(z, FAST)
    return dy.to(tl.float32) * s * (1.0 + z * (1.0 - s))


@triton.jit
def _bwd4(
    pdx,
    t,
    sdt,
    t0,
    T,
    m_d,
    xa,
    xb,
    xc,
    xd,
    da,
    db,
    dc,
    dd,
    xm1,
    xm2,
    xm3,
    gm1,
    gm2,
    gm3,
    dw0,
    dw1,
    dw2,
    dw3,
    w0,
    w1,
    w2,
    w3,
    W: tl.constexpr,
    FAST: tl.constexpr,
    HEAD: tl.constexpr,
    MD: tl.constexpr,
    MT: tl.constexpr,
):
    """Rows t..t+3 of the backward: their g, their dw contributions, and dx for rows t-3..t.
    HEAD: this block may start the segment, so dx rows before t0 (the previous segment's,
    computed there from its halo) are masked off."""
    xa = xa.to(tl.float32)
    xb = xb.to(tl.float32)
    xc = xc.to(tl.float32)
    xd = xd.to(tl.float32)
    ga = _g(_z(xa, xm1, xm2, xm3, w0, w1, w2, w3, W), da, FAST)
    gb = _g(_z(xb, xa, xm1, xm2, w0, w1, w2, w3, W), db, FAST)
    gc = _g(_z(xc, xb, xa, xm1, w0, w1, w2, w3, W), dc, FAST)
    gd = _g(_z(xd, xc, xb, xa, w0, w1, w2, w3, W), dd, FAST)
    dw0 += ga * xa + gb * xb + gc * xc + gd * xd
    if W >= 2:
        dw1 += ga * xm1 + gb * xa + gc * xb + gd * xc
    if W >= 3:
        dw2 += ga * xm2 + gb * xm1 + gc * xa + gd * xb
    if W >= 4:
        dw3 += ga * xm3 + gb * xm2 + gc * xm1 + gd * xa
    r = t - 3
    if HEAD:
        _store(pdx, r, sdt, _dx(gm3, gm2, gm1, ga, w0, w1, w2, w3, W), T, m_d & (r >= t0), MD, True)
        _store(
            pdx,
            r + 1,
            sdt,
            _dx(gm2, gm1, ga, gb, w0, w1, w2, w3, W),
            T,
            m_d & (r + 1 >= t0),
            MD,
            True,
        )
        _store(
            pdx,
            r + 2,
            sdt,
            _dx(gm1, ga, gb, gc, w0, w1, w2, w3, W),
            T,
            m_d & (r + 2 >= t0),
            MD,
            True,
        )
    else:
        _store(pdx, r, sdt, _dx(gm3, gm2, gm1, ga, w0, w1, w2, w3, W), T, m_d, MD, MT)
        _store(pdx, r + 1, sdt, _dx(gm2, gm1, ga, gb, w0, w1, w2, w3, W), T, m_d, MD, MT)
        _store(pdx, r + 2, sdt, _dx(gm1, ga, gb, gc, w0, w1, w2, w3, W), T, m_d, MD, MT)
    _store(pdx, r + 3, sdt, _dx(ga, gb, gc, gd, w0, w1, w2, w3, W), T, m_d, MD, MT)
    return xd, xc, xb, gd, gc, gb, dw0, dw1, dw2, dw3


# ----------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "WORK"])
def cconv_fwd_kernel(
    x,
    w,
    y,
    T,
    D,
    TS,
    WORK,
    sxb,
    sxt,
    sxd,
    syb,
    syt,
    W: tl.constexpr,
    FAST: tl.constexpr,
    EVEN_T: tl.constexpr,
    BD: tl.constexpr,
    G: tl.constexpr,
    MD: tl.constexpr,
):
    i_d = tl.program_id(0)
    i_s = tl.program_id(1)
    i_b = tl.program_id(2)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    t0 = i_s * TS
    MT: tl.constexpr = not EVEN_T  # only a ragged last segment runs past T

    px = x + i_b.to(tl.int64) * sxb + o_d.to(tl.int64) * sxd
    py = y + i_b.to(tl.int64) * syb + o_d

    w0 = _tap(w, o_d, m_d, W, 0)
    w1 = w0
    w2 = w0
    w3 = w0
    xm1 = tl.zeros([BD], dtype=tl.float32)
    xm2 = xm1
    xm3 = xm1
    if W >= 2:
        w1 = _tap(w, o_d, m_d, W, 1)
        xm1 = _load_behind(px, t0 - 1, sxt, m_d)
    if W >= 3:
        w2 = _tap(w, o_d, m_d, W, 2)
        xm2 = _load_behind(px, t0 - 2, sxt, m_d)
    if W >= 4:
        w3 = _tap(w, o_d, m_d, W, 3)
        xm3 = _load_behind(px, t0 - 3, sxt, m_d)

    # Every load of a step is issued before any of its stores: Triton cannot prove x and y
    # do not alias, so a load after a store is never hoisted above it.
    for t in range(t0, t0 + TS, G):
        xa = _load(px, t, sxt, T, m_d, MD, MT)
        xb = _load(px, t + 1, sxt, T, m_d, MD, MT)
        xc = _load(px, t + 2, sxt, T, m_d, MD, MT)
        xd = _load(px, t + 3, sxt, T, m_d, MD, MT)
        if G == 8:
            xe = _load(px, t + 4, sxt, T, m_d, MD, MT)
            xf = _load(px, t + 5, sxt, T, m_d, MD, MT)
            xg = _load(px, t + 6, sxt, T, m_d, MD, MT)
            xh = _load(px, t + 7, sxt, T, m_d, MD, MT)
        xm1, xm2, xm3 = _fwd4(
            py, t, syt, T, m_d, xa, xb, xc, xd, xm1, xm2, xm3, w0, w1, w2, w3, W, FAST, MD, MT
        )
        if G == 8:
            xm1, xm2, xm3 = _fwd4(
                py,
                t + 4,
                syt,
                T,
                m_d,
                xe,
                xf,
                xg,
                xh,
                xm1,
                xm2,
                xm3,
                w0,
                w1,
                w2,
                w3,
                W,
                FAST,
                MD,
                MT,
            )


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "NS", "WORK"])
def cconv_bwd_kernel(
    x,
    w,
    dy,
    dx,
    dwp,
    T,
    D,
    TS,
    NS,
    WORK,
    sxb,
    sxt,
    sxd,
    sgb,
    sgt,
    sgd,
    sdb,
    sdt,
    W: tl.constexpr,
    FAST: tl.constexpr,
    EVEN_T: tl.constexpr,
    BD: tl.constexpr,
    G: tl.constexpr,
    MD: tl.constexpr,
):
    i_d = tl.program_id(0)
    i_s = tl.program_id(1)
    i_b = tl.program_id(2)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    t0 = i_s * TS
    t1 = t0 + TS
    MT: tl.constexpr = not EVEN_T

    px = x + i_b.to(tl.int64) * sxb + o_d.to(tl.int64) * sxd
    pdy = dy + i_b.to(tl.int64) * sgb + o_d.to(tl.int64) * sgd
    pdx = dx + i_b.to(tl.int64) * sdb + o_d

    w0 = _tap(w, o_d, m_d, W, 0)
    w1 = w0
    w2 = w0
    w3 = w0
    xm1 = tl.zeros([BD], dtype=tl.float32)
    xm2 = xm1
    xm3 = xm1
    if W >= 2:
        w1 = _tap(w, o_d, m_d, W, 1)
        xm1 = _load_behind(px, t0 - 1, sxt, m_d)
    if W >= 3:
        w2 = _tap(w, o_d, m_d, W, 2)
        xm2 = _load_behind(px, t0 - 2, sxt, m_d)
    if W >= 4:
        w3 = _tap(w, o_d, m_d, W, 3)
        xm3 = _load_behind(px, t0 - 3, sxt, m_d)
    # g ring: rows before t0 belong to the previous segment, whose dx this program never
    # stores, so zeros are fine.
    gm1 = tl.zeros([BD], dtype=tl.float32)
    gm2 = gm1
    gm3 = gm1
    dw0 = gm1
    dw1 = gm1
    dw2 = gm1
    dw3 = gm1

    # Rows past T load x = 0 and dy = 0, so their g is 0: the dw sums and the dx of the last
    # real rows rely on that.
    for t in range(t0, t1, G):
        xa = _load(px, t, sxt, T, m_d, MD, MT)
        xb = _load(px, t + 1, sxt, T, m_d, MD, MT)
        xc = _load(px, t + 2, sxt, T, m_d, MD, MT)
        xd = _load(px, t + 3, sxt, T, m_d, MD, MT)
        da = _load(pdy, t, sgt, T, m_d, MD, MT)
        db = _load(pdy, t + 1, sgt, T, m_d, MD, MT)
        dc = _load(pdy, t + 2, sgt, T, m_d, MD, MT)
        dd = _load(pdy, t + 3, sgt, T, m_d, MD, MT)
        if G == 8:
            xe = _load(px, t + 4, sxt, T, m_d, MD, MT)
            xf = _load(px, t + 5, sxt, T, m_d, MD, MT)
            xg = _load(px, t + 6, sxt, T, m_d, MD, MT)
            xh = _load(px, t + 7, sxt, T, m_d, MD, MT)
            de = _load(pdy, t + 4, sgt, T, m_d, MD, MT)
            df = _load(pdy, t + 5, sgt, T, m_d, MD, MT)
            dg = _load(pdy, t + 6, sgt, T, m_d, MD, MT)
            dh = _load(pdy, t + 7, sgt, T, m_d, MD, MT)
        xm1, xm2, xm3, gm1, gm2, gm3, dw0, dw1, dw2, dw3 = _bwd4(
            pdx,
            t,
            sdt,
            t0,
            T,
            m_d,
            xa,
            xb,
            xc,
            xd,
            da,
            db,
            dc,
            dd,
            xm1,
            xm2,
            xm3,
            gm1,
            gm2,
            gm3,
            dw0,
            dw1,
            dw2,
            dw3,
            w0,
            w1,
            w2,
            w3,
            W,
            FAST,
            True,
            MD,
            MT,
        )
        if G == 8:
            xm1, xm2, xm3, gm1, gm2, gm3, dw0, dw1, dw2, dw3 = _bwd4(
                pdx,
                t + 4,
                sdt,
                t0,
                T,
                m_d,
                xe,
                xf,
                xg,
                xh,
                de,
                df,
                dg,
                dh,
                xm1,
                xm2,
                xm3,
                gm1,
                gm2,
                gm3,
                dw0,
                dw1,
                dw2,
                dw3,
                w0,
                w1,
                w2,
                w3,
                W,
                FAST,
                False,
                MD,
                MT,
            )

    # Halo: g of the next segment's first three rows completes this segment's last three dx
    # rows. Their dw belongs to the next segment's program.
    ha = _load(px, t1, sxt, T, m_d, MD, True).to(tl.float32)
    hb = _load(px, t1 + 1, sxt, T, m_d, MD, True).to(tl.float32)
    hc = _load(px, t1 + 2, sxt, T, m_d, MD, True).to(tl.float32)
    ga = _g(_z(ha, xm1, xm2, xm3, w0, w1, w2, w3, W), _load(pdy, t1, sgt, T, m_d, MD, True), FAST)
    gb = _g(
        _z(hb, ha, xm1, xm2, w0, w1, w2, w3, W), _load(pdy, t1 + 1, sgt, T, m_d, MD, True), FAST
    )
    gc = _g(_z(hc, hb, ha, xm1, w0, w1, w2, w3, W), _load(pdy, t1 + 2, sgt, T, m_d, MD, True), FAST)
    r = t1 - 3
    _store(pdx, r, sdt, _dx(gm3, gm2, gm1, ga, w0, w1, w2, w3, W), T, m_d, MD, True)
    _store(pdx, r + 1, sdt, _dx(gm2, gm1, ga, gb, w0, w1, w2, w3, W), T, m_d, MD, True)
    _store(pdx, r + 2, sdt, _dx(gm1, ga, gb, gc, w0, w1, w2, w3, W), T, m_d, MD, True)

    # One fp32 partial per program: dwp[b * NS + s, d, W-1-j] = dw_j.
    pp = dwp + (i_b.to(tl.int64) * NS + i_s) * (D * W) + o_d * W
    tl.store(pp + (W - 1), dw0, mask=m_d)
    if W >= 2:
        tl.store(pp + (W - 2), dw1, mask=m_d)
    if W >= 3:
        tl.store(pp + (W - 3), dw2, mask=m_d)
    if W >= 4:
        tl.store(pp + (W - 4), dw3, mask=m_d)


if AUTOTUNE:
    # The key holds no raw B or T: WORK is B*T*D rounded up to a power of four and capped
    # (_work_bucket), so a run with packed or varying lengths tunes a handful of times in all,
    # never once per length. The
    # autotuner adds the tensors' dtypes to the key itself.
    cconv_fwd_tuned = triton.autotune(configs=_configs(), key=["W", "WORK"])(cconv_fwd_kernel)
    cconv_bwd_tuned = triton.autotune(configs=_configs(), key=["W", "WORK"])(cconv_bwd_kernel)


# ----------------------------------------------------------------------------------------
# host
# ----------------------------------------------------------------------------------------


def _segment(B: int, T: int, D: int) -> int:
    """Rows per program: about TARGET_PROGRAMS programs per 1024-wide strip of the grid.
    Longer segments mean fewer programs and fewer halo re-reads (3 rows per segment in the
    backward), shorter ones a shorter tail. A multiple of SEG_ALIGN."""
    strips = max(1, D // 1024)
    ts = (B * T * strips) // TARGET_PROGRAMS
    ts = max(MIN_SEG, (ts // SEG_ALIGN) * SEG_ALIGN)
    return min(ts, triton.cdiv(T, SEG_ALIGN) * SEG_ALIGN)


def _work_bucket(B: int, T: int, D: int) -> int:
    """B*T*D rounded up to a power of four, capped at WORK_CAP: the autotune key's size term.
    Best configurations change with the size of the call, not with its exact length."""
    n = 1 << (B * T * D - 1).bit_length()
    if n.bit_length() % 2 == 0:  # an odd power of two: round up to the next power of four
        n <<= 1
    return min(n, WORK_CAP)


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
    if x.dim() != 3:
        raise ValueError(f"x must be [B, T, D], got shape {tuple(x.shape)}")
    if w.dim() != 2 or w.shape[0] != x.shape[2]:
        raise ValueError(f"weight must be [D, W] with D={x.shape[2]}, got {tuple(w.shape)}")
    if not 1 <= w.shape[1] <= WMAX:
        raise ValueError(f"weight width W={w.shape[1]}: this kernel handles 1 <= W <= {WMAX}")
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"x must be float16 or bfloat16, got {x.dtype}")


def cconv_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = silu(causal depthwise conv(x, w)).

    x: [B, T, D] fp16/bf16, any strides. w: [D, W] any float dtype, W <= 4.
    Returns y: [B, T, D] contiguous, x's dtype. Raises ValueError on other shapes/dtypes.
    """
    _check(x, w)
    B, T, D = x.shape
    W = w.shape[1]
    w = w.contiguous()
    y = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    TS = _segment(B, T, D)
    NS = triton.cdiv(T, TS)
    fast = FAST_SIGMOID and x.dtype == torch.bfloat16
    args = (x, w, y, T, D, TS, _work_bucket(B, T, D), *x.stride(), y.stride(0), y.stride(1))
    if AUTOTUNE and B * T * D >= SMALL_WORK:
        cconv_fwd_tuned[lambda m: (triton.cdiv(D, m["BD"]), NS, B)](
            *args, W=W, FAST=fast, EVEN_T=T % TS == 0
        )
    else:
        BD = 4 * 32 * FIXED_WARPS
        cconv_fwd_kernel[(triton.cdiv(D, BD), NS, B)](
            *args, W=W, FAST=fast, EVEN_T=T % TS == 0, BD=BD, G=FIXED_G, num_warps=FIXED_WARPS
        )
    return y


def cconv_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of y = cconv_fwd(x, w) for the upstream gradient dy.

    x, dy: [B, T, D] fp16/bf16, any strides (dy may have zero strides). w: [D, W].
    Returns dx: [B, T, D] contiguous in x's dtype and dw: [D, W] in w's dtype, reduced
    deterministically from fp32 per-program partials.
    """
    _check(x, w)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    B, T, D = x.shape
    W = w.shape[1]
    w_c = w.contiguous()
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if dx.numel() == 0:
        return dx, torch.zeros_like(w)
    TS = _segment(B, T, D)
    NS = triton.cdiv(T, TS)
    fast = FAST_SIGMOID and x.dtype == torch.bfloat16
    dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
    args = (
        x,
        w_c,
        dy,
        dx,
        dwp,
        T,
        D,
        TS,
        NS,
        _work_bucket(B, T, D),
        *x.stride(),
        *dy.stride(),
        dx.stride(0),
        dx.stride(1),
    )
    if AUTOTUNE and B * T * D >= SMALL_WORK:
        cconv_bwd_tuned[lambda m: (triton.cdiv(D, m["BD"]), NS, B)](
            *args, W=W, FAST=fast, EVEN_T=T % TS == 0
        )
    else:
        BD = 4 * 32 * FIXED_WARPS
        cconv_bwd_kernel[(triton.cdiv(D, BD), NS, B)](
            *args, W=W, FAST=fast, EVEN_T=T % TS == 0, BD=BD, G=FIXED_G, num_warps=FIXED_WARPS
        )
    return dx, dwp.sum(0).to(w.dtype)


# ----------------------------------------------------------------------------------------
# fla's whole signature: 001's loop for 001's case, box (002's kernels) for the rest
# ----------------------------------------------------------------------------------------


def _dense_case(x, activation, bias, initial_state, cu_seqlens) -> bool:
    """Whether 001's loop computes this call's y and gradients: x bf16 / fp16, silu, no bias,
    no initial state, no packed sequences (a residual and the final state are added around
    it: see conv_fwd / conv_bwd)."""
    return (
        x.dtype in DENSE_X_DTYPES
        and activation in ("silu", "swish")
        and bias is None
        and initial_state is None
        and cu_seqlens is None
    )


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

    Arguments, results and errors as box.conv_fwd (002's). 001's case without a residual
    runs 001's loop (and box's final-state kernel when output_final_state); every other
    call is box.conv_fwd.
    """
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    if residual is not None or not _dense_case(x, activation, bias, initial_state, cu_seqlens):
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
    """(dx, dw, db, dresidual, dh0) of conv_fwd for dy (and dht), as box.conv_bwd (002's).

    001's case without dht runs 001's loop (dresidual is dy itself, db and dh0 are None);
    every other call is box.conv_bwd. Raises ValueError on bad shapes.
    """
    box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    if dht is not None or not _dense_case(x, activation, bias, initial_state, cu_seqlens):
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
