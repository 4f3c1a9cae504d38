"""cconv/015 pipelined-loops: idea 014 with the dense forward and backward loops of calls from
CCONV_SMALL_WORK elements up software-pipelined (``loops.py``: 004's loops under
``tl.range(..., num_stages=NSTG)``), so a program keeps the loads of the next steps in flight
while it computes the current one.

Why: the dense backward is latency-bound for want of warps (ncu at prod on the H200, 011's
NOTES: 136 registers per thread, 18% achieved occupancy, half of all cycles with no eligible
warp), and a register cap below 128 spills. Triton's pipeliner stages the next steps' rows in
shared memory by cp.async instead of registers, so bytes in flight no longer cost occupancy.

What changes against 014, call for call:
- ``cconv_fwd`` / ``cconv_bwd`` (and ``conv_fwd`` / ``conv_bwd`` on the dense case: bf16/fp16
  x, silu, no bias, initial state or packed sequences; for the forward no residual and no
  final state, for the backward no dht) launch ``loops.dense_fwd_kernel`` /
  ``loops.dense_bwd_kernel``: 013's grids, segments and (num_warps, G, maxnreg) table, with
  NSTG = CCONV_FWD_STAGES / CCONV_BWD_STAGES at and above CCONV_SMALL_WORK elements and 1
  (004's loop) below it. Planned per call signature as 013 plans them (012's ``Plan``).
- Every other call is 014's, launch for launch.

The arithmetic is 004's in the same order, so every output is 013's bit for bit
(``tests/test_cconv_015_gpu.py``).

Env knobs: 014's (through 013, 012 and 011), and
    CCONV_FWD_STAGES  stages of the dense forward's pipelined loop, 1 to 8 (1: 004's loop)
    CCONV_BWD_STAGES  the same for the dense backward
"""

from __future__ import annotations

import os

import torch
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i002.kernel import SMALL_WORK
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i010 import kernel as k10
from ladder.kernels.cconv.ideas.i010 import launch
from ladder.kernels.cconv.ideas.i011 import kernel as k11
from ladder.kernels.cconv.ideas.i012 import kernel as k12
from ladder.kernels.cconv.ideas.i012.kernel import Plan, _sig
from ladder.kernels.cconv.ideas.i013 import kernel as k13
from ladder.kernels.cconv.ideas.i014 import kernel as k14
from ladder.kernels.cconv.ideas.i015 import loops

FWD_STAGES = int(os.environ.get("CCONV_FWD_STAGES", "4"))
BWD_STAGES = int(os.environ.get("CCONV_BWD_STAGES", "3"))

CASES = ("dense", "bias-residual", "state", "varlen", "fp32")  # 014's, every case
WMAX = k14.WMAX

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
    "plans",
]

cconv_update = k14.cconv_update  # the decode step: 002's kernel

_DENSE_FWD_L = launch.CachedLaunch(loops.dense_fwd_kernel)
_DENSE_BWD_L = launch.CachedLaunch(loops.dense_bwd_kernel)
_FWD: dict[tuple, Plan] = {}
_BWD: dict[tuple, Plan] = {}
_STATS = {"hits": 0, "misses": 0}


def plans() -> dict[str, int]:
    """013's ``plans()`` with this module's dense plans: {"hits", "misses", "dense_fwd",
    "dense_bwd", "case_fwd", "case_bwd", "case_bwd_h0"}."""
    p = k13.plans()
    return {**p, "hits": p["hits"] + _STATS["hits"], "misses": p["misses"] + _STATS["misses"],
            "dense_fwd": len(_FWD), "dense_bwd": len(_BWD)}  # fmt: skip


def launches() -> dict[str, tuple[int, int]]:
    """{kernel: (cached launches, launches through Triton)} of the calls no plan served: 011's
    case kernels, and this module's dense loops in place of 011's."""
    return {**k13.launches(), "dense_fwd": (_DENSE_FWD_L.hits, _DENSE_FWD_L.misses),
            "dense_bwd": (_DENSE_BWD_L.hits, _DENSE_BWD_L.misses)}  # fmt: skip


def cconv_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = silu(causal depthwise conv(x, w)): 013's dense forward (grid, segments,
    configuration, plan) on ``loops.dense_fwd_kernel``, CCONV_FWD_STAGES stages from
    CCONV_SMALL_WORK elements up.

    x: [B, T, D] fp16/bf16, any strides. w: [D, W] any float dtype, W <= 4.
    Returns y: [B, T, D] contiguous, x's dtype. Raises ValueError on other shapes/dtypes.
    """
    key = k13._signature(lambda: (_sig(x), _sig(w)))
    p = _FWD.get(key) if key is not None else None
    if p is not None:
        _STATS["hits"] += 1
        if p.flags[0]:
            w = w.contiguous()
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        p.run(*p.grid, p.stream(p.device), p.function, p.packed, None, None, None,
              x, w, y, *p.scalars, *p.tail)  # fmt: skip
        return y
    _STATS["misses"] += 1
    k4._check(x, w)
    B, T, D = x.shape
    W = w.shape[1]
    copy_w = not w.is_contiguous()
    if copy_w:
        w = w.contiguous()
    y = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if B * T * D == 0:
        return y
    work = k4._work_bucket(B, T, D)
    small = B * T * D < SMALL_WORK
    TS = k13._small_fwd_segment(B, T, D) if small else k10._segment(B, T, D)
    NS = (T + TS - 1) // TS
    kw = k11._launch_kw(k13._SMALL_FWD if small else k11._fwd_config(B * T * D, work, True, False))
    BD = kw["BD"]
    sxb, sxt, sxd = x.stride()
    args = (x, w, y, T, D, TS, work, sxb, sxt, sxd, T * D, D)
    kw.update(W=W, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16, EVEN_T=T % TS == 0,
              NSTG=1 if small else FWD_STAGES)  # fmt: skip
    grid = lambda m: (k11._cdiv(D, BD), NS, B)  # noqa: E731
    k12._record(_FWD, key, _DENSE_FWD_L, grid, args, kw, 3, flags=(copy_w,))
    return y


def cconv_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of y = cconv_fwd(x, w) for the upstream gradient dy: 013's dense backward
    (grid, segments, configuration, plan) on ``loops.dense_bwd_kernel``, CCONV_BWD_STAGES
    stages from CCONV_SMALL_WORK elements up.

    x, dy: [B, T, D] fp16/bf16, any strides (dy may have zero strides). w: [D, W].
    Returns dx: [B, T, D] contiguous in x's dtype and dw: [D, W] in w's dtype, reduced
    deterministically from fp32 per-program partials. Raises ValueError on other shapes and
    dtypes.
    """
    key = k13._signature(lambda: (_sig(x), _sig(w), _sig(dy)))
    p = _BWD.get(key) if key is not None else None
    if p is not None:
        _STATS["hits"] += 1
        w_c = w.contiguous() if p.flags[0] else w
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        dwp = torch.empty(p.buffers[0], dtype=torch.float32, device=x.device)
        p.run(*p.grid, p.stream(p.device), p.function, p.packed, None, None, None,
              x, w_c, dy, dx, dwp, *p.scalars, *p.tail)  # fmt: skip
        return dx, dwp.sum(0).to(w.dtype)
    _STATS["misses"] += 1
    k4._check(x, w)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    B, T, D = x.shape
    W = w.shape[1]
    copy_w = not w.is_contiguous()
    w_c = w.contiguous() if copy_w else w
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    if B * T * D == 0:
        return dx, torch.zeros_like(w)
    work = k4._work_bucket(B, T, D)
    TS = k10._segment(B, T, D)
    NS = (T + TS - 1) // TS
    small = B * T * D < SMALL_WORK
    kw = k11._launch_kw(k13._SMALL_BWD if small else k11._bwd_config(B * T * D, work, True))
    BD = kw["BD"]
    dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
    args = (
        x, w_c, dy, dx, dwp, T, D, TS, NS, work, *x.stride(), *dy.stride(), T * D, D,
    )  # fmt: skip
    kw.update(W=W, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16, EVEN_T=T % TS == 0,
              NSTG=1 if small else BWD_STAGES)  # fmt: skip
    grid = lambda m: (k11._cdiv(D, BD), NS, B)  # noqa: E731
    k12._record(_BWD, key, _DENSE_BWD_L, grid, args, kw, 5, ((B * NS, D, W),), (copy_w,))
    return dx, dwp.sum(0).to(w.dtype)


def _dense(x, activation, bias, initial_state, cu_seqlens) -> bool:
    """Whether 013 sends this call (arguments of their slots' types, ``k14._odd`` false) to its
    dense entry points: 004's dense case."""
    return isinstance(x, torch.Tensor) and k4._dense_case(
        x, activation, bias, initial_state, cu_seqlens
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
    """(y, final_state) of fla's causal_conv1d forward, every case but backend / cp_context:
    014's conv_fwd, with the dense case without residual or final state on this module's
    ``cconv_fwd`` (after 002's checks, as 013 does).

    x: [B, T, D] fp16/bf16/fp32 any strides ([1, total, D] with cu_seqlens [N+1] int);
    w: [D, W<=4] any float dtype; bias [D]; residual like x; initial_state [N, D, W].
    y = act(conv(x) + bias) + residual: [B, T, D] contiguous in x's dtype; final_state
    [N, D, W] in x's dtype, or None. Raises ValueError on other shapes and dtypes (002's
    checks), and 011's errors for arguments of other types.
    """
    args = (x, w, bias, residual, initial_state, output_final_state, activation, cu_seqlens)
    odd = k14._odd(
        (x, w, bias, residual, initial_state), cu_seqlens, activation, output_final_state
    )
    if (
        not odd
        and residual is None
        and not output_final_state
        and _dense(x, activation, bias, initial_state, cu_seqlens)
    ):
        box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
        return cconv_fwd(x, w), None
    return k14.conv_fwd(*args)


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
    """(dx, dw, db, dresidual, dh0) of conv_fwd for the output gradients dy (and dht): 014's
    conv_bwd, with the dense case without dht on this module's ``cconv_bwd`` (after 002's
    checks, as 013 does). Arguments, results and errors as 014's.

    dy like x (any strides); dht [N, D, W] or None. dx [B, T, D] contiguous in x's dtype;
    dw [D, W] in w's dtype and db [D] in bias's dtype, reduced in a fixed order from fp32
    per-program partials; dresidual is dy itself (None without residual); dh0 [N, D, W] in
    the initial state's dtype (None without one). Raises ValueError on bad shapes (002's
    checks).
    """
    args = (x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    odd = k14._odd((x, w, dy, bias, residual, initial_state, dht), cu_seqlens, activation)
    if not odd and dht is None and _dense(x, activation, bias, initial_state, cu_seqlens):
        box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
        dx, dw = cconv_bwd(x, w, dy)
        return dx, dw, None, (dy if residual is not None else None), None
    return k14.conv_bwd(*args)


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
