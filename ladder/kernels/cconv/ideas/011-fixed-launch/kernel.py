"""cconv/011 fixed-launch: idea 010's kernels with no autotuning, every launch through 010's
launch cache, and the final state written by the forward's own launch.

Three changes, device arithmetic unchanged:

1. A fixed configuration per kernel and size bucket (`_fwd_config`, `_bwd_config`) instead
   of Triton's autotuner. The table is the autotuner's picks on the H200 over two spaces
   (its own eight configurations and a wider one with register caps from 64 to 128):
   docs/results/cconv-tune-h200-20261202.json. Where the picks split, the table takes the
   configuration within 2.5% of the best at every bucket and case measured. A call at a new
   size bucket, a new T or a new packed length then compiles at most one kernel and times
   nothing; 010 timed eight configurations per kernel and bucket (9.1 s at a new bucket,
   21.7 s for the first forward+backward of a new key, docs/results/cconv-host-h200-20261202b.json).
   Calls below CCONV_SMALL_WORK keep 004's fixed configuration and 005's small-call grid.
2. Every launch of the case loops (006's forward, 007's backward, 009's fp32 backward, 002's
   initial-state gradient) goes through `launch.CachedLaunch` as 010's dense launches do.
3. With `output_final_state`, the case forward writes the final state from extra programs of
   its own grid (`case_fwd_ht_kernel`: programs past the last time segment copy each
   sequence's last W rows, or its initial state's, into hT, as 002's final_state_kernel
   does), so a call with states is one launch, not two. The dense case asking for the final
   state takes the case loop for that reason. Where the extra programs would push the grid
   past 65535 segments (packed batches of very many sequences) the separate kernel runs.

Env knobs: those of 010 and the modules it imports, except CCONV_AUTOTUNE and CCONV_MAXNREG
(nothing is tuned here), and
    CCONV_FUSE_HT   1 (default): the final state from the forward's launch; 0: 002's kernel
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i002.kernel import FIXED_G, FIXED_WARPS, SMALL_WORK
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i006 import kernel as k6
from ladder.kernels.cconv.ideas.i007 import kernel as k7
from ladder.kernels.cconv.ideas.i009 import kernel as k9
from ladder.kernels.cconv.ideas.i010 import kernel as k10
from ladder.kernels.cconv.ideas.i010 import launch

FUSE_HT = os.environ.get("CCONV_FUSE_HT", "1") == "1"

CASES = ("dense", "bias-residual", "state", "varlen", "fp32")  # 010's, every case
WMAX = k10.WMAX
GRID_Y_MAX = 65535  # CUDA's limit on a grid's second dimension

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
    "launches",
]

cconv_update = k10.cconv_update  # the decode step: 002's kernel

# (num_warps, G, maxnreg) by size bucket (k4._work_bucket: B*T*D rounded up to a power of
# four, capped at 4^13), from the picks in docs/results/cconv-tune-*h200-20261202.json.
_DENSE_FWD = {4**11: (2, 8, 128), 4**12: (4, 8, 128), 4**13: (2, 8, None)}
_DENSE_BWD = {4**11: (2, 8, None), 4**12: (4, 8, 128), 4**13: (4, 8, 128)}
_CASE_FWD = (2, 8, None)
_CASE_FWD_RES = (2, 8, 128)  # with a residual: one more stream in flight per row
_CASE_BWD = (2, 8, 128)  # every case, fp32 x's compensated loop too
_SMALL = (FIXED_WARPS, FIXED_G, None)  # below SMALL_WORK: 004's fixed configuration


def _bucket(work: int) -> int:
    """The table's bucket for a size bucket: 4^11 (where CCONV_SMALL_WORK's default puts the
    smallest call the table serves) to 4^13 (the cap)."""
    return min(max(work, 4**11), 4**13)


def _fwd_config(n: int, work: int, dense: bool, has_res: bool) -> tuple[int, int, int | None]:
    """(num_warps, G, maxnreg) of a forward launch on a call of n = B*T*D elements, whose size
    bucket is `work`."""
    if n < SMALL_WORK:
        return _SMALL
    if dense:
        return _DENSE_FWD[_bucket(work)]
    return _CASE_FWD_RES if has_res else _CASE_FWD


def _bwd_config(n: int, work: int, dense: bool) -> tuple[int, int, int | None]:
    """(num_warps, G, maxnreg) of a backward launch on a call of n = B*T*D elements, whose
    size bucket is `work`."""
    if n < SMALL_WORK:
        return _SMALL
    return _DENSE_BWD[_bucket(work)] if dense else _CASE_BWD


def _launch_kw(cfg: tuple[int, int, int | None]) -> dict:
    nw, g, reg = cfg
    kw = {"BD": 4 * 32 * nw, "G": g, "num_warps": nw}
    if reg is not None:
        kw["maxnreg"] = reg
    return kw


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------------------
# device: the case forward with the final state from its own grid
# ----------------------------------------------------------------------------------------

_case_fwd_body = k6.case_fwd_kernel.fn  # under 006's MD heuristic: the JIT function itself


@triton.heuristics({"MD": lambda a: a["D"] % a["BD"] != 0})
@triton.jit(do_not_specialize=["T", "TS", "NS", "WORK", "N"])
def case_fwd_ht_kernel(
    x, w, b, res, h0, cu, y, hT,
    T, D, N, TS, NS, WORK,
    sxb, sxt, sxd, srb, srt, srd, syb, syt,
    W: tl.constexpr, ACT: tl.constexpr, FAST: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_RES: tl.constexpr, HAS_H0: tl.constexpr, VARLEN: tl.constexpr, EVEN_T: tl.constexpr,
    BD: tl.constexpr, G: tl.constexpr, MD: tl.constexpr,
):  # fmt: skip
    """Programs (i_d, i_s < NS, i_b) are 006's case_fwd_kernel. Programs (i_d, NS + n, 0)
    (packed) or (i_d, NS, b) (one sequence per row b) write hT[n, strip i_d, k] = x[L - W +
    k] of sequence n, or h0[n, :, k + L] where that is before the sequence (002's
    final_state_kernel)."""
    i_s = tl.program_id(1)
    if i_s < NS:
        _case_fwd_body(
            x, w, b, res, h0, cu, y, T, D, N, TS, WORK, sxb, sxt, sxd, srb, srt, srd, syb,
            syt, W, ACT, FAST, HAS_BIAS, HAS_RES, HAS_H0, VARLEN, EVEN_T, BD, G, MD,
        )  # fmt: skip
    else:
        i_d = tl.program_id(0)
        if VARLEN:
            i_n = i_s - NS
        else:
            i_n = tl.program_id(2)
        o_d = i_d * BD + tl.arange(0, BD)
        m_d = o_d < D
        bos, eos = box._seq_bounds(cu, i_n, T, VARLEN)
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


# ----------------------------------------------------------------------------------------
# host
# ----------------------------------------------------------------------------------------

_DENSE_FWD_L = launch.CachedLaunch(k4.cconv_fwd_kernel)
_DENSE_BWD_L = launch.CachedLaunch(k4.cconv_bwd_kernel)
_CASE_FWD_L = launch.CachedLaunch(case_fwd_ht_kernel)
_CASE_BWD_L = launch.CachedLaunch(k7.case_bwd_kernel)
_CASE_BWD32_L = launch.CachedLaunch(k9.case_bwd_kahan_kernel)
_DH0_L = launch.CachedLaunch(box.dh0_kernel)
_HT_L = launch.CachedLaunch(box.final_state_kernel)


def launches() -> dict[str, tuple[int, int]]:
    """{kernel: (cached launches, launches through Triton)} so far."""
    named = {"dense_fwd": _DENSE_FWD_L, "dense_bwd": _DENSE_BWD_L, "case_fwd": _CASE_FWD_L,
             "case_bwd": _CASE_BWD_L, "case_bwd_fp32": _CASE_BWD32_L, "dh0": _DH0_L,
             "final_state": _HT_L}  # fmt: skip
    return {k: (c.hits, c.misses) for k, c in named.items()}


def _launch(cache: launch.CachedLaunch, grid, args: tuple, kwargs: dict, D: int) -> None:
    if k10.LAUNCH_CACHE:
        cache.launch(grid, args, kwargs, (D,))
    else:
        cache.kernel[grid](*args, **kwargs)


def cconv_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = silu(causal depthwise conv(x, w)): 004's dense loop at the table's configuration,
    on 010's grid (005's small-call grid below CCONV_SMALL_WORK).

    x: [B, T, D] fp16/bf16, any strides. w: [D, W] any float dtype, W <= 4.
    Returns y: [B, T, D] contiguous, x's dtype. Raises ValueError on other shapes/dtypes.
    """
    k4._check(x, w)
    B, T, D = x.shape
    W = w.shape[1]
    if not w.is_contiguous():
        w = w.contiguous()
    y = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if B * T * D == 0:
        return y
    work = k4._work_bucket(B, T, D)
    small = B * T * D < SMALL_WORK
    TS = k10._segment_small(B, T, D, small)
    NS = (T + TS - 1) // TS
    kw = _launch_kw(_fwd_config(B * T * D, work, True, False))
    BD = kw["BD"]
    sxb, sxt, sxd = x.stride()
    args = (x, w, y, T, D, TS, work, sxb, sxt, sxd, T * D, D)
    kw.update(W=W, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16, EVEN_T=T % TS == 0)
    _launch(_DENSE_FWD_L, lambda m: (_cdiv(D, BD), NS, B), args, kw, D)
    return y


def cconv_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of y = cconv_fwd(x, w) for the upstream gradient dy: 004's dense loop and
    grid at the table's configuration.

    x, dy: [B, T, D] fp16/bf16, any strides (dy may have zero strides). w: [D, W].
    Returns dx: [B, T, D] contiguous in x's dtype and dw: [D, W] in w's dtype, reduced
    deterministically from fp32 per-program partials. Raises ValueError on other shapes and
    dtypes.
    """
    k4._check(x, w)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    B, T, D = x.shape
    W = w.shape[1]
    w_c = w if w.is_contiguous() else w.contiguous()
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if B * T * D == 0:
        return dx, torch.zeros_like(w)
    work = k4._work_bucket(B, T, D)
    TS = k10._segment(B, T, D)
    NS = (T + TS - 1) // TS
    kw = _launch_kw(_bwd_config(B * T * D, work, True))
    BD = kw["BD"]
    dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
    args = (
        x, w_c, dy, dx, dwp, T, D, TS, NS, work, *x.stride(), *dy.stride(), T * D, D,
    )  # fmt: skip
    kw.update(W=W, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16, EVEN_T=T % TS == 0)
    _launch(_DENSE_BWD_L, lambda m: (_cdiv(D, BD), NS, B), args, kw, D)
    return dx, dwp.sum(0).to(w.dtype)


def _case_segment(B: int, T: int, D: int) -> int:
    """Rows per program of the case loops: 002's rule, as 006 and 007 call it (512-wide
    strips from CCONV_SMALL_WORK elements up, the fixed configuration's below); any T = 0
    call gets 8 (it has no segment to walk)."""
    if T == 0:
        return k4.SEG_ALIGN
    small = B * T * D < SMALL_WORK
    return box._segment(B, T, D, 4 * 32 * FIXED_WARPS if small else 512)


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
    [N, D, W] in x's dtype, or None. The dense case without a residual or final state runs
    cconv_fwd; every other call case_fwd_ht_kernel (one launch, final state included).
    Raises ValueError on other shapes and dtypes (002's checks).
    """
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    dense = k4._dense_case(x, activation, bias, initial_state, cu_seqlens)
    if dense and residual is None and not output_final_state:
        return cconv_fwd(x, w), None
    B, T, D = x.shape
    w = w.contiguous()
    h0 = initial_state.contiguous() if initial_state is not None else None
    y = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    hT = torch.empty((N, D, W), dtype=x.dtype, device=x.device) if output_final_state else None
    if D == 0:
        return y, hT
    TS = _case_segment(B, T, D)
    NS = _cdiv(T, TS)
    NH = (N if cu_seqlens is not None else 1) if output_final_state else 0
    fused = FUSE_HT and NS + NH <= GRID_Y_MAX
    if y.numel() > 0 or (fused and NH > 0 and N > 0):
        work = box._work_bucket(B * T * D)
        kw = _launch_kw(_fwd_config(B * T * D, work, False, residual is not None))
        BD = kw["BD"]
        ns_run = NS if y.numel() > 0 else 0
        nh_run = NH if fused else 0
        res = residual if residual is not None else x
        args = (
            x, w, bias if bias is not None else w, res, h0 if h0 is not None else w,
            cu_seqlens if cu_seqlens is not None else w, y, hT if nh_run else w,
            T, D, N, TS, ns_run, work, *x.stride(), *res.stride(), y.stride(0), y.stride(1),
        )  # fmt: skip
        kw.update(
            W=W, ACT=box.ACTIVATIONS[activation], FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16,
            HAS_BIAS=bias is not None, HAS_RES=residual is not None, HAS_H0=h0 is not None,
            VARLEN=cu_seqlens is not None, EVEN_T=T % TS == 0,
        )  # fmt: skip
        _launch(_CASE_FWD_L, lambda m: (_cdiv(D, BD), ns_run + nh_run, B), args, kw, D)
    if hT is not None and not fused and N > 0:
        _launch(
            _HT_L, lambda m: (_cdiv(D, 128), N),
            (x, h0 if h0 is not None else hT, cu_seqlens if cu_seqlens is not None else hT,
             hT, T, D, *x.stride()),
            dict(W=W, HAS_H0=h0 is not None, VARLEN=cu_seqlens is not None, BD=128,
                 num_warps=1), D,
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
    """(dx, dw, db, dresidual, dh0) of conv_fwd for the output gradients dy (and dht).

    dy like x (any strides); dht [N, D, W] or None. dx [B, T, D] contiguous in x's dtype;
    dw [D, W] in w's dtype and db [D] in bias's dtype, reduced in a fixed order from fp32
    per-program partials; dresidual is dy itself (None without residual); dh0 [N, D, W] in
    the initial state's dtype (None without one). The dense case without dht runs
    cconv_bwd; fp32 x 009's compensated loop; every other call 007's case loop; dh0 002's
    kernel. Raises ValueError on bad shapes (002's checks).
    """
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    if dht is None and k4._dense_case(x, activation, bias, initial_state, cu_seqlens):
        dx, dw = cconv_bwd(x, w, dy)
        return dx, dw, None, (dy if residual is not None else None), None
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
        TS = _case_segment(B, T, D)
        NS = _cdiv(T, TS)
        work = box._work_bucket(B * T * D)
        kw = _launch_kw(_bwd_config(B * T * D, work, False))
        BD = kw["BD"]
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
            T, D, N, TS, NS, work, *x.stride(), *dy.stride(), dx.stride(0), dx.stride(1),
        )  # fmt: skip
        kw.update(
            W=W, ACT=act, HAS_BIAS=bias is not None, HAS_H0=h0 is not None,
            HAS_DHT=dht_c is not None, VARLEN=cu_seqlens is not None, EVEN_T=T % TS == 0,
        )  # fmt: skip
        if x.dtype == torch.float32:
            _launch(_CASE_BWD32_L, lambda m: (_cdiv(D, BD), NS, B), args, kw, D)
        else:
            kw["FAST"] = k4.FAST_SIGMOID and x.dtype == torch.bfloat16
            _launch(_CASE_BWD_L, lambda m: (_cdiv(D, BD), NS, B), args, kw, D)
        dw = dwp.sum(0).to(w.dtype)
        if bias is not None:
            db = dbp.sum(0).to(bias.dtype)
    dh0 = None
    if h0 is not None:
        dh0 = torch.empty_like(h0)
        if dh0.numel() > 0:
            _launch(
                _DH0_L, lambda m: (_cdiv(D, 128), N),
                (x, w_c, bias if bias is not None else w_c, h0,
                 cu_seqlens if cu_seqlens is not None else w_c, dy,
                 dht_c if dht_c is not None else h0, dh0, T, D, *x.stride(), *dy.stride()),
                dict(W=W, ACT=act, HAS_BIAS=bias is not None, HAS_DHT=dht_c is not None,
                     VARLEN=cu_seqlens is not None, BD=128, num_warps=1), D,
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
