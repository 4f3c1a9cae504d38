"""cconv/007 case-loop-bwd: idea 006 (the cases' forward in 004's loop form) with the
backward of every case other than dense made lean the same way.

The backward of the other cases (bias, activation None, an initial state, the final state's
gradient dht, packed sequences, fp16 and fp32 x) is idea 002's loop (`box`), whose records
put it at 54-58% of the copy rate on the case shapes against 79% for 004's dense backward
(NOTES.md). Here it is `case_bwd_kernel`: 002's loop, row for row (the same ring of x and
g = dy * act'(z), the same dw / db partial sums, dx[r] three rows later, the same halo), with
two changes:

- bf16 x takes 004's exact fast sigmoid (one ex2 and one rcp) in act'(z), as 004's dense
  backward does; 002's exact form takes three Newton steps per element. fp16 and fp32 x keep
  002's form.
- 002 runs, for every row of a packed batch or a call with dht, the sequence step before it
  (a scalar loop and a branch) and masks each of dx's four taps by its row's sequence end.
  Here rows go in groups of 4. A group whose dx rows (t-3 .. t) and g rows (t .. t+3) lie
  in one sequence (with dht: its dx rows before the sequence's last W) takes the rows
  without those masks, the sequence step or the dht load. The other groups (at most about
  two per sequence end) take 002's rows as they are.

The dense case (x bf16 / fp16, silu, no bias, state, packing or dht) stays 004's loop
(`k4.conv_bwd`), and the forward is 006's (`k6.conv_fwd`). dh0 and the final state come from
002's small kernels.

Env knobs (besides those of 002, 004 and 006):
    CCONV_CASE_BWD   1: the cases' backward through case_bwd_kernel; 0: 002's, for
                     side-by-side runs
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i002.kernel import AUTOTUNE, FIXED_G, FIXED_WARPS, SMALL_WORK
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i006 import kernel as k6

CASE_BWD = os.environ.get("CCONV_CASE_BWD", "1") == "1"

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
def _g7(z, dy, ACT: tl.constexpr, FAST: tl.constexpr):
    """dy * act'(z) in fp32: 004's fast form on bf16 (FAST), else 002's."""
    if ACT == 1:
        if FAST:
            return k4._g(z, dy, True)
        else:
            return box._g(z, dy, 1)
    else:
        return dy.to(tl.float32)


@triton.jit
def _brow7(
    pdx, pdht_base, t, sdt, t0, T, D, m_d,
    xt, dyt, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos,
    dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_DHT: tl.constexpr, VARLEN: tl.constexpr, ACC: tl.constexpr, HEAD: tl.constexpr,
    MD: tl.constexpr, MT: tl.constexpr,
):  # fmt: skip
    """002's backward row (box._brow) with _g7: row t's g and its dw / db contributions
    (ACC), and dx of row t-3 from g of its own sequence (e3: row t-3's sequence end) plus
    dht among its sequence's last W rows. VARLEN / HAS_DHT False drop those masks and the
    dht load (for rows known to be clear of sequence ends). HEAD: dx rows before t0 are the
    previous segment's, masked off. Returns the shifted rings and sums."""
    x0 = xt.to(tl.float32)
    z = w0 * x0
    if W >= 2:
        z += w1 * xm1
    if W >= 3:
        z += w2 * xm2
    if W >= 4:
        z += w3 * xm3
    if HAS_BIAS:
        z += bv
    g0 = _g7(z, dyt, ACT, FAST)
    if ACC:
        dw0 += g0 * x0
        if W >= 2:
            dw1 += g0 * xm1
        if W >= 3:
            dw2 += g0 * xm2
        if W >= 4:
            dw3 += g0 * xm3
        if HAS_BIAS:
            dbv += g0
    r = t - 3
    # dx[r] = w0 g[r] + w1 g[r+1] + w2 g[r+2] + w3 g[r+3], each g from r's sequence.
    if VARLEN:
        d = w0 * gm3
        if W >= 2:
            d += tl.where(r + 1 < e3, w1, 0.0) * gm2
        if W >= 3:
            d += tl.where(r + 2 < e3, w2, 0.0) * gm1
        if W >= 4:
            d += tl.where(r + 3 < e3, w3, 0.0) * g0
    else:
        d = w0 * gm3
        if W >= 2:
            d += w1 * gm2
        if W >= 3:
            d += w2 * gm1
        if W >= 4:
            d += w3 * g0
    if HAS_DHT:
        slot = r - e3 + W
        m_h = m_d & (slot >= 0) & (r >= 0)
        d += tl.load(pdht_base + tl.cast(n3, tl.int64) * D * W + slot, mask=m_h, other=0.0).to(
            tl.float32
        )
    if HEAD:
        box._store(pdx, r, sdt, d, T, m_d & (r >= t0), MD, True)
    else:
        box._store(pdx, r, sdt, d, T, m_d, MD, MT)
    return (x0, xm1, xm2, g0, gm1, gm2, eos, e1, e2, n, n1, n2, dw0, dw1, dw2, dw3, dbv)


@triton.jit
def _bgroup(
    pdx, pdht_base, cu, ph0_base, t, sdt, t0, T, D, N, m_d,
    xa, xb, xc, xd, da, db, dc, dd, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3,
    n, eos, dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, VARLEN: tl.constexpr, HEAD: tl.constexpr,
    MD: tl.constexpr, MT: tl.constexpr,
):  # fmt: skip
    """Rows t .. t+3 (and dx of rows t-3 .. t). HEAD: the first three take the head mask, as
    in 002's loop. A group clear of sequence ends (module docstring) takes the rows without
    the packed and dht terms; any other group takes 002's rows, each after its sequence
    step."""
    if VARLEN:
        n, eos, xm1, xm2, xm3 = box._bseq(
            cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
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
            n, eos, xm1, xm2, xm3 = box._bseq(
                cu, ph0_base, t + 1, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t + 1, sdt, t0, T, D, m_d, xb, db, xm1, xm2, xm3, gm1,
                       gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0,
                       w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, HAS_DHT, VARLEN, True, HEAD, MD,
                       MT)  # fmt: skip
        if VARLEN:
            n, eos, xm1, xm2, xm3 = box._bseq(
                cu, ph0_base, t + 2, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t + 2, sdt, t0, T, D, m_d, xc, dc, xm1, xm2, xm3, gm1,
                       gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0,
                       w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, HAS_DHT, VARLEN, True, HEAD, MD,
                       MT)  # fmt: skip
        if VARLEN:
            n, eos, xm1, xm2, xm3 = box._bseq(
                cu, ph0_base, t + 3, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3,
         dbv) = _brow7(pdx, pdht_base, t + 3, sdt, t0, T, D, m_d, xd, dd, xm1, xm2, xm3, gm1,
                       gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, dw0, dw1, dw2, dw3, dbv, w0,
                       w1, w2, w3, bv, W, ACT, FAST, HAS_BIAS, HAS_DHT, VARLEN, True, False, MD,
                       MT)  # fmt: skip
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
    BD: tl.constexpr, G: tl.constexpr, MD: tl.constexpr,
):  # fmt: skip
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
    ph0_base = h0 + o_d * W
    pdht_base = dht + o_d * W

    if VARLEN:
        n = box._find_seq(cu, t0, N)
        bos = tl.load(cu + n).to(tl.int32)
        eos = tl.load(cu + n + 1).to(tl.int32)
    else:
        n = i_b
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
    # Ring rows before t0: their dx is the previous segment's, so zero g is fine.
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

    for t in range(t0, t1, G):
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

    # Halo: g of the next three rows completes this segment's last three dx rows; their dw
    # and db belong to the next segment's program (002's rows).
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

    # One fp32 partial per program: dwp[b * NS + s, d, W-1-j] = dw_j, dbp[b * NS + s, d].
    row = i_b.to(tl.int64) * NS + i_s
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


if AUTOTUNE:
    # 002's configurations and key (the case flags, the size bucket; the autotuner adds the
    # tensors' dtypes), so each case tunes once per size bucket.
    case_bwd_tuned = triton.autotune(configs=box._configs(), key=[*box._KEY, "HAS_DHT"])(
        case_bwd_kernel
    )


# ----------------------------------------------------------------------------------------
# host
# ----------------------------------------------------------------------------------------


# The dense entry points, the forward of every case and the decode step are 006's (004's
# dense loop, 006's case forward, 002's decode step).
cconv_fwd = k6.cconv_fwd
cconv_bwd = k6.cconv_bwd
conv_fwd = k6.conv_fwd
cconv_update = k6.cconv_update


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
    """(dx, dw, db, dresidual, dh0) of conv_fwd for the output gradients dy (and dht).

    dy like x (any strides); dht [N, D, W] or None. dx [B, T, D] contiguous in x's dtype;
    dw [D, W] in w's dtype and db [D] in bias's dtype, reduced in a fixed order from fp32
    per-program partials; dresidual is dy itself (None without residual); dh0 [N, D, W] in
    the initial state's dtype (None without one). 004's dense case without dht runs 004's
    loop; every other call case_bwd_kernel (002's with CCONV_CASE_BWD=0). Raises ValueError
    on bad shapes (002's checks).
    """
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    dense = k4._dense_case(x, activation, bias, initial_state, cu_seqlens)
    if not CASE_BWD or (dense and dht is None):
        return k4.conv_bwd(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    if dht is not None and tuple(dht.shape) != (N, x.shape[2], W):
        raise ValueError(f"dht must be [N, D, W] = {(N, x.shape[2], W)}")
    B, T, D = x.shape
    act = box.ACTIVATIONS[activation]
    w_c = w.contiguous()
    h0 = initial_state.contiguous() if initial_state is not None else None
    dht_c = dht.contiguous() if dht is not None else None
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    dw = torch.zeros_like(w)
    db = torch.zeros_like(bias) if bias is not None else None
    if dx.numel() > 0:
        tuned = AUTOTUNE and B * T * D >= SMALL_WORK
        BD = 4 * 32 * FIXED_WARPS
        TS = box._segment(B, T, D, 512 if tuned else BD)
        NS = triton.cdiv(T, TS)
        dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
        dbp = (
            torch.empty((B * NS, D), dtype=torch.float32, device=x.device)
            if bias is not None
            else dwp
        )
        args = (
            x, w_c, bias if bias is not None else w_c, h0 if h0 is not None else w_c,
            cu_seqlens if cu_seqlens is not None else w_c, dy,
            dht_c if dht_c is not None else w_c, dx, dwp, dbp,
            T, D, N, TS, NS, box._work_bucket(B * T * D),
            *x.stride(), *dy.stride(), dx.stride(0), dx.stride(1),
        )  # fmt: skip
        flags = dict(
            W=W, ACT=act, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16,
            HAS_BIAS=bias is not None, HAS_H0=h0 is not None, HAS_DHT=dht_c is not None,
            VARLEN=cu_seqlens is not None, EVEN_T=T % TS == 0,
        )  # fmt: skip
        if tuned:
            case_bwd_tuned[lambda m: (triton.cdiv(D, m["BD"]), NS, B)](*args, **flags)
        else:
            case_bwd_kernel[(triton.cdiv(D, BD), NS, B)](
                *args, **flags, BD=BD, G=FIXED_G, num_warps=FIXED_WARPS
            )
        dw = dwp.sum(0).to(w.dtype)
        if bias is not None:
            db = dbp.sum(0).to(bias.dtype)
    dh0 = None
    if h0 is not None:
        dh0 = torch.empty_like(h0)
        box.dh0_kernel[(triton.cdiv(D, 128), N)](
            x, w_c, bias if bias is not None else w_c, h0,
            cu_seqlens if cu_seqlens is not None else w_c, dy,
            dht_c if dht_c is not None else h0, dh0, T, D, *x.stride(), *dy.stride(),
            W=W, ACT=act, HAS_BIAS=bias is not None, HAS_DHT=dht_c is not None,
            VARLEN=cu_seqlens is not None, BD=128, num_warps=1,
        )  # fmt: skip
    return dx, dw, db, (dy if residual is not None else None), dh0


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
