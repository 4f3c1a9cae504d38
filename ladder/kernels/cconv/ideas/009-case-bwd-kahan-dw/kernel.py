"""cconv/009 case-bwd-kahan-dw: idea 008 with dw and db of fp32 x summed with compensation.

With fp32 x, 007's case backward (the one 008 runs for every call outside the dense case)
adds each row's g * x into one fp32 sum per tap, serially over the program's segment (128
rows at the fp32-x shape), and its record puts dw's error against the fp64 oracle at 1.44x
fla's (NOTES.md). fla sums each tile of rows as a tree. Here, for fp32 x only, each group of
4 rows (007's `_bgroup`, unchanged) is summed from zero and the group sums are added into
the running sums with Kahan's compensation, so the serial error no longer grows with the
segment's length. dx, the halo and every other dtype are 008's, bit for bit.

Env knobs: none of its own; those of 008 and of the modules it imports, except that
007's CCONV_CASE_BWD=0 (002's loop instead of 007's) does not reach fp32 x here.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i002.kernel import AUTOTUNE, FIXED_G, FIXED_WARPS, SMALL_WORK
from ladder.kernels.cconv.ideas.i007 import kernel as k7
from ladder.kernels.cconv.ideas.i008 import kernel as k8

CASES = ("dense", "bias-residual", "state", "varlen", "fp32")  # 008's, every case
WMAX = k8.WMAX

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

# Every forward, the dense backward and the decode step are 008's.
cconv_fwd = k8.cconv_fwd
cconv_bwd = k8.cconv_bwd
cconv_update = k8.cconv_update
conv_fwd = k8.conv_fwd
cconv_fwd_case = k8.cconv_fwd_case


@triton.jit
def _kahan(s, c, q):
    """(s, c) after adding q to the compensated sum s (c: the low-order part lost so far).
    Once the sum is not finite the compensation is dropped, so Inf stays Inf and NaN NaN, as
    in a plain sum (a kept (Inf - Inf) compensation would turn an Inf into NaN)."""
    y = q - c
    t = s + y
    return t, tl.where(t - t == 0.0, (t - s) - y, 0.0)


@triton.jit
def _bgroup_kahan(
    pdx, pdht_base, cu, ph0_base, t, sdt, t0, T, D, N, m_d,
    xa, xb, xc, xd, da, db, dc, dd, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3,
    n, eos, s0, s1, s2, s3, sb, c0, c1, c2, c3, cb, w0, w1, w2, w3, bv,
    W: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_H0: tl.constexpr,
    HAS_DHT: tl.constexpr, VARLEN: tl.constexpr, HEAD: tl.constexpr, MD: tl.constexpr,
    MT: tl.constexpr,
):  # fmt: skip
    """007's group of rows t .. t+3, its dw / db sums started from zero, then added into the
    compensated sums (s, c) per tap and for db."""
    z = tl.zeros_like(s0)
    (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, q0, q1, q2, q3,
     qb) = k7._bgroup(pdx, pdht_base, cu, ph0_base, t, sdt, t0, T, D, N, m_d, xa, xb, xc, xd,
                      da, db, dc, dd, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n,
                      eos, z, z, z, z, z, w0, w1, w2, w3, bv, W, ACT, False, HAS_BIAS,
                      HAS_H0, HAS_DHT, VARLEN, HEAD, MD, MT)  # fmt: skip
    s0, c0 = _kahan(s0, c0, q0)
    if W >= 2:
        s1, c1 = _kahan(s1, c1, q1)
    if W >= 3:
        s2, c2 = _kahan(s2, c2, q2)
    if W >= 4:
        s3, c3 = _kahan(s3, c3, q3)
    if HAS_BIAS:
        sb, cb = _kahan(sb, cb, qb)
    return (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, s0, s1, s2, s3, sb,
            c0, c1, c2, c3, cb)  # fmt: skip


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "NS", "WORK", "N"])
def case_bwd_kahan_kernel(
    x, w, b, h0, cu, dy, dht, dx, dwp, dbp,
    T, D, N, TS, NS, WORK,
    sxb, sxt, sxd, sgb, sgt, sgd, sdb, sdt,
    W: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_H0: tl.constexpr,
    HAS_DHT: tl.constexpr, VARLEN: tl.constexpr, EVEN_T: tl.constexpr, BD: tl.constexpr,
    G: tl.constexpr, MD: tl.constexpr,
):  # fmt: skip
    """007's case_bwd_kernel (same grid, segments, rings, halo and partial layout) for fp32
    x, with the group sums of dw and db added into compensated sums. Rows go 4 at a time
    whatever G (kept so that 002's autotune configurations apply as they are); every group
    takes the head mask, as 007's first group of each step does."""
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
    gm1 = tl.full([BD], 0.0, tl.float32)
    gm2 = gm1
    gm3 = gm1
    s0 = gm1
    s1 = gm1
    s2 = gm1
    s3 = gm1
    sb = gm1
    c0 = gm1
    c1 = gm1
    c2 = gm1
    c3 = gm1
    cb = gm1
    e1 = eos
    e2 = eos
    e3 = eos
    n1 = n
    n2 = n
    n3 = n

    for t in range(t0, t1, 4):
        xa = box._load(px, t, sxt, T, m_d, MD, MT)
        xb = box._load(px, t + 1, sxt, T, m_d, MD, MT)
        xc = box._load(px, t + 2, sxt, T, m_d, MD, MT)
        xd = box._load(px, t + 3, sxt, T, m_d, MD, MT)
        da = box._load(pdy, t, sgt, T, m_d, MD, MT)
        db = box._load(pdy, t + 1, sgt, T, m_d, MD, MT)
        dc = box._load(pdy, t + 2, sgt, T, m_d, MD, MT)
        dd = box._load(pdy, t + 3, sgt, T, m_d, MD, MT)
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, s0, s1, s2, s3, sb, c0,
         c1, c2, c3, cb) = _bgroup_kahan(
            pdx, pdht_base, cu, ph0_base, t, sdt, t0, T, D, N, m_d, xa, xb, xc, xd, da, db,
            dc, dd, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos, s0, s1, s2,
            s3, sb, c0, c1, c2, c3, cb, w0, w1, w2, w3, bv, W, ACT, HAS_BIAS, HAS_H0, HAS_DHT,
            VARLEN, True, MD, MT,
        )  # fmt: skip

    # Halo: g of the next three rows completes this segment's last three dx rows (007's
    # rows, no dw / db: those rows belong to the next segment's program).
    for t in range(t1, t1 + 3):
        ha = box._load(px, t, sxt, T, m_d, MD, True)
        hd = box._load(pdy, t, sgt, T, m_d, MD, True)
        if VARLEN:
            n, eos, xm1, xm2, xm3 = box._bseq(
                cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # fmt: skip
        (xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, s0, s1, s2, s3,
         sb) = k7._brow7(pdx, pdht_base, t, sdt, t0, T, D, m_d, ha, hd, xm1, xm2, xm3, gm1, gm2,
                         gm3, e1, e2, e3, n1, n2, n3, n, eos, s0, s1, s2, s3, sb, w0, w1, w2,
                         w3, bv, W, ACT, False, HAS_BIAS, HAS_DHT, VARLEN, False, False, MD,
                         True)  # fmt: skip

    row = i_b.to(tl.int64) * NS + i_s
    pp = dwp + row * (D * W) + o_d * W
    tl.store(pp + (W - 1), s0, mask=m_d)
    if W >= 2:
        tl.store(pp + (W - 2), s1, mask=m_d)
    if W >= 3:
        tl.store(pp + (W - 3), s2, mask=m_d)
    if W >= 4:
        tl.store(pp + (W - 4), s3, mask=m_d)
    if HAS_BIAS:
        tl.store(dbp + row * D + o_d, sb, mask=m_d)


if AUTOTUNE:
    # 007's configurations and key, so each case tunes once per size bucket
    case_bwd_kahan_tuned = triton.autotune(configs=box._configs(), key=[*box._KEY, "HAS_DHT"])(
        case_bwd_kahan_kernel
    )


# ----------------------------------------------------------------------------------------
# host
# ----------------------------------------------------------------------------------------


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

    Shapes, dtypes and errors as 007's conv_bwd. fp32 x runs case_bwd_kahan_kernel (dx, dh0
    and dresidual as 007's; dw and db from compensated sums); every other call is 008's.
    """
    if x.dtype != torch.float32:
        return k8.conv_bwd(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    if dht is not None and tuple(dht.shape) != (N, x.shape[2], W):
        raise ValueError(f"dht must be [N, D, W] = {(N, x.shape[2], W)}")
    B, T, D = x.shape
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
            W=W, ACT=box.ACTIVATIONS[activation], HAS_BIAS=bias is not None,
            HAS_H0=h0 is not None, HAS_DHT=dht_c is not None, VARLEN=cu_seqlens is not None,
            EVEN_T=T % TS == 0,
        )  # fmt: skip
        if tuned:
            case_bwd_kahan_tuned[lambda m: (triton.cdiv(D, m["BD"]), NS, B)](*args, **flags)
        else:
            case_bwd_kahan_kernel[(triton.cdiv(D, BD), NS, B)](
                *args, **flags, BD=BD, G=FIXED_G, num_warps=FIXED_WARPS
            )
        dw = dwp.sum(0).to(w.dtype)
        if bias is not None:
            db = dbp.sum(0).to(bias.dtype)
    dh0 = None
    if h0 is not None:  # 002's kernel, as 007 launches it
        dh0 = torch.empty_like(h0)
        box.dh0_kernel[(triton.cdiv(D, 128), N)](
            x, w_c, bias if bias is not None else w_c, h0,
            cu_seqlens if cu_seqlens is not None else w_c, dy,
            dht_c if dht_c is not None else h0, dh0, T, D, *x.stride(), *dy.stride(),
            W=W, ACT=box.ACTIVATIONS[activation], HAS_BIAS=bias is not None,
            HAS_DHT=dht_c is not None, VARLEN=cu_seqlens is not None, BD=128, num_warps=1,
        )  # fmt: skip
    return dx, dw, db, (dy if residual is not None else None), dh0


def cconv_bwd_case(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, opts: dict):
    """The family's case entry point: conv_bwd -> (dx, dw, db, dh0)."""
    dx, dw, db, _dr, dh0 = conv_bwd(
        x, w, dy, opts["bias"], opts["residual"], opts["initial_state"], opts["dht"],
        opts["activation"], opts["cu_seqlens"],
    )  # fmt: skip
    return dx, dw, db, dh0
