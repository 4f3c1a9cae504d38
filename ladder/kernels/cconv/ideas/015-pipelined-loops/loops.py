"""cconv/015's dense loops: idea 004's forward and backward loops (its ``cconv_fwd_kernel`` and
``cconv_bwd_kernel``: the same arguments, helpers, order of operations and per-program sums)
with the loop over a segment's rows software-pipelined by Triton: ``tl.range(...,
num_stages=NSTG)`` lets the compiler issue the loads of the next NSTG - 1 steps (cp.async into
shared memory) while a step computes, so each program keeps more bytes in flight than its
registers hold. NSTG = 1 is 004's loop.

Shapes, dtypes and grids are 004's: x, dy [B, T, D] fp16/bf16 with strides (sxb, sxt, sxd) /
(sgb, sgt, sgd); w [D, W] contiguous, W <= 4; y, dx [B, T, D] with row strides (syb, syt) /
(sdb, sdt) and unit stride in D; dwp [B * NS, D, W] fp32, one partial per program. Grid
(cdiv(D, BD), NS, B), a program per BD-wide strip of a TS-row segment of one sequence.
"""

from __future__ import annotations

import triton
import triton.language as tl
from ladder.kernels.cconv.ideas.i004.kernel import (
    _bwd4,
    _dx,
    _fwd4,
    _g,
    _load,
    _load_behind,
    _store,
    _tap,
    _z,
)

__all__ = ["dense_bwd_kernel", "dense_fwd_kernel"]


@triton.jit
def _ring(px, t0, sxt, w, o_d, m_d, W: tl.constexpr):
    """The taps w0..w3 (w0 repeated past W) and x of the W - 1 rows before t0, in fp32."""
    w0 = _tap(w, o_d, m_d, W, 0)
    w1 = w0
    w2 = w0
    w3 = w0
    xm1 = tl.zeros_like(w0)
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
    return w0, w1, w2, w3, xm1, xm2, xm3


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "WORK"])
def dense_fwd_kernel(
    x, w, y, T, D, TS, WORK, sxb, sxt, sxd, syb, syt,
    W: tl.constexpr, FAST: tl.constexpr, EVEN_T: tl.constexpr, BD: tl.constexpr,
    G: tl.constexpr, MD: tl.constexpr, NSTG: tl.constexpr,
):  # fmt: skip
    """y = silu(causal conv(x, w)) for one strip of one segment (module docstring)."""
    o_d = tl.program_id(0) * BD + tl.arange(0, BD)
    m_d = o_d < D
    t0 = tl.program_id(1) * TS
    i_b = tl.program_id(2).to(tl.int64)
    MT: tl.constexpr = not EVEN_T  # only a ragged last segment runs past T
    px = x + i_b * sxb + o_d.to(tl.int64) * sxd
    py = y + i_b * syb + o_d
    w0, w1, w2, w3, xm1, xm2, xm3 = _ring(px, t0, sxt, w, o_d, m_d, W)
    # all of a step's loads before any of its stores (x and y may alias as far as Triton knows)
    for t in tl.range(t0, t0 + TS, G, num_stages=NSTG):
        xa = _load(px, t, sxt, T, m_d, MD, MT)
        xb = _load(px, t + 1, sxt, T, m_d, MD, MT)
        xc = _load(px, t + 2, sxt, T, m_d, MD, MT)
        xd = _load(px, t + 3, sxt, T, m_d, MD, MT)
        if G == 8:
            xe = _load(px, t + 4, sxt, T, m_d, MD, MT)
            xf = _load(px, t + 5, sxt, T, m_d, MD, MT)
            xg = _load(px, t + 6, sxt, T, m_d, MD, MT)
            xh = _load(px, t + 7, sxt, T, m_d, MD, MT)
        xm1, xm2, xm3 = _fwd4(py, t, syt, T, m_d, xa, xb, xc, xd, xm1, xm2, xm3,
                              w0, w1, w2, w3, W, FAST, MD, MT)  # fmt: skip
        if G == 8:
            xm1, xm2, xm3 = _fwd4(py, t + 4, syt, T, m_d, xe, xf, xg, xh, xm1, xm2, xm3,
                                  w0, w1, w2, w3, W, FAST, MD, MT)  # fmt: skip


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "NS", "WORK"])
def dense_bwd_kernel(
    x, w, dy, dx, dwp, T, D, TS, NS, WORK, sxb, sxt, sxd, sgb, sgt, sgd, sdb, sdt,
    W: tl.constexpr, FAST: tl.constexpr, EVEN_T: tl.constexpr, BD: tl.constexpr,
    G: tl.constexpr, MD: tl.constexpr, NSTG: tl.constexpr,
):  # fmt: skip
    """dx and this program's dw partial for one strip of one segment (module docstring)."""
    o_d = tl.program_id(0) * BD + tl.arange(0, BD)
    m_d = o_d < D
    i_s = tl.program_id(1)
    i_b = tl.program_id(2).to(tl.int64)
    t0 = i_s * TS
    t1 = t0 + TS
    MT: tl.constexpr = not EVEN_T
    px = x + i_b * sxb + o_d.to(tl.int64) * sxd
    pdy = dy + i_b * sgb + o_d.to(tl.int64) * sgd
    pdx = dx + i_b * sdb + o_d
    w0, w1, w2, w3, xm1, xm2, xm3 = _ring(px, t0, sxt, w, o_d, m_d, W)
    # g of the rows before t0 is the previous segment's business (their dx is stored there)
    gm1 = tl.zeros_like(w0)
    gm2 = gm1
    gm3 = gm1
    dw0 = gm1
    dw1 = gm1
    dw2 = gm1
    dw3 = gm1
    # rows past T load x = dy = 0, so g = 0 there: the dw sums and the last dx rows rely on it
    for t in tl.range(t0, t1, G, num_stages=NSTG):
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
            pdx, t, sdt, t0, T, m_d, xa, xb, xc, xd, da, db, dc, dd, xm1, xm2, xm3,
            gm1, gm2, gm3, dw0, dw1, dw2, dw3, w0, w1, w2, w3, W, FAST, True, MD, MT,
        )  # fmt: skip
        if G == 8:
            xm1, xm2, xm3, gm1, gm2, gm3, dw0, dw1, dw2, dw3 = _bwd4(
                pdx, t + 4, sdt, t0, T, m_d, xe, xf, xg, xh, de, df, dg, dh, xm1, xm2, xm3,
                gm1, gm2, gm3, dw0, dw1, dw2, dw3, w0, w1, w2, w3, W, FAST, False, MD, MT,
            )  # fmt: skip

    # halo: g of the next segment's first three rows completes this segment's last three dx
    # rows (their dw belongs to the next segment's program)
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

    # one fp32 partial per program: dwp[b * NS + s, d, W-1-j] = dw_j
    pp = dwp + (i_b * NS + i_s) * (D * W) + o_d * W
    tl.store(pp + (W - 1), dw0, mask=m_d)
    if W >= 2:
        tl.store(pp + (W - 2), dw1, mask=m_d)
    if W >= 3:
        tl.store(pp + (W - 3), dw2, mask=m_d)
    if W >= 4:
        tl.store(pp + (W - 4), dw3, mask=m_d)
