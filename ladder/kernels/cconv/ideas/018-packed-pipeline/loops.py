"""cconv/018's case backward loop: 016's (007's ``case_bwd_kernel`` under
``tl.range(..., num_stages=NSTG)``) with a packed call's sequence step made loop-free, so that
Triton pipelines the packed loop too.

Triton software-pipelines innermost loops only. 007's packed loop steps to the next sequence
with 002's ``_advance``, a ``while`` loop (it walks over empty sequences one at a time),
inside the row loop, so 016's packed loop compiles to 007's at every NSTG. Here the step is
``_advance_k``: the K sequence starts after the current one are loaded as one vector and the
new sequence index is the current one plus how many of them are at or before row t. That is
002's step exactly when the step crosses fewer than K sequence starts, which a program
checks once before its loop: its rows t0 .. t1 + 2 lie in sequences n0 .. n_hi (002's binary
search at t0 and at t1 + 2), and n_hi - n0 < K bounds every step. A program whose rows span
K or more sequences (many short or empty sequences) runs 016's loop with 002's step instead,
unpipelined. Both loops compute the same rows in the same order with the same helpers as
007's kernel, so dx, dw and db are 007's bit for bit on the interpreter.

Shapes, dtypes, arguments and grid are 007's (``i016.loops``' docstring), with one more
constexpr: K, the sequence starts a step looks ahead (a power of two; 0 takes 002's step
everywhere).
"""

from __future__ import annotations

import triton
import triton.language as tl
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i007.kernel import _brow7

__all__ = ["case_bwd_kernel"]


@triton.jit
def _advance_k(cu, t, n, eos, N, K: tl.constexpr):
    """002's ``_advance`` without a loop when it crosses fewer than K sequence starts: the
    sequence of row t is n plus the number of starts cu[n + 1 .. n + K] (those below N) at
    or before t; eos its end."""
    if t >= eos:
        j = n + 1 + tl.arange(0, K)
        starts = tl.load(cu + j, mask=j <= N - 1, other=2147483647)
        n = n + tl.sum((starts <= t).to(tl.int32), axis=0)
        eos = tl.load(cu + n + 1).to(tl.int32)
    return n, eos


@triton.jit
def _bseq_k(cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W: tl.constexpr,
            HAS_H0: tl.constexpr, K: tl.constexpr):  # fmt: skip
    """002's ``_bseq`` on ``_advance_k`` (K = 0: 002's own)."""
    if K == 0:
        n2, eos2, xm1, xm2, xm3 = box._bseq(
            cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
        )  # fmt: skip
    else:
        n2, eos2 = _advance_k(cu, t, n, eos, N, K)
        if n2 != n:
            xm1, xm2, xm3 = box._ring_start(
                ph0_base + tl.cast(n2, tl.int64) * D * W, m_d, W, HAS_H0
            )  # fmt: skip
    return n2, eos2, xm1, xm2, xm3


@triton.jit
def _bgroup_k(
    pdx, pdht_base, cu, ph0_base, t, sdt, t0, T, D, N, m_d,
    xa, xb, xc, xd, da, db, dc, dd, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3,
    n, eos, dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, VARLEN: tl.constexpr, HEAD: tl.constexpr,
    MD: tl.constexpr, MT: tl.constexpr, K: tl.constexpr,
):  # fmt: skip
    """Rows t .. t+3 (and dx of rows t-3 .. t). HEAD: the first three take the head mask, as
    in 002's loop. A group clear of sequence ends (module docstring) takes the rows without
    the packed and dht terms; any other group takes 002's rows, each after its sequence
    step. 007's ``_bgroup`` with the sequence step of ``_bseq_k`` (K = 0: 002's)."""
    if VARLEN:
        n, eos, xm1, xm2, xm3 = _bseq_k(
            cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0, K
        )  # fmt: skip
    if VARLEN or HAS_DHT:
        # rows t-3 .. t+3 in t's sequence (row t-3's end is t's end, eos), and with dht the
        # dx rows (up to t) before its last W rows
        clear = (e3 == eos) & (t + 3 < eos)
        if HAS_DHT:
            clear = clear & (t + W < eos)
    else:
        clear = True
    if clear:
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t, sdt, t0, T, D, m_d, xa, da, xm1, xm2, xm3, gm1, gm2,
                       gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0, w1, w2,
                       w3, bv, W, ACT, FAST, HAS_BIAS, False, False, True, HEAD, MD,
                       MT)  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t + 1, sdt, t0, T, D, m_d, xb, db, xm1, xm2, xm3, gm1,
                       gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0,
                       w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, False, False, True, HEAD, MD,
                       MT)  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t + 2, sdt, t0, T, D, m_d, xc, dc, xm1, xm2, xm3, gm1,
                       gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0,
                       w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, False, False, True, HEAD, MD,
                       MT)  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t + 3, sdt, t0, T, D, m_d, xd, dd, xm1, xm2, xm3, gm1,
                       gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0,
                       w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, False, False, True, False, MD,
                       MT)  # fmt: skip
    else:
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t, sdt, t0, T, D, m_d, xa, da, xm1, xm2, xm3, gm1, gm2,
                       gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0, w1, w2,
                       w3, bv, W, ACT, FAST, HAS_BIAS, HAS_DHT, VARLEN, True, HEAD, MD,
                       MT)  # fmt: skip
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _bseq_k(
                cu, ph0_base, t + 1, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0, K
            )  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t + 1, sdt, t0, T, D, m_d, xb, db, xm1, xm2, xm3, gm1,
                       gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0,
                       w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, HAS_DHT, VARLEN, True, HEAD, MD,
                       MT)  # fmt: skip
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _bseq_k(
                cu, ph0_base, t + 2, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0, K
            )  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t + 2, sdt, t0, T, D, m_d, xc, dc, xm1, xm2, xm3, gm1,
                       gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0,
                       w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, HAS_DHT, VARLEN, True, HEAD, MD,
                       MT)  # fmt: skip
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _bseq_k(
                cu, ph0_base, t + 3, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0, K
            )  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t + 3, sdt, t0, T, D, m_d, xd, dd, xm1, xm2, xm3, gm1,
                       gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0,
                       w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, HAS_DHT, VARLEN, True, False, MD,
                       MT)  # fmt: skip
    return (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3,
            dbv)  # fmt: skip


@triton.jit
def _step(
    px, pdy, pdx, pdht_base, cu, ph0_base, t, sxt, sgt, sdt, t0, T, D, N, m_d,
    xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv,
    w0, w1, w2, w3, bv,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, VARLEN: tl.constexpr, G: tl.constexpr,
    MD: tl.constexpr, MT: tl.constexpr, K: tl.constexpr,
):  # fmt: skip
    """One step of 016's loop: rows t .. t + G - 1 loaded, then taken four at a time."""
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
     dbv) = _bgroup_k(pdx, pdht_base, cu, ph0_base, t, sdt, t0, T, D, N, m_d, xa, xb, xc, xd,
                      da, db, dc, dd, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n,
                      eos, dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv, W, ACT, FAST,
                      HAS_BIAS, HAS_H0, HAS_DHT, VARLEN, True, MD, MT, K)  # fmt: skip
    if G == 8:
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3,
         dbv) = _bgroup_k(pdx, pdht_base, cu, ph0_base, t + 4, sdt, t0, T, D, N, m_d, xe, xf,
                          xg, xh, de, df, dg, dh, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3,
                          n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv, W,
                          ACT, FAST, HAS_BIAS, HAS_H0, HAS_DHT, VARLEN, False, MD, MT,
                          K)  # fmt: skip
    return (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3,
            dbv)  # fmt: skip


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "NS", "WORK", "N"])
def case_bwd_kernel(
    x, w, b, h0, cu, dy, dht, dx, dwp, dbp,
    T, D, N, TS, NS, WORK,
    sxb, sxt, sxd, sgb, sgt, sgd, sdb, sdt,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, VARLEN: tl.constexpr, EVEN_T: tl.constexpr,
    BD: tl.constexpr, G: tl.constexpr, MD: tl.constexpr, NSTG: tl.constexpr, K: tl.constexpr,
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
    # the loop-free step holds when this program's rows (t0 .. t1 + 2) span fewer than K
    # sequence starts past its first sequence
    fits = True
    if VARLEN and K > 0:
        fits = box._find_seq(cu, t1 + 2, N) - n < K
    if fits:
        for t in tl.range(t0, t1, G, num_stages=NSTG):
            (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3,
             dbv) = _step(px, pdy, pdx, pdht_base, cu, ph0_base, t, sxt, sgt, sdt, t0, T, D, N,
                          m_d, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos,
                          dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS,
                          HAS_H0, HAS_DHT, VARLEN, G, MD, MT, K)  # fmt: skip
    else:
        for t in range(t0, t1, G):
            (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3,
             dbv) = _step(px, pdy, pdx, pdht_base, cu, ph0_base, t, sxt, sgt, sdt, t0, T, D, N,
                          m_d, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos,
                          dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS,
                          HAS_H0, HAS_DHT, VARLEN, G, MD, MT, 0)  # fmt: skip
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
