"""cconv/003 strip-merge, the cases: a copy of 002 strip-box's kernel.py (001's one-pass strip
kernels, extended to every case of fla 0.6.0's
causal_conv1d (bias, residual, activation None, fp32 x, initial and final state, packed
sequences) and its decode step.

Work layout (as 001), both directions:

    program (CTA) = (channel strip of BD, time segment of TS rows, batch row b)
    thread        = BD / (32 * num_warps) contiguous channels walking the segment's rows in
                    time order, G rows per loop step (all G loads issued before any math)

The W-1 previous rows of x (and, backward, of g = dy * act'(z)) live in a register ring.
Packed sequences (cu_seqlens, x [1, total, D]) use the same grid over the packed stream: a
program finds the sequence of its first row by binary search over cu_seqlens and, at every
sequence start it walks over, resets the x ring to that sequence's initial state (or zeros).
The backward also keeps each ring row's sequence end, so dx[r] = sum_j w_j g[r+j] takes g
from r's own sequence only, and adds dht into the last W rows of each sequence. The
gradient of the initial state (dh0) and the final state are [N, D, W] side products of small
separate kernels.

Tap convention (fla's): weight[d, k] multiplies x[t - (W-1) + k]; w_j below is the tap of
x[t-j], weight[d, W-1-j]. State layout (fla's): state[n, d, k] is x[L - W + k] of sequence n
(L its length), so the initial state holds the W rows before the sequence, and the final
state the last W rows (reaching into the initial state when L < W).

Env knobs (DESIGN.md form; the vendor freezes them to the winning record's values):
    CCONV_TARGET_PROGRAMS  large calls: segments sized for about this many programs per
                           1024-wide strip (001's rule, unchanged)
    CCONV_MIN_PROGRAMS     small calls: segments shortened (to 8 rows at least) until the
                           grid has at least this many programs
    CCONV_MAXNREG          add register-capped (maxnreg=128) configs to the autotune space
    CCONV_AUTOTUNE         autotune large calls; 0 = always the fixed configuration
                           (what Triton's CPU interpreter can run)
    CCONV_SMALL_WORK       B*T*D below which the fixed configuration is used
    CCONV_FIXED_WARPS, CCONV_FIXED_G   the fixed configuration

Zeros are written tl.full(shape, 0.0, ...) (a builtin) rather than tl.zeros (a jit function
of Triton's standard library): the CPU interpreter then runs these kernels even in a process
that imported Triton before switching TRITON_INTERPRET on.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

TARGET_PROGRAMS = int(os.environ.get("CCONV_TARGET_PROGRAMS", "2048"))
MIN_PROGRAMS = int(os.environ.get("CCONV_MIN_PROGRAMS", "1056"))
MAXNREG = os.environ.get("CCONV_MAXNREG", "1") == "1"
AUTOTUNE = os.environ.get("CCONV_AUTOTUNE", "1") == "1"
SMALL_WORK = int(os.environ.get("CCONV_SMALL_WORK", "4194304"))
FIXED_WARPS = int(os.environ.get("CCONV_FIXED_WARPS", "2"))
FIXED_G = int(os.environ.get("CCONV_FIXED_G", "4"))

WMAX = 4  # the register ring holds W-1 <= 3 previous rows
SEG_ALIGN = 8  # TS is a multiple of every G
WORK_CAP = 1 << 26
MIN_SEG = 64  # large calls: 001's floor
MIN_SEG_SMALL = 8  # small calls: the floor when occupancy decides
X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ACTIVATIONS = {None: 0, "silu": 1, "swish": 1}

# The family's cases this idea implements (ladder/kernels/cconv/family.py CASES); the decode
# step (cconv_update) is outside the ladder's fwd/bwd protocol and tested in the package.
CASES = ("dense", "bias-residual", "state", "varlen", "fp32")

__all__ = [
    "ACTIVATIONS",
    "CASES",
    "WMAX",
    "X_DTYPES",
    "cconv_bwd",
    "cconv_bwd_case",
    "cconv_fwd",
    "cconv_fwd_case",
    "cconv_update",
    "conv_bwd",
    "conv_fwd",
]


def _configs() -> list[triton.Config]:
    """001's space: BD = 4 * 32 * num_warps (one 4-channel vector per thread and row),
    G rows in flight per thread, optionally register-capped."""
    cfgs = [
        triton.Config({"BD": 4 * 32 * nw, "G": g}, num_warps=nw) for nw in (2, 4) for g in (4, 8)
    ]
    if MAXNREG:
        cfgs += [
            triton.Config({"BD": 4 * 32 * nw, "G": g}, num_warps=nw, maxnreg=128)
            for nw in (2, 4)
            for g in (4, 8)
        ]
    return cfgs


# device helpers: activation


@triton.jit
def _sig_parts(z):
    """(r, q, big): sigmoid(z) = r for z >= 0, and for z < 0 it is q, or q * 2^-64 where big.

    e = exp(-|z|) = 2^(-|z| log2 e) (one MUFU ex2), scaled by 2^64 where it would be tiny
    (big: |z| log2 e > 96), so the negative tail stays in the normal range until the caller
    removes the scale after multiplying by z (outputs subnormal in fp32 / bf16 stay exact);
    r = 1 / (1 + e) by three Newton steps from the linear minimax start 24/17 - 8/17 a on
    [1, 2] (error (1/17)^8, FMAs only); q = e r. Nothing subtracts nearly equal numbers, so
    there is no cancellation at either end (001's 0.5 tanh(z/2) + 0.5 cancels for z << 0)."""
    a2 = -tl.abs(z) * 1.4426950408889634
    big = a2 < -96.0
    e = tl.exp2(tl.where(big, a2 + 64.0, a2))
    a = 1.0 + tl.where(big, 0.0, e)
    r = 1.4117647058823530 - 0.47058823529411764 * a
    r = r * (2.0 - a * r)
    r = r * (2.0 - a * r)
    r = r * (2.0 - a * r)
    return r, e * r, big


@triton.jit
def _act(z, ACT: tl.constexpr):
    """silu(z) (ACT=1) or z (ACT=0), in fp32."""
    if ACT == 1:
        r, q, big = _sig_parts(z)
        neg = z * q
        neg = tl.where(big, neg * 5.421010862427522e-20, neg)
        return tl.where(z >= 0, z * r, neg)
    else:
        return z


@triton.jit
def _g(z, dy, ACT: tl.constexpr):
    """dy * act'(z); silu'(z) = s (1 + z (1 - s))."""
    if ACT == 1:
        r, q, big = _sig_parts(z)
        # s = r or q (q 2^-64 is negligible in 1 - s); the scale goes last, after the
        # factor, so a subnormal result keeps its few bits.
        s = tl.where(z >= 0, r, tl.where(big, 0.0, q))
        f = 1.0 + z * (1.0 - s)
        qf = q * f
        d = tl.where(z >= 0, r * f, tl.where(big, qf * 5.421010862427522e-20, qf))
        return dy.to(tl.float32) * d
    else:
        return dy.to(tl.float32)


# device helpers: loads, taps, ring


@triton.jit
def _tap(w, o_d, m_d, W: tl.constexpr, j: tl.constexpr):
    """The fp32 tap of x[t-j] (weight[:, W-1-j]); zero for j >= W."""
    if j < W:
        return tl.load(w + o_d * W + (W - 1 - j), mask=m_d, other=0.0).to(tl.float32)
    else:
        return tl.full(o_d.shape, 0.0, tl.float32)


@triton.jit
def _load(p, t, st, T, m_d, MD: tl.constexpr, MT: tl.constexpr):
    """Row t of a strip in its storage dtype; MD / MT: channel / time masks needed at all."""
    ptr = p + tl.cast(t, tl.int64) * st
    if MT:
        return tl.load(ptr, mask=m_d & (t < T), other=0.0)
    elif MD:
        return tl.load(ptr, mask=m_d, other=0.0)
    else:
        return tl.load(ptr)


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
def _behind(px, t, sxt, bos, ph0, m_d, W: tl.constexpr, j: tl.constexpr, HAS_H0: tl.constexpr):
    """x at row t (< the segment start), fp32: x itself when t >= bos (the row's sequence
    start), else the initial state's slot W + (t - bos), or zero without one. Zero for
    taps j >= W (the ring entry is never used)."""
    if j < W:
        v = tl.load(px + tl.cast(t, tl.int64) * sxt, mask=m_d & (t >= bos), other=0.0)
        v = v.to(tl.float32)
        if HAS_H0:
            v += tl.load(ph0 + (W + t - bos), mask=m_d & (t < bos), other=0.0).to(tl.float32)
        return v
    else:
        return tl.full(m_d.shape, 0.0, tl.float32)


@triton.jit
def _ring_start(ph0, m_d, W: tl.constexpr, HAS_H0: tl.constexpr):
    """The ring at a sequence start: x[bos-1], x[bos-2], x[bos-3] from the initial state."""
    z = tl.full(m_d.shape, 0.0, tl.float32)
    r1 = z
    r2 = z
    r3 = z
    if HAS_H0:
        if W >= 2:
            r1 = tl.load(ph0 + (W - 1), mask=m_d, other=0.0).to(tl.float32)
        if W >= 3:
            r2 = tl.load(ph0 + (W - 2), mask=m_d, other=0.0).to(tl.float32)
        if W >= 4:
            r3 = tl.load(ph0 + (W - 3), mask=m_d, other=0.0).to(tl.float32)
    return r1, r2, r3


@triton.jit
def _find_seq(cu, t, N):
    """The sequence n holding packed row t: the largest n < N with cu[n] <= t."""
    lo = 0
    hi = N - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tl.load(cu + mid) <= t:
            lo = mid
        else:
            hi = mid - 1
    return lo


@triton.jit
def _advance(cu, t, n, eos, N):
    """(n, bos, eos) of the sequence holding row t, moving forward from sequence n."""
    while (t >= eos) & (n < N - 1):
        n += 1
        eos = tl.load(cu + n + 1).to(tl.int32)
    return n, eos


# forward


@triton.jit
def _frow(
    py, t, syt, T, m_d, xt, rt, xm1, xm2, xm3, w0, w1, w2, w3, bv,
    W: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr,
    MD: tl.constexpr, MT: tl.constexpr,
):  # fmt: skip
    """One output row from x[t] (xt, loaded) and the ring; returns the ring for t+1."""
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
    yv = _act(z, ACT)
    if HAS_RES:
        yv += rt.to(tl.float32)
    _store(py, t, syt, yv, T, m_d, MD, MT)
    return x0, xm1, xm2


@triton.jit
def _fseq(cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W: tl.constexpr,
          HAS_H0: tl.constexpr):  # fmt: skip
    """Packed rows: before row t, step to its sequence; a new sequence restarts the ring."""
    n2, eos2 = _advance(cu, t, n, eos, N)
    if n2 != n:
        xm1, xm2, xm3 = _ring_start(ph0_base + tl.cast(n2, tl.int64) * D * W, m_d, W, HAS_H0)
    return n2, eos2, xm1, xm2, xm3


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "WORK", "N"])
def cconv_fwd_kernel(
    x, w, b, res, h0, cu, y,
    T, D, N, TS, WORK,
    sxb, sxt, sxd, srb, srt, srd, syb, syt,
    W: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr,
    HAS_H0: tl.constexpr, VARLEN: tl.constexpr, EVEN_T: tl.constexpr,
    BD: tl.constexpr, G: tl.constexpr, MD: tl.constexpr,
):  # fmt: skip
    i_d = tl.program_id(0)
    i_s = tl.program_id(1)
    i_b = tl.program_id(2)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    t0 = i_s * TS
    MT: tl.constexpr = not EVEN_T

    px = x + i_b.to(tl.int64) * sxb + o_d.to(tl.int64) * sxd
    py = y + i_b.to(tl.int64) * syb + o_d
    pr = res + i_b.to(tl.int64) * srb + o_d.to(tl.int64) * srd
    ph0_base = h0 + o_d * W

    if VARLEN:
        n = _find_seq(cu, t0, N)
        bos = tl.load(cu + n).to(tl.int32)
        eos = tl.load(cu + n + 1).to(tl.int32)
    else:
        n = i_b
        bos = 0
        eos = T
    ph0 = ph0_base + tl.cast(n, tl.int64) * D * W

    w0 = _tap(w, o_d, m_d, W, 0)
    w1 = _tap(w, o_d, m_d, W, 1)
    w2 = _tap(w, o_d, m_d, W, 2)
    w3 = _tap(w, o_d, m_d, W, 3)
    bv = tl.full([BD], 0.0, tl.float32)
    if HAS_BIAS:
        bv = tl.load(b + o_d, mask=m_d, other=0.0).to(tl.float32)
    xm1 = _behind(px, t0 - 1, sxt, bos, ph0, m_d, W, 1, HAS_H0)
    xm2 = _behind(px, t0 - 2, sxt, bos, ph0, m_d, W, 2, HAS_H0)
    xm3 = _behind(px, t0 - 3, sxt, bos, ph0, m_d, W, 3, HAS_H0)

    for t in range(t0, t0 + TS, G):
        xa = _load(px, t, sxt, T, m_d, MD, MT)
        xb = _load(px, t + 1, sxt, T, m_d, MD, MT)
        xc = _load(px, t + 2, sxt, T, m_d, MD, MT)
        xd = _load(px, t + 3, sxt, T, m_d, MD, MT)
        ra = xa
        rb = xb
        rc = xc
        rd = xd
        if HAS_RES:
            ra = _load(pr, t, srt, T, m_d, MD, MT)
            rb = _load(pr, t + 1, srt, T, m_d, MD, MT)
            rc = _load(pr, t + 2, srt, T, m_d, MD, MT)
            rd = _load(pr, t + 3, srt, T, m_d, MD, MT)
        if G == 8:
            xe = _load(px, t + 4, sxt, T, m_d, MD, MT)
            xf = _load(px, t + 5, sxt, T, m_d, MD, MT)
            xg = _load(px, t + 6, sxt, T, m_d, MD, MT)
            xh = _load(px, t + 7, sxt, T, m_d, MD, MT)
            re = xe
            rf = xf
            rg = xg
            rh = xh
            if HAS_RES:
                re = _load(pr, t + 4, srt, T, m_d, MD, MT)
                rf = _load(pr, t + 5, srt, T, m_d, MD, MT)
                rg = _load(pr, t + 6, srt, T, m_d, MD, MT)
                rh = _load(pr, t + 7, srt, T, m_d, MD, MT)
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _fseq(
                cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # noqa: E501
        xm1, xm2, xm3 = _frow(
            py,
            t,
            syt,
            T,
            m_d,
            xa,
            ra,
            xm1,
            xm2,
            xm3,
            w0,
            w1,
            w2,
            w3,
            bv,
            W,
            ACT,
            HAS_BIAS,
            HAS_RES,
            MD,
            MT,
        )  # noqa: E501
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _fseq(
                cu, ph0_base, t + 1, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # noqa: E501
        xm1, xm2, xm3 = _frow(
            py,
            t + 1,
            syt,
            T,
            m_d,
            xb,
            rb,
            xm1,
            xm2,
            xm3,
            w0,
            w1,
            w2,
            w3,
            bv,
            W,
            ACT,
            HAS_BIAS,
            HAS_RES,
            MD,
            MT,
        )  # noqa: E501
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _fseq(
                cu, ph0_base, t + 2, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # noqa: E501
        xm1, xm2, xm3 = _frow(
            py,
            t + 2,
            syt,
            T,
            m_d,
            xc,
            rc,
            xm1,
            xm2,
            xm3,
            w0,
            w1,
            w2,
            w3,
            bv,
            W,
            ACT,
            HAS_BIAS,
            HAS_RES,
            MD,
            MT,
        )  # noqa: E501
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _fseq(
                cu, ph0_base, t + 3, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # noqa: E501
        xm1, xm2, xm3 = _frow(
            py,
            t + 3,
            syt,
            T,
            m_d,
            xd,
            rd,
            xm1,
            xm2,
            xm3,
            w0,
            w1,
            w2,
            w3,
            bv,
            W,
            ACT,
            HAS_BIAS,
            HAS_RES,
            MD,
            MT,
        )  # noqa: E501
        if G == 8:
            if VARLEN:
                n, eos, xm1, xm2, xm3 = _fseq(
                    cu, ph0_base, t + 4, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
                )  # noqa: E501
            xm1, xm2, xm3 = _frow(
                py,
                t + 4,
                syt,
                T,
                m_d,
                xe,
                re,
                xm1,
                xm2,
                xm3,
                w0,
                w1,
                w2,
                w3,
                bv,
                W,
                ACT,
                HAS_BIAS,
                HAS_RES,
                MD,
                MT,
            )  # noqa: E501
            if VARLEN:
                n, eos, xm1, xm2, xm3 = _fseq(
                    cu, ph0_base, t + 5, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
                )  # noqa: E501
            xm1, xm2, xm3 = _frow(
                py,
                t + 5,
                syt,
                T,
                m_d,
                xf,
                rf,
                xm1,
                xm2,
                xm3,
                w0,
                w1,
                w2,
                w3,
                bv,
                W,
                ACT,
                HAS_BIAS,
                HAS_RES,
                MD,
                MT,
            )  # noqa: E501
            if VARLEN:
                n, eos, xm1, xm2, xm3 = _fseq(
                    cu, ph0_base, t + 6, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
                )  # noqa: E501
            xm1, xm2, xm3 = _frow(
                py,
                t + 6,
                syt,
                T,
                m_d,
                xg,
                rg,
                xm1,
                xm2,
                xm3,
                w0,
                w1,
                w2,
                w3,
                bv,
                W,
                ACT,
                HAS_BIAS,
                HAS_RES,
                MD,
                MT,
            )  # noqa: E501
            if VARLEN:
                n, eos, xm1, xm2, xm3 = _fseq(
                    cu, ph0_base, t + 7, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
                )  # noqa: E501
            xm1, xm2, xm3 = _frow(
                py,
                t + 7,
                syt,
                T,
                m_d,
                xh,
                rh,
                xm1,
                xm2,
                xm3,
                w0,
                w1,
                w2,
                w3,
                bv,
                W,
                ACT,
                HAS_BIAS,
                HAS_RES,
                MD,
                MT,
            )  # noqa: E501


# backward


@triton.jit
def _brow(
    pdx, pdht_base, cu, t, sdt, t0, T, D, m_d,
    xt, dyt, xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, n, eos,
    dw0, dw1, dw2, dw3, dbv, w0, w1, w2, w3, bv,
    W: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_DHT: tl.constexpr,
    VARLEN: tl.constexpr, ACC: tl.constexpr, HEAD: tl.constexpr,
    MD: tl.constexpr, MT: tl.constexpr,
):  # fmt: skip
    """Row t of the backward: its g, its dw / db contributions (ACC), and dx of row t-3,
    which takes g from its own sequence only (e3: row t-3's sequence end) plus dht when it
    is among its sequence's last W rows. HEAD: dx rows before t0 belong to the previous
    segment and are masked off. Returns the shifted rings and sums."""
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
    g0 = _g(z, dyt, ACT)
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
        _store(pdx, r, sdt, d, T, m_d & (r >= t0), MD, True)
    else:
        _store(pdx, r, sdt, d, T, m_d, MD, MT)
    return (x0, xm1, xm2, g0, gm1, gm2, eos, e1, e2, n, n1, n2, dw0, dw1, dw2, dw3, dbv)


@triton.jit
def _bseq(cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W: tl.constexpr,
          HAS_H0: tl.constexpr):  # fmt: skip
    n2, eos2 = _advance(cu, t, n, eos, N)
    if n2 != n:
        xm1, xm2, xm3 = _ring_start(ph0_base + tl.cast(n2, tl.int64) * D * W, m_d, W, HAS_H0)
    return n2, eos2, xm1, xm2, xm3


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "NS", "WORK", "N"])
def cconv_bwd_kernel(
    x, w, b, h0, cu, dy, dht, dx, dwp, dbp,
    T, D, N, TS, NS, WORK,
    sxb, sxt, sxd, sgb, sgt, sgd, sdb, sdt,
    W: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_H0: tl.constexpr,
    HAS_DHT: tl.constexpr, VARLEN: tl.constexpr, EVEN_T: tl.constexpr,
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
        n = _find_seq(cu, t0, N)
        bos = tl.load(cu + n).to(tl.int32)
        eos = tl.load(cu + n + 1).to(tl.int32)
    else:
        n = i_b
        bos = 0
        eos = T
    ph0 = ph0_base + tl.cast(n, tl.int64) * D * W

    w0 = _tap(w, o_d, m_d, W, 0)
    w1 = _tap(w, o_d, m_d, W, 1)
    w2 = _tap(w, o_d, m_d, W, 2)
    w3 = _tap(w, o_d, m_d, W, 3)
    bv = tl.full([BD], 0.0, tl.float32)
    if HAS_BIAS:
        bv = tl.load(b + o_d, mask=m_d, other=0.0).to(tl.float32)
    xm1 = _behind(px, t0 - 1, sxt, bos, ph0, m_d, W, 1, HAS_H0)
    xm2 = _behind(px, t0 - 2, sxt, bos, ph0, m_d, W, 2, HAS_H0)
    xm3 = _behind(px, t0 - 3, sxt, bos, ph0, m_d, W, 3, HAS_H0)
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
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _bseq(
                cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # noqa: E501
        xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3, dbv = _brow(
            pdx,
            pdht_base,
            cu,
            t,
            sdt,
            t0,
            T,
            D,
            m_d,
            xa,
            da,
            xm1,
            xm2,
            xm3,
            gm1,
            gm2,
            gm3,
            e1,
            e2,
            e3,
            n1,
            n2,
            n3,
            n,
            eos,
            dw0,
            dw1,
            dw2,
            dw3,
            dbv,
            w0,
            w1,
            w2,
            w3,
            bv,
            W,
            ACT,
            HAS_BIAS,
            HAS_DHT,
            VARLEN,
            True,
            True,
            MD,
            MT,
        )  # noqa: E501
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _bseq(
                cu, ph0_base, t + 1, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # noqa: E501
        xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3, dbv = _brow(
            pdx,
            pdht_base,
            cu,
            t + 1,
            sdt,
            t0,
            T,
            D,
            m_d,
            xb,
            db,
            xm1,
            xm2,
            xm3,
            gm1,
            gm2,
            gm3,
            e1,
            e2,
            e3,
            n1,
            n2,
            n3,
            n,
            eos,
            dw0,
            dw1,
            dw2,
            dw3,
            dbv,
            w0,
            w1,
            w2,
            w3,
            bv,
            W,
            ACT,
            HAS_BIAS,
            HAS_DHT,
            VARLEN,
            True,
            True,
            MD,
            MT,
        )  # noqa: E501
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _bseq(
                cu, ph0_base, t + 2, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # noqa: E501
        xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3, dbv = _brow(
            pdx,
            pdht_base,
            cu,
            t + 2,
            sdt,
            t0,
            T,
            D,
            m_d,
            xc,
            dc,
            xm1,
            xm2,
            xm3,
            gm1,
            gm2,
            gm3,
            e1,
            e2,
            e3,
            n1,
            n2,
            n3,
            n,
            eos,
            dw0,
            dw1,
            dw2,
            dw3,
            dbv,
            w0,
            w1,
            w2,
            w3,
            bv,
            W,
            ACT,
            HAS_BIAS,
            HAS_DHT,
            VARLEN,
            True,
            True,
            MD,
            MT,
        )  # noqa: E501
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _bseq(
                cu, ph0_base, t + 3, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # noqa: E501
        xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3, dbv = _brow(
            pdx,
            pdht_base,
            cu,
            t + 3,
            sdt,
            t0,
            T,
            D,
            m_d,
            xd,
            dd,
            xm1,
            xm2,
            xm3,
            gm1,
            gm2,
            gm3,
            e1,
            e2,
            e3,
            n1,
            n2,
            n3,
            n,
            eos,
            dw0,
            dw1,
            dw2,
            dw3,
            dbv,
            w0,
            w1,
            w2,
            w3,
            bv,
            W,
            ACT,
            HAS_BIAS,
            HAS_DHT,
            VARLEN,
            True,
            False,
            MD,
            MT,
        )  # noqa: E501
        if G == 8:
            if VARLEN:
                n, eos, xm1, xm2, xm3 = _bseq(
                    cu, ph0_base, t + 4, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
                )  # noqa: E501
            xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3, dbv = _brow(
                pdx,
                pdht_base,
                cu,
                t + 4,
                sdt,
                t0,
                T,
                D,
                m_d,
                xe,
                de,
                xm1,
                xm2,
                xm3,
                gm1,
                gm2,
                gm3,
                e1,
                e2,
                e3,
                n1,
                n2,
                n3,
                n,
                eos,
                dw0,
                dw1,
                dw2,
                dw3,
                dbv,
                w0,
                w1,
                w2,
                w3,
                bv,
                W,
                ACT,
                HAS_BIAS,
                HAS_DHT,
                VARLEN,
                True,
                False,
                MD,
                MT,
            )  # noqa: E501
            if VARLEN:
                n, eos, xm1, xm2, xm3 = _bseq(
                    cu, ph0_base, t + 5, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
                )  # noqa: E501
            xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3, dbv = _brow(
                pdx,
                pdht_base,
                cu,
                t + 5,
                sdt,
                t0,
                T,
                D,
                m_d,
                xf,
                df,
                xm1,
                xm2,
                xm3,
                gm1,
                gm2,
                gm3,
                e1,
                e2,
                e3,
                n1,
                n2,
                n3,
                n,
                eos,
                dw0,
                dw1,
                dw2,
                dw3,
                dbv,
                w0,
                w1,
                w2,
                w3,
                bv,
                W,
                ACT,
                HAS_BIAS,
                HAS_DHT,
                VARLEN,
                True,
                False,
                MD,
                MT,
            )  # noqa: E501
            if VARLEN:
                n, eos, xm1, xm2, xm3 = _bseq(
                    cu, ph0_base, t + 6, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
                )  # noqa: E501
            xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3, dbv = _brow(
                pdx,
                pdht_base,
                cu,
                t + 6,
                sdt,
                t0,
                T,
                D,
                m_d,
                xg,
                dg,
                xm1,
                xm2,
                xm3,
                gm1,
                gm2,
                gm3,
                e1,
                e2,
                e3,
                n1,
                n2,
                n3,
                n,
                eos,
                dw0,
                dw1,
                dw2,
                dw3,
                dbv,
                w0,
                w1,
                w2,
                w3,
                bv,
                W,
                ACT,
                HAS_BIAS,
                HAS_DHT,
                VARLEN,
                True,
                False,
                MD,
                MT,
            )  # noqa: E501
            if VARLEN:
                n, eos, xm1, xm2, xm3 = _bseq(
                    cu, ph0_base, t + 7, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
                )  # noqa: E501
            xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3, dbv = _brow(
                pdx,
                pdht_base,
                cu,
                t + 7,
                sdt,
                t0,
                T,
                D,
                m_d,
                xh,
                dh,
                xm1,
                xm2,
                xm3,
                gm1,
                gm2,
                gm3,
                e1,
                e2,
                e3,
                n1,
                n2,
                n3,
                n,
                eos,
                dw0,
                dw1,
                dw2,
                dw3,
                dbv,
                w0,
                w1,
                w2,
                w3,
                bv,
                W,
                ACT,
                HAS_BIAS,
                HAS_DHT,
                VARLEN,
                True,
                False,
                MD,
                MT,
            )  # noqa: E501

    # Halo: g of the next three rows completes this segment's last three dx rows; their dw
    # and db belong to the next segment's program.
    for t in range(t1, t1 + 3):
        ha = _load(px, t, sxt, T, m_d, MD, True)
        hd = _load(pdy, t, sgt, T, m_d, MD, True)
        if VARLEN:
            n, eos, xm1, xm2, xm3 = _bseq(
                cu, ph0_base, t, n, eos, N, D, xm1, xm2, xm3, m_d, W, HAS_H0
            )  # noqa: E501
        xm1, xm2, xm3, gm1, gm2, gm3, e1, e2, e3, n1, n2, n3, dw0, dw1, dw2, dw3, dbv = _brow(
            pdx,
            pdht_base,
            cu,
            t,
            sdt,
            t0,
            T,
            D,
            m_d,
            ha,
            hd,
            xm1,
            xm2,
            xm3,
            gm1,
            gm2,
            gm3,
            e1,
            e2,
            e3,
            n1,
            n2,
            n3,
            n,
            eos,
            dw0,
            dw1,
            dw2,
            dw3,
            dbv,
            w0,
            w1,
            w2,
            w3,
            bv,
            W,
            ACT,
            HAS_BIAS,
            HAS_DHT,
            VARLEN,
            False,
            False,
            MD,
            True,
        )  # noqa: E501

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


# states


@triton.jit
def _seq_bounds(cu, i_n, T, VARLEN: tl.constexpr):
    if VARLEN:
        bos = tl.load(cu + i_n).to(tl.int32)
        eos = tl.load(cu + i_n + 1).to(tl.int32)
    else:
        bos = 0
        eos = T
    return bos, eos


@triton.jit
def final_state_kernel(
    x, h0, cu, hT, T, D, sxb, sxt, sxd,
    W: tl.constexpr, HAS_H0: tl.constexpr, VARLEN: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    """hT[n, :, k] = x[L - W + k] of sequence n, or h0[n, :, k + L] where that is before it."""
    i_d = tl.program_id(0)
    i_n = tl.program_id(1)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    bos, eos = _seq_bounds(cu, i_n, T, VARLEN)
    L = eos - bos
    if VARLEN:
        px = x + o_d.to(tl.int64) * sxd
    else:
        px = x + i_n.to(tl.int64) * sxb + o_d.to(tl.int64) * sxd
    ph0 = h0 + i_n.to(tl.int64) * D * W + o_d * W
    phT = hT + i_n.to(tl.int64) * D * W + o_d * W
    for k in tl.static_range(W):
        p = L - W + k
        v = tl.load(px + tl.cast(bos + p, tl.int64) * sxt, mask=m_d & (p >= 0), other=0.0)
        v = v.to(tl.float32)
        if HAS_H0:
            v += tl.load(ph0 + (k + L), mask=m_d & (p < 0), other=0.0).to(tl.float32)
        tl.store(phT + k, v.to(hT.dtype.element_ty), mask=m_d)


@triton.jit
def dh0_kernel(
    x, w, b, h0, cu, dy, dht, dh0, T, D, sxb, sxt, sxd, sgb, sgt, sgd,
    W: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_DHT: tl.constexpr,
    VARLEN: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    """dh0[n, :, k] = sum_{m < k, m < L} weight[:, k-1-m] g[bos+m]  (+ dht[n, :, k-L], k >= L).

    g of the first W-1 rows of each sequence is recomputed here from x and the state."""
    i_d = tl.program_id(0)
    i_n = tl.program_id(1)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    bos, eos = _seq_bounds(cu, i_n, T, VARLEN)
    L = eos - bos
    if VARLEN:
        px = x + o_d.to(tl.int64) * sxd
        pdy = dy + o_d.to(tl.int64) * sgd
    else:
        px = x + i_n.to(tl.int64) * sxb + o_d.to(tl.int64) * sxd
        pdy = dy + i_n.to(tl.int64) * sgb + o_d.to(tl.int64) * sgd
    ph0 = h0 + i_n.to(tl.int64) * D * W + o_d * W
    pdht = dht + i_n.to(tl.int64) * D * W + o_d * W
    pdh0 = dh0 + i_n.to(tl.int64) * D * W + o_d * W
    bv = tl.full([BD], 0.0, tl.float32)
    if HAS_BIAS:
        bv = tl.load(b + o_d, mask=m_d, other=0.0).to(tl.float32)
    acc0 = tl.full([BD], 0.0, tl.float32)
    acc1 = acc0
    acc2 = acc0
    acc3 = acc0
    for m in tl.static_range(W - 1):
        # z of row bos+m: taps on x[bos+m-i], from the state when m-i < 0.
        z = bv
        for i in tl.static_range(W):
            wi = tl.load(w + o_d * W + (W - 1 - i), mask=m_d, other=0.0).to(tl.float32)
            if m - i >= 0:
                xv = tl.load(
                    px + tl.cast(bos + m - i, tl.int64) * sxt, mask=m_d & (m < L), other=0.0
                )  # noqa: E501
            else:
                xv = tl.load(ph0 + (W + m - i), mask=m_d, other=0.0)
            z += wi * xv.to(tl.float32)
        dyv = tl.load(pdy + tl.cast(bos + m, tl.int64) * sgt, mask=m_d & (m < L), other=0.0)
        g = _g(z, dyv, ACT)
        # g[bos+m] reaches state slot k through weight[:, k-1-m], for k > m.
        for k in tl.static_range(m + 1, W):
            wk = tl.load(w + o_d * W + (k - 1 - m), mask=m_d, other=0.0).to(tl.float32)
            if k == 1:
                acc1 += wk * g
            elif k == 2:
                acc2 += wk * g
            elif k == 3:
                acc3 += wk * g
    for k in tl.static_range(W):
        if k == 0:
            v = acc0
        elif k == 1:
            v = acc1
        elif k == 2:
            v = acc2
        else:
            v = acc3
        if HAS_DHT:
            v += tl.load(pdht + (k - L), mask=m_d & (k >= L), other=0.0).to(tl.float32)
        tl.store(pdh0 + k, v.to(dh0.dtype.element_ty), mask=m_d)


# decode


@triton.jit
def update_kernel(
    x, cache, res, y, w, b, D, sxn, sxd, srn, srd, syn, syd,
    W: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr,
    BD: tl.constexpr,
):  # fmt: skip
    """One token per sequence: cache[n] <- [cache[n, :, 1:], x[n]]; y[n] from the new cache."""
    i_d = tl.program_id(0)
    i_n = tl.program_id(1).to(tl.int64)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    pc = cache + i_n * D * W + o_d * W
    xv = tl.load(x + i_n * sxn + o_d * sxd, mask=m_d, other=0.0).to(tl.float32)
    z = tl.full([BD], 0.0, tl.float32)
    if HAS_BIAS:
        z += tl.load(b + o_d, mask=m_d, other=0.0).to(tl.float32)
    for k in tl.static_range(W - 1):
        c = tl.load(pc + (k + 1), mask=m_d, other=0.0).to(tl.float32)
        z += tl.load(w + o_d * W + k, mask=m_d, other=0.0).to(tl.float32) * c
        tl.store(pc + k, c.to(cache.dtype.element_ty), mask=m_d)
    z += tl.load(w + o_d * W + (W - 1), mask=m_d, other=0.0).to(tl.float32) * xv
    tl.store(pc + (W - 1), xv.to(cache.dtype.element_ty), mask=m_d)
    yv = _act(z, ACT)
    if HAS_RES:
        yv += tl.load(res + i_n * srn + o_d * srd, mask=m_d, other=0.0).to(tl.float32)
    tl.store(y + i_n * syn + o_d * syd, yv.to(y.dtype.element_ty), mask=m_d)


_KEY = ["W", "WORK", "ACT", "HAS_BIAS", "HAS_H0", "VARLEN"]
if AUTOTUNE:
    # The key holds no raw B or T: WORK is B*T*D rounded up to a power of four and capped
    # (_work_bucket), so packed or varying lengths tune a handful of times in all. The
    # autotuner adds the tensors' dtypes itself.
    cconv_fwd_tuned = triton.autotune(configs=_configs(), key=[*_KEY, "HAS_RES"])(cconv_fwd_kernel)
    cconv_bwd_tuned = triton.autotune(configs=_configs(), key=[*_KEY, "HAS_DHT"])(cconv_bwd_kernel)


# host


def _segment(B: int, T: int, D: int, BD: int) -> int:
    """Rows per program, a multiple of SEG_ALIGN. Large calls: 001's rule (about
    TARGET_PROGRAMS programs per 1024-wide strip, at least MIN_SEG rows). Small calls, where
    that leaves fewer than MIN_PROGRAMS programs: shorter segments, down to MIN_SEG_SMALL."""
    strips = max(1, D // 1024)
    ts = (B * T * strips) // TARGET_PROGRAMS
    ts = max(MIN_SEG, (ts // SEG_ALIGN) * SEG_ALIGN)
    ts = min(ts, triton.cdiv(T, SEG_ALIGN) * SEG_ALIGN)
    nd = triton.cdiv(D, BD)
    if nd * B * triton.cdiv(T, ts) < MIN_PROGRAMS:
        want = (B * T * nd) // MIN_PROGRAMS
        ts = min(ts, max(MIN_SEG_SMALL, (want // SEG_ALIGN) * SEG_ALIGN))
    return ts


def _work_bucket(n: int) -> int:
    """n = B*T*D rounded up to a power of four, capped at WORK_CAP: the autotune key's size."""
    p = 1 << (max(n, 1) - 1).bit_length()
    if p.bit_length() % 2 == 0:
        p <<= 1
    return min(p, WORK_CAP)


def _check(x, w, bias, residual, initial_state, activation, cu_seqlens) -> tuple[int, int]:
    """Validate one call; returns (N, W). Raises ValueError naming what is wrong."""
    if x.dim() != 3:
        raise ValueError(f"x must be [B, T, D], got shape {tuple(x.shape)}")
    if x.dtype not in X_DTYPES:
        raise ValueError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    B, T, D = x.shape
    if w.dim() != 2 or w.shape[0] != D or not 1 <= w.shape[1] <= WMAX:
        raise ValueError(f"weight must be [D={D}, W<={WMAX}], got {tuple(w.shape)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be None, 'silu' or 'swish', got {activation!r}")
    if bias is not None and tuple(bias.shape) != (D,):
        raise ValueError(f"bias must be [D={D}], got {tuple(bias.shape)}")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual must be shaped like x {tuple(x.shape)}")
    if cu_seqlens is not None:
        if B != 1 or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
            raise ValueError("cu_seqlens needs x [1, total, D] and cu_seqlens [N+1]")
        N = cu_seqlens.numel() - 1
    else:
        N = B
    W = w.shape[1]
    if initial_state is not None and tuple(initial_state.shape) != (N, D, W):
        raise ValueError(f"initial_state must be [N={N}, D={D}, W={W}]")
    return N, W


def _fixed() -> dict:
    return {"BD": 4 * 32 * FIXED_WARPS, "G": FIXED_G, "num_warps": FIXED_WARPS}


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
    [N, D, W] in x's dtype, or None. Raises ValueError on other shapes and dtypes.
    """
    N, W = _check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    B, T, D = x.shape
    w = w.contiguous()
    h0 = initial_state.contiguous() if initial_state is not None else None
    y = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if y.numel() > 0:
        _fwd_launch(x, w, bias, residual, h0, cu_seqlens, y, N, W, ACTIVATIONS[activation])
    hT = None
    if output_final_state:
        hT = torch.empty((N, D, W), dtype=x.dtype, device=x.device)
        BD = 128
        final_state_kernel[(triton.cdiv(D, BD), N)](
            x, h0 if h0 is not None else hT, cu_seqlens if cu_seqlens is not None else hT,
            hT, T, D, *x.stride(), W=W, HAS_H0=h0 is not None,
            VARLEN=cu_seqlens is not None, BD=BD, num_warps=1,
        )  # fmt: skip
    return y, hT


def _fwd_launch(x, w, bias, residual, h0, cu, y, N, W, act):
    B, T, D = x.shape
    work = B * T * D
    tuned = AUTOTUNE and work >= SMALL_WORK
    cfg = _fixed()
    TS = _segment(B, T, D, 512 if tuned else cfg["BD"])
    NS = triton.cdiv(T, TS)
    res = residual if residual is not None else x
    args = (
        x, w, bias if bias is not None else w, res, h0 if h0 is not None else w,
        cu if cu is not None else w, y, T, D, N, TS, _work_bucket(work),
        *x.stride(), *res.stride(), y.stride(0), y.stride(1),
    )  # fmt: skip
    flags = dict(
        W=W, ACT=act, HAS_BIAS=bias is not None, HAS_RES=residual is not None,
        HAS_H0=h0 is not None, VARLEN=cu is not None, EVEN_T=T % TS == 0,
    )  # fmt: skip
    if tuned:
        cconv_fwd_tuned[lambda m: (triton.cdiv(D, m["BD"]), NS, B)](*args, **flags)
    else:
        cconv_fwd_kernel[(triton.cdiv(D, cfg["BD"]), NS, B)](*args, **flags, **cfg)


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
    the initial state's dtype (None without one). dht reaches dx of every final-state slot,
    slot 0 included (fla 0.6.0 drops slot 0's gradient). Raises ValueError on bad shapes.
    """
    N, W = _check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    if dht is not None and tuple(dht.shape) != (N, x.shape[2], W):
        raise ValueError(f"dht must be [N, D, W] = {(N, x.shape[2], W)}")
    B, T, D = x.shape
    act = ACTIVATIONS[activation]
    w_c = w.contiguous()
    h0 = initial_state.contiguous() if initial_state is not None else None
    dht_c = dht.contiguous() if dht is not None else None
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    dw = torch.zeros_like(w)
    db = torch.zeros_like(bias) if bias is not None else None
    if dx.numel() > 0:
        work = B * T * D
        tuned = AUTOTUNE and work >= SMALL_WORK
        cfg = _fixed()
        TS = _segment(B, T, D, 512 if tuned else cfg["BD"])
        NS = triton.cdiv(T, TS)
        dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
        dbp = (
            torch.empty((B * NS, D), dtype=torch.float32, device=x.device)
            if bias is not None
            else dwp
        )  # noqa: E501
        args = (
            x, w_c, bias if bias is not None else w_c, h0 if h0 is not None else w_c,
            cu_seqlens if cu_seqlens is not None else w_c, dy,
            dht_c if dht_c is not None else w_c, dx, dwp, dbp,
            T, D, N, TS, NS, _work_bucket(work),
            *x.stride(), *dy.stride(), dx.stride(0), dx.stride(1),
        )  # fmt: skip
        flags = dict(
            W=W, ACT=act, HAS_BIAS=bias is not None, HAS_H0=h0 is not None,
            HAS_DHT=dht_c is not None, VARLEN=cu_seqlens is not None, EVEN_T=T % TS == 0,
        )  # fmt: skip
        if tuned:
            cconv_bwd_tuned[lambda m: (triton.cdiv(D, m["BD"]), NS, B)](*args, **flags)
        else:
            cconv_bwd_kernel[(triton.cdiv(D, cfg["BD"]), NS, B)](*args, **flags, **cfg)
        dw = dwp.sum(0).to(w.dtype)
        if bias is not None:
            db = dbp.sum(0).to(bias.dtype)
    dh0 = None
    if h0 is not None:
        dh0 = torch.empty_like(h0)
        BD = 128
        dh0_kernel[(triton.cdiv(D, BD), N)](
            x, w_c, bias if bias is not None else w_c, h0,
            cu_seqlens if cu_seqlens is not None else w_c, dy,
            dht_c if dht_c is not None else h0, dh0, T, D, *x.stride(), *dy.stride(),
            W=W, ACT=act, HAS_BIAS=bias is not None, HAS_DHT=dht_c is not None,
            VARLEN=cu_seqlens is not None, BD=BD, num_warps=1,
        )  # fmt: skip
    if dht_c is not None and dx.numel() == 0:
        pass  # no rows: dht reaches dh0 only (handled above)
    return dx, dw, db, (dy if residual is not None else None), dh0


def cconv_update(
    x: torch.Tensor,
    cache: torch.Tensor,
    residual: torch.Tensor | None,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fla's causal_conv1d_update: one token per sequence, the cache updated in place.

    x: [N, D], [1, N, D] or [N, 1, D] any strides; cache [N, D, W] contiguous, any float
    dtype; residual shaped like x; w [D, W]; bias [D]. Returns (y shaped like x,
    contiguous, in x's dtype; cache). Raises ValueError on other shapes.
    """
    if x.dim() == 2:
        N, D = x.shape
        sxn, sxd = x.stride()
    elif x.dim() == 3 and x.shape[0] == 1:
        N, D = x.shape[1], x.shape[2]
        sxn, sxd = x.stride(1), x.stride(2)
    elif x.dim() == 3 and x.shape[1] == 1:
        N, D = x.shape[0], x.shape[2]
        sxn, sxd = x.stride(0), x.stride(2)
    else:
        raise ValueError(f"x must be [N, D], [1, N, D] or [N, 1, D], got {tuple(x.shape)}")
    W = w.shape[1]
    if tuple(cache.shape) != (N, D, W) or not cache.is_contiguous():
        raise ValueError(f"cache must be a contiguous [N={N}, D={D}, W={W}] tensor")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    y2 = y.view(N, D)
    if residual is not None:
        r2 = residual.reshape(N, D)
        srn, srd = r2.stride()
    else:
        r2, srn, srd = x, 0, 0
    w = w.contiguous()
    BD = 128
    update_kernel[(triton.cdiv(D, BD), N)](
        x, cache, r2, y2, w, bias if bias is not None else w, D, sxn, sxd, srn, srd,
        *y2.stride(), W=W, ACT=ACTIVATIONS[activation], HAS_BIAS=bias is not None,
        HAS_RES=residual is not None, BD=BD, num_warps=1,
    )  # fmt: skip
    return y, cache


def cconv_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The family's dense entry point: y = silu(conv(x, w)), [B, T, D] in x's dtype."""
    return conv_fwd(x, w)[0]


def cconv_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The family's dense entry point: (dx, dw) of cconv_fwd for dy."""
    dx, dw, _db, _dr, _dh0 = conv_bwd(x, w, dy)
    return dx, dw


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
