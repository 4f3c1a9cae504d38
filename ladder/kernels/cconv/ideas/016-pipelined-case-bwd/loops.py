"""cconv/016's case backward loop: idea 007's ``case_bwd_kernel`` (the same arguments, helpers,
order of operations and per-program sums) with the loop over a segment's rows
software-pipelined by Triton: ``tl.range(..., num_stages=NSTG)`` issues the loads of x and dy
for the next NSTG - 1 steps (cp.async into shared memory) while a step computes. NSTG = 1 is
007's loop.

Shapes, dtypes and grid are 007's: x, dy [B, T, D] fp16/bf16 ([1, total, D] with cu [N + 1]
int32 for packed sequences) with strides (sxb, sxt, sxd) / (sgb, sgt, sgd); w [D, W]
contiguous, W <= 4; b [D]; h0, dht [N, D, W] contiguous; dx [B, T, D] with row strides
(sdb, sdt) and unit stride in D; dwp [B * NS, D, W] and dbp [B * NS, D] fp32, one partial per
program. Grid (cdiv(D, BD), NS, B). Optional operands absent from a call are passed as any
tensor (w) and never read (HAS_BIAS, HAS_H0, HAS_DHT, VARLEN).
"""

from __future__ import annotations

import triton
import triton.language as tl
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i007.kernel import _bgroup, _brow7

__all__ = ["case_bwd_kernel"]


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "NS", "WORK", "N"])
def case_bwd_kernel(
    x, w, b, h0, cu, dy, dht, dx, dwp, dbp,
    T, D, N, TS, NS, WORK,
    sxb, sxt, sxd, sgb, sgt, sgd, sdb, sdt,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, VARLEN: tl.constexpr, EVEN_T: tl.constexpr,
    BD: tl.constexpr, G: tl.constexpr, MD: tl.constexpr, NSTG: tl.constexpr,
):  # fmt: skip
    """dx and this program's dw (and db) partials for one strip of one segment."""
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
    ph0_base = h0 + o_d * W
    pdht_base = dht + o_d * W
    if VARLEN:
        n = box._find_seq(cu, t0, N)
        bos = tl.load(cu + n).to(tl.int32)
        eos = tl.load(cu + n + 1).to(tl.int32)
    else:
        n = tl.program_id(2)
        bos = 0
        eos = T
    ph0 = ph0_base + tl.cast(n, tl.int64) * D * W
    w0 = box._tap(w, o_d, m_d, W, 0)
    w1 = box._tap(w, o_d, m_d, W, 1)
    w2 = box._tap(w, o_d, m_d, W, 2)
    w3 = box._tap(w, o_d, m_d, W, 3)
    bv = tl.full([BD], 0.0, tl.float32)
    if HAS_BIAS:
        bv = tl.load(b + o_d, mask=m_d, other=0.0).to(tl.float32)
    xm1 = box._behind(px, t0 - 1, sxt, bos, ph0, m_d, W, 1, HAS_H0)
    xm2 = box._behind(px, t0 - 2, sxt, bos, ph0, m_d, W, 2, HAS_H0)
    xm3 = box._behind(px, t0 - 3, sxt, bos, ph0, m_d, W, 3, HAS_H0)
    # g of the rows before t0 is the previous segment's business (their dx is stored there)
    gm1 = tl.full([BD], 0.0, tl.float32)
    gm2 = gm1
    gm3 = gm1
    dw0 = gm1
    dw1 = gm1
    dw2 = gm1
    dw3 = gm1
    dbv = gm1
    e1 = eos
    e2 = eos
    e3 = eos
    n1 = n
    n2 = n
    n3 = n
    for t in tl.range(t0, t1, G, num_stages=NSTG):
        xa = box._load(px, t, sxt, T, m_d, MD, MT)
        xb = box._load(px, t + 1, sxt, T, m_d, MD, MT)
        xc = box._load(px, t + 2, sxt, T, m_d, MD, MT)
        xd = box._load(px, t + 3, sxt, T, m_d, MD, MT)
        da = box._load(pdy, t, sgt, T, m_d, MD, MT)
        db = box._load(pdy, t + 1, sgt, T, m_d, MD, MT)
        dc = box._load(pdy, t + 2, sgt, T, m_d, MD, MT)
        dd = box._load(pdy, t + 3, sgt, T, m_d, MD, MT)
        if G == 8:
            xe = box._load(px, t + 4, sxt, T, m_d, MD, MT)
            xf = box._load(px, t + 5, sxt, T, m_d, MD, MT)
            xg = box._load(px, t + 6, sxt, T, m_d, MD, MT)
            xh = box._load(px, t + 7, sxt, T, m_d, MD, MT)
            de = box._load(pdy, t + 4, sgt, T, m_d, MD, MT)
            df = box._load(pdy, t + 5, sgt, T, m_d, MD, MT)
            dg = box._load(pdy, t + 6, sgt, T, m_d, MD, MT)
            dh = box._load(pdy, t + 7, sgt, T, m_d, MD, MT)
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3,
         dbv) = _bgroup(pdx, pdht_base, cu, ph0_base, t, sdt, t0, T, D, N, m_d, xa, xb, xc, xd,
                        da, db, dc, dd, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n,
                        eos, dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv, W, ACT, FAST,
                        HAS_BIAS, HAS_H0, HAS_DHT, VARLEN, True, MD, MT)  # fmt: skip
        if G == 8:
            (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3,
             dbv) = _bgroup(pdx, pdht_base, cu, ph0_base, t + 4, sdt, t0, T, D, N, m_d, xe, xf,
                            xg, xh, de, df, dg, dh, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3,
                            n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv, W,
                            ACT, FAST, HAS_BIAS, HAS_H0, HAS_DHT, VARLEN, False, MD,
                            MT)  # fmt: skip
    # halo: g of the next three rows completes this segment's last three dx rows (their dw
    # and db belong to the next segment's program)
    for t in range(t1, t1 + 3):
        ha = box._load(px, t, sxt, T, m_d, MD, True)
        hd = box._load(pdy, t, sgt, T, m_d, MD, True)
        if VARLEN:
            n, eos, xm1, xm2, xm3 = box._bseq(
                cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t, sdt, t0, T, D, m_d, ha, hd, xm1, xm2, xm3, gm1, gm2,
                       gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0, w1, w2,
                       w3, bv, W, ACT, FAST, HAS_BIAS, HAS_DHT, VARLEN, False, False, MD,
                       True)  # fmt: skip
    # one fp32 partial per program: dwp[b * NS + s, d, W-1-j] = dw_j, dbp[b * NS + s, d]
    row = i_b * NS + i_s
    pp = dwp + row * (D * W) + o_d * W
    tl.store(pp + (W - 1), dw0, mask=m_d)
    if W >= 2:
        tl.store(pp + (W - 2), dw1, mask=m_d)
    if W >= 3:
        tl.store(pp + (W - 3), dw2, mask=m_d)
    if W >= 4:
        tl.store(pp + (W - 4), dw3, mask=m_d)
    if HAS_BIAS:
        tl.store(dbp + row * D + o_d, dbv, mask=m_d)
