"""cconv/010 launch-cache: idea 009 with the dense entry points launched through a per-
signature cache of compiled kernels, so a call's host work is its tensors and one launch.

009's kernels and routes run unchanged: every case (bias, residual, states, packed sequences,
fp32 x) through 008's case loops with 009's compensated dw for fp32 x, and the dense case
through 004's loop on 005's small-call grid. Only the dense forward and backward's host side
differs. 005's `cconv_fwd` costs 49-68 us of host time per call on the H200 against 16-22
us for a one-kernel torch op (005's records), most of it in Triton's autotuner, heuristics
and binder, which redo per call what the call's signature already decided. Here each of the
four dense kernels (autotuned and fixed, forward and backward) goes through
`launch.CachedLaunch`: the first call at a signature runs through Triton and keeps the
compiled kernel, later ones call its launcher directly (the signature and what is never
cached: `launch.py`). The launched kernel, grid and arguments are the ones Triton's path
would launch, so results are 009's bit for bit.

Env knobs: those of 009 and the modules it imports (004's CCONV_AUTOTUNE, CCONV_SMALL_WORK,
CCONV_FIXED_WARPS, CCONV_FIXED_G, ...; 005's CCONV_MIN_PROGRAMS, CCONV_SMALL_BWD), and
    CCONV_LAUNCH_CACHE   1 (default): cached launches; 0: every launch through Triton, as 009
"""

from __future__ import annotations

import os

import torch
from ladder.kernels.cconv.ideas.i002.kernel import AUTOTUNE, FIXED_G, FIXED_WARPS, SMALL_WORK
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i005 import kernel as k5
from ladder.kernels.cconv.ideas.i009 import kernel as k9
from ladder.kernels.cconv.ideas.i010 import launch

LAUNCH_CACHE = os.environ.get("CCONV_LAUNCH_CACHE", "1") == "1"

CASES = ("dense", "bias-residual", "state", "varlen", "fp32")  # 009's, every case
WMAX = k9.WMAX

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

# Every case entry point and the decode step are 009's.
conv_fwd = k9.conv_fwd
conv_bwd = k9.conv_bwd
cconv_fwd_case = k9.cconv_fwd_case
cconv_bwd_case = k9.cconv_bwd_case
cconv_update = k9.cconv_update

_FWD_TUNED = launch.CachedLaunch(k4.cconv_fwd_tuned) if AUTOTUNE else None
_FWD_FIXED = launch.CachedLaunch(k4.cconv_fwd_kernel)
_BWD_TUNED = launch.CachedLaunch(k4.cconv_bwd_tuned) if AUTOTUNE else None
_BWD_FIXED = launch.CachedLaunch(k4.cconv_bwd_kernel)
_FIXED_BD = 4 * 32 * FIXED_WARPS
_FIXED_KW = {"BD": _FIXED_BD, "G": FIXED_G, "num_warps": FIXED_WARPS}


def launches() -> dict[str, tuple[int, int]]:
    """{kernel: (cached launches, launches through Triton)} of the dense entry points so far."""
    named = {"fwd_tuned": _FWD_TUNED, "fwd_fixed": _FWD_FIXED, "bwd_tuned": _BWD_TUNED,
             "bwd_fixed": _BWD_FIXED}  # fmt: skip
    return {k: (c.hits, c.misses) for k, c in named.items() if c is not None}


def _cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints. (``triton.cdiv`` called from the host goes through a JIT
    function's call machinery: a few microseconds each.)"""
    return -(-a // b)


def _segment(B: int, T: int, D: int) -> int:
    """004's rows per program (k4._segment), in host integer arithmetic."""
    strips = max(1, D // 1024)
    ts = (B * T * strips) // k4.TARGET_PROGRAMS
    ts = max(k4.MIN_SEG, (ts // k4.SEG_ALIGN) * k4.SEG_ALIGN)
    return min(ts, _cdiv(T, k4.SEG_ALIGN) * k4.SEG_ALIGN)


def _segment_small(B: int, T: int, D: int, small: bool) -> int:
    """005's rows per program (k5._segment: 004's, shortened on a small call on the fixed
    configuration until about MIN_PROGRAMS programs), in host integer arithmetic."""
    ts = _segment(B, T, D)
    if not small or k5.MIN_PROGRAMS <= 0:
        return ts
    nd = _cdiv(D, _FIXED_BD)
    if nd * B * _cdiv(T, ts) >= k5.MIN_PROGRAMS:
        return ts
    want = (B * T * nd) // k5.MIN_PROGRAMS
    return min(ts, max(k5.MIN_SEG_SMALL, (want // k4.SEG_ALIGN) * k4.SEG_ALIGN))


def _launch(cache: launch.CachedLaunch, grid, args: tuple, kwargs: dict, D: int) -> None:
    if LAUNCH_CACHE:
        cache.launch(grid, args, kwargs, (D,))
    else:
        cache.kernel[grid](*args, **kwargs)


def cconv_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = silu(causal depthwise conv(x, w)): 005's dense forward (004's loop on the
    small-call grid), launched through the cache.

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
    tuned = AUTOTUNE and B * T * D >= SMALL_WORK
    TS = _segment_small(B, T, D, not tuned)
    NS = (T + TS - 1) // TS
    fast = k4.FAST_SIGMOID and x.dtype == torch.bfloat16
    sxb, sxt, sxd = x.stride()
    args = (x, w, y, T, D, TS, k4._work_bucket(B, T, D), sxb, sxt, sxd, T * D, D)
    even = T % TS == 0
    if tuned:
        grid = lambda m: (_cdiv(D, m["BD"]), NS, B)  # noqa: E731
        _launch(_FWD_TUNED, grid, args, {"W": W, "FAST": fast, "EVEN_T": even}, D)
    else:
        grid = lambda m: (_cdiv(D, _FIXED_BD), NS, B)  # noqa: E731
        kw = {"W": W, "FAST": fast, "EVEN_T": even, **_FIXED_KW}
        _launch(_FWD_FIXED, grid, args, kw, D)
    return y


def cconv_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of y = cconv_fwd(x, w) for the upstream gradient dy: 005's dense backward
    (004's loop and grid), launched through the cache.

    x, dy: [B, T, D] fp16/bf16, any strides (dy may have zero strides). w: [D, W].
    Returns dx: [B, T, D] contiguous in x's dtype and dw: [D, W] in w's dtype, reduced
    deterministically from fp32 per-program partials. Raises ValueError on other shapes and
    dtypes.
    """
    if k5.SMALL_BWD:
        return k5.cconv_bwd(x, w, dy)  # the knob's route: 005's own launch
    k4._check(x, w)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    B, T, D = x.shape
    W = w.shape[1]
    w_c = w if w.is_contiguous() else w.contiguous()
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if B * T * D == 0:
        return dx, torch.zeros_like(w)
    TS = _segment(B, T, D)
    NS = (T + TS - 1) // TS
    fast = k4.FAST_SIGMOID and x.dtype == torch.bfloat16
    dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
    args = (
        x, w_c, dy, dx, dwp, T, D, TS, NS, k4._work_bucket(B, T, D), *x.stride(),
        *dy.stride(), T * D, D,
    )  # fmt: skip
    even = T % TS == 0
    if AUTOTUNE and B * T * D >= SMALL_WORK:
        grid = lambda m: (_cdiv(D, m["BD"]), NS, B)  # noqa: E731
        _launch(_BWD_TUNED, grid, args, {"W": W, "FAST": fast, "EVEN_T": even}, D)
    else:
        grid = lambda m: (_cdiv(D, _FIXED_BD), NS, B)  # noqa: E731
        kw = {"W": W, "FAST": fast, "EVEN_T": even, **_FIXED_KW}
        _launch(_BWD_FIXED, grid, args, kw, D)
    return dx, dwp.sum(0).to(w.dtype)
