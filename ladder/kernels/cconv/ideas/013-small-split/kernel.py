"""cconv/013 small-split: idea 012's kernels and launch plans, with the small dense forward and
the small dense backward on configurations of their own, and the case backward with an
initial state planned too.

1. Below CCONV_SMALL_WORK (4.2M elements) 011 launches both dense directions on one fixed
   configuration (`_SMALL`: 004's 2 warps, G 4), the forward on 005's grid (segments
   shortened until about CCONV_MIN_PROGRAMS = 1056 programs of 256-wide strips), the
   backward on 004's segments. 012's sweep of those three knobs at B1 T4096 D768 (its
   NOTES, records 20261204T104522Z to 105033Z, H200) found the forward best at 528 programs,
   2 warps, G 8 and the backward best at 4 warps, G 8, and no single point best for both.
   Here the small dense forward takes (CCONV_SMALL_FWD_WARPS, CCONV_SMALL_FWD_G) on 005's
   grid sized to CCONV_SMALL_FWD_PROGRAMS programs, and the small dense backward takes
   (CCONV_SMALL_BWD_WARPS, CCONV_SMALL_BWD_G) on 004's segments. The case loops below
   CCONV_SMALL_WORK keep 011's configuration (the decode step's calls among them).
2. The case backward with an initial state (the case loop's launch, then 002's initial-state
   gradient kernel) keeps a plan of both launches, as 012 plans the one-launch calls.
3. The plan's signature is built inside a `try`: an argument the signature cannot hold (not
   a tensor where one goes, a tensor without storage, an ambiguous `output_final_state`, an
   unhashable activation) takes 011's path, whose checks raise their ValueError (012's
   errata).

Device arithmetic is 011's; only the small dense calls' launch configuration and grid differ.

Env knobs: 012's, and
    CCONV_SMALL_FWD_PROGRAMS  programs the small dense forward's grid is sized to (0: 004's rule)
    CCONV_SMALL_FWD_WARPS, CCONV_SMALL_FWD_G   the small dense forward's configuration
    CCONV_SMALL_BWD_WARPS, CCONV_SMALL_BWD_G   the small dense backward's configuration
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i002.kernel import SMALL_WORK
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i005 import kernel as k5
from ladder.kernels.cconv.ideas.i010 import kernel as k10
from ladder.kernels.cconv.ideas.i011 import kernel as k11
from ladder.kernels.cconv.ideas.i012 import kernel as k12
from ladder.kernels.cconv.ideas.i012.kernel import Plan, _sig

SMALL_FWD_PROGRAMS = int(os.environ.get("CCONV_SMALL_FWD_PROGRAMS", "528"))
SMALL_FWD_WARPS = int(os.environ.get("CCONV_SMALL_FWD_WARPS", "2"))
SMALL_FWD_G = int(os.environ.get("CCONV_SMALL_FWD_G", "8"))
SMALL_BWD_WARPS = int(os.environ.get("CCONV_SMALL_BWD_WARPS", "4"))
SMALL_BWD_G = int(os.environ.get("CCONV_SMALL_BWD_G", "8"))

CASES = ("dense", "bias-residual", "state", "varlen", "fp32")  # 012's, every case
WMAX = k11.WMAX

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

cconv_update = k11.cconv_update  # the decode step: 002's kernel

_SMALL_FWD = (SMALL_FWD_WARPS, SMALL_FWD_G, None)
_SMALL_BWD = (SMALL_BWD_WARPS, SMALL_BWD_G, None)

_FWD: dict[tuple, Plan] = {}
_BWD: dict[tuple, Plan] = {}
_CASE_FWD: dict[tuple, Plan] = {}
_CASE_BWD: dict[tuple, Plan] = {}
_CASE_BWD_H0: dict[tuple, Plan] = {}  # with an initial state: the case loop's launch
_DH0: dict[tuple, Plan] = {}  # ... and its gradient's, under the same signature
_STATS = {"hits": 0, "misses": 0}


def plans() -> dict[str, int]:
    """{"hits", "misses", "dense_fwd", "dense_bwd", "case_fwd", "case_bwd", "case_bwd_h0"}:
    calls served by a plan, calls that were not, and the plans held per entry point (the
    backward with an initial state counts one per signature: its two launches)."""
    return {**_STATS, "dense_fwd": len(_FWD), "dense_bwd": len(_BWD), "case_fwd": len(_CASE_FWD),
            "case_bwd": len(_CASE_BWD), "case_bwd_h0": len(_DH0)}  # fmt: skip


def launches() -> dict[str, tuple[int, int]]:
    """011's launch counts: {kernel: (cached launches, launches through Triton)} of the calls
    no plan served."""
    return k11.launches()


def _signature(parts: Callable[[], tuple]) -> tuple | None:
    """The call signature (012's `_key` of what `parts` returns), or None where no plan may
    serve the call: 012's cases, and any argument the signature cannot hold (`parts` or
    hashing raises). Such a call takes 011's path, whose checks then raise their error."""
    try:
        key = k12._key(*parts())
        hash(key)
    except Exception:  # noqa: BLE001 - whatever it is, 011's checks name it
        return None
    return key


def _small_fwd_segment(B: int, T: int, D: int) -> int:
    """Rows per program of the small dense forward: 004's segment (k10._segment), shortened
    until about SMALL_FWD_PROGRAMS programs of 4 * 32 * SMALL_FWD_WARPS-wide strips, not
    below 005's MIN_SEG_SMALL and a multiple of SEG_ALIGN (005's rule, its own knobs)."""
    ts = k10._segment(B, T, D)
    if SMALL_FWD_PROGRAMS <= 0:
        return ts
    nd = k11._cdiv(D, 4 * 32 * SMALL_FWD_WARPS)
    if nd * B * k11._cdiv(T, ts) >= SMALL_FWD_PROGRAMS:
        return ts
    want = (B * T * nd) // SMALL_FWD_PROGRAMS
    return min(ts, max(k5.MIN_SEG_SMALL, (want // k4.SEG_ALIGN) * k4.SEG_ALIGN))


def cconv_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = silu(causal depthwise conv(x, w)): 011's dense forward, planned per signature, a
    call of under CCONV_SMALL_WORK elements on the small forward's configuration and grid.

    x: [B, T, D] fp16/bf16, any strides. w: [D, W] any float dtype, W <= 4.
    Returns y: [B, T, D] contiguous, x's dtype. Raises ValueError on other shapes/dtypes.
    """
    key = _signature(lambda: (_sig(x), _sig(w)))
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
    TS = _small_fwd_segment(B, T, D) if small else k10._segment(B, T, D)
    NS = (T + TS - 1) // TS
    kw = k11._launch_kw(_SMALL_FWD if small else k11._fwd_config(B * T * D, work, True, False))
    BD = kw["BD"]
    sxb, sxt, sxd = x.stride()
    args = (x, w, y, T, D, TS, work, sxb, sxt, sxd, T * D, D)
    kw.update(W=W, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16, EVEN_T=T % TS == 0)
    grid = lambda m: (k11._cdiv(D, BD), NS, B)  # noqa: E731
    k12._record(_FWD, key, k11._DENSE_FWD_L, grid, args, kw, 3, flags=(copy_w,))
    return y


def cconv_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of y = cconv_fwd(x, w) for the upstream gradient dy: 011's dense backward,
    planned per signature, a call of under CCONV_SMALL_WORK elements on the small backward's
    configuration (004's segments).

    x, dy: [B, T, D] fp16/bf16, any strides (dy may have zero strides). w: [D, W].
    Returns dx: [B, T, D] contiguous in x's dtype and dw: [D, W] in w's dtype, reduced
    deterministically from fp32 per-program partials. Raises ValueError on other shapes and
    dtypes.
    """
    key = _signature(lambda: (_sig(x), _sig(w), _sig(dy)))
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
    kw = k11._launch_kw(_SMALL_BWD if small else k11._bwd_config(B * T * D, work, True))
    BD = kw["BD"]
    dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
    args = (
        x, w_c, dy, dx, dwp, T, D, TS, NS, work, *x.stride(), *dy.stride(), T * D, D,
    )  # fmt: skip
    kw.update(W=W, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16, EVEN_T=T % TS == 0)
    grid = lambda m: (k11._cdiv(D, BD), NS, B)  # noqa: E731
    k12._record(_BWD, key, k11._DENSE_BWD_L, grid, args, kw, 5, ((B * NS, D, W),), (copy_w,))
    return dx, dwp.sum(0).to(w.dtype)


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
    011's conv_fwd, its one-launch path planned per signature.

    x: [B, T, D] fp16/bf16/fp32 any strides ([1, total, D] with cu_seqlens [N+1] int);
    w: [D, W<=4] any float dtype; bias [D]; residual like x; initial_state [N, D, W].
    y = act(conv(x) + bias) + residual: [B, T, D] contiguous in x's dtype; final_state
    [N, D, W] in x's dtype, or None. Raises ValueError on other shapes and dtypes (002's
    checks).
    """
    key = _signature(
        lambda: (
            _sig(x), _sig(w), _sig(bias), _sig(residual), _sig(initial_state),
            bool(output_final_state), activation, _sig(cu_seqlens),
        )
    )  # fmt: skip
    p = _CASE_FWD.get(key) if key is not None else None
    if p is not None:
        _STATS["hits"] += 1
        ofs = key[5]
        w = w.contiguous()
        h0 = initial_state.contiguous() if initial_state is not None else None
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        hT = torch.empty(p.buffers[0], dtype=x.dtype, device=x.device) if ofs else None
        p.run(
            *p.grid, p.stream(p.device), p.function, p.packed, None, None, None,
            x, w, bias if bias is not None else w, residual if residual is not None else x,
            h0 if h0 is not None else w, cu_seqlens if cu_seqlens is not None else w, y,
            hT if p.flags[0] else w, *p.scalars, *p.tail,
        )  # fmt: skip
        return y, hT
    _STATS["misses"] += 1
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    ofs = bool(output_final_state)
    dense = k4._dense_case(x, activation, bias, initial_state, cu_seqlens)
    if dense and residual is None and not ofs:
        return cconv_fwd(x, w), None
    B, T, D = x.shape
    w = w.contiguous()
    h0 = initial_state.contiguous() if initial_state is not None else None
    y = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    hT = torch.empty((N, D, W), dtype=x.dtype, device=x.device) if ofs else None
    if D == 0:
        return y, hT
    TS = k11._case_segment(B, T, D)
    NS = k11._cdiv(T, TS)
    NH = (N if cu_seqlens is not None else 1) if ofs else 0
    fused = k11.FUSE_HT and NS + NH <= k11.GRID_Y_MAX
    if y.numel() > 0 or (fused and NH > 0 and N > 0):
        work = box._work_bucket(B * T * D)
        kw = k11._launch_kw(k11._fwd_config(B * T * D, work, False, residual is not None))
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
        grid = lambda m: (k11._cdiv(D, BD), ns_run + nh_run, B)  # noqa: E731
        # a plan only where this one launch is the whole call (no separate final state)
        planned = key if (hT is None or fused) else None
        k12._record(_CASE_FWD, planned, k11._CASE_FWD_L, grid, args, kw, 8, ((N, D, W),),
                (bool(nh_run),))  # fmt: skip
    if hT is not None and not fused and N > 0:
        k11._launch(
            k11._HT_L, lambda m: (k11._cdiv(D, 128), N),
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
    """(dx, dw, db, dresidual, dh0) of conv_fwd for the output gradients dy (and dht): the
    dense case without dht through this module's planned cconv_bwd, every other call 011's
    case backward planned per signature (with an initial state, its two launches).
    Arguments, results and errors as 011's.

    dy like x (any strides); dht [N, D, W] or None. dx [B, T, D] contiguous in x's dtype;
    dw [D, W] in w's dtype and db [D] in bias's dtype, reduced in a fixed order from fp32
    per-program partials; dresidual is dy itself (None without residual); dh0 [N, D, W] in
    the initial state's dtype (None without one). Raises ValueError on bad shapes (002's
    checks).
    """
    dense = dht is None and isinstance(x, torch.Tensor)
    if dense and k4._dense_case(x, activation, bias, initial_state, cu_seqlens):
        box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
        dx, dw = cconv_bwd(x, w, dy)
        return dx, dw, None, (dy if residual is not None else None), None
    key = _signature(
        lambda: (
            _sig(x), _sig(w), _sig(dy), _sig(bias), _sig(residual), _sig(initial_state),
            _sig(dht), activation, _sig(cu_seqlens),
        )
    )  # fmt: skip
    if initial_state is not None:
        return _bwd_h0(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens, key)
    p = _CASE_BWD.get(key) if key is not None else None
    if p is not None:
        _STATS["hits"] += 1
        w_c = w.contiguous()
        dht_c = dht.contiguous() if dht is not None else None
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        dwp = torch.empty(p.buffers[0], dtype=torch.float32, device=x.device)
        dbp = (
            torch.empty(p.buffers[1], dtype=torch.float32, device=x.device)
            if bias is not None
            else dwp
        )
        p.run(
            *p.grid, p.stream(p.device), p.function, p.packed, None, None, None,
            x, w_c, bias if bias is not None else w_c, w_c,
            cu_seqlens if cu_seqlens is not None else w_c, dy,
            dht_c if dht_c is not None else w_c, dx, dwp, dbp, *p.scalars, *p.tail,
        )  # fmt: skip
        db = dbp.sum(0).to(bias.dtype) if bias is not None else None
        return dx, dwp.sum(0).to(w.dtype), db, (dy if residual is not None else None), None
    _STATS["misses"] += 1
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    if dht is not None and tuple(dht.shape) != (N, x.shape[2], W):
        raise ValueError(f"dht must be [N, D, W] = {(N, x.shape[2], W)}")
    B, T, D = x.shape
    if x.numel() == 0:
        return k11.conv_bwd(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    w_c = w.contiguous()
    dht_c = dht.contiguous() if dht is not None else None
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    TS = k11._case_segment(B, T, D)
    NS = k11._cdiv(T, TS)
    work = box._work_bucket(B * T * D)
    kw = k11._launch_kw(k11._bwd_config(B * T * D, work, False))
    BD = kw["BD"]
    dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
    dbp = (
        torch.empty((B * NS, D), dtype=torch.float32, device=x.device) if bias is not None else dwp
    )
    args = (
        x, w_c, bias if bias is not None else w_c, w_c,
        cu_seqlens if cu_seqlens is not None else w_c, dy,
        dht_c if dht_c is not None else w_c, dx, dwp, dbp,
        T, D, N, TS, NS, work, *x.stride(), *dy.stride(), dx.stride(0), dx.stride(1),
    )  # fmt: skip
    kw.update(
        W=W, ACT=box.ACTIVATIONS[activation], HAS_BIAS=bias is not None, HAS_H0=False,
        HAS_DHT=dht_c is not None, VARLEN=cu_seqlens is not None, EVEN_T=T % TS == 0,
    )  # fmt: skip
    if x.dtype == torch.float32:
        cache = k11._CASE_BWD32_L
    else:
        cache = k11._CASE_BWD_L
        kw["FAST"] = k4.FAST_SIGMOID and x.dtype == torch.bfloat16
    grid = lambda m: (k11._cdiv(D, BD), NS, B)  # noqa: E731
    k12._record(_CASE_BWD, key, cache, grid, args, kw, 10, ((B * NS, D, W), (B * NS, D)))
    db = dbp.sum(0).to(bias.dtype) if bias is not None else None
    return dx, dwp.sum(0).to(w.dtype), db, (dy if residual is not None else None), None


def _bwd_h0(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens, key):
    """conv_bwd with an initial state: 011's two launches (the case loop, then 002's
    initial-state gradient kernel), both planned under the call's signature `key`. Calls
    with an empty x or state run 011's conv_bwd unplanned."""
    p = _CASE_BWD_H0.get(key) if key is not None else None
    q = _DH0.get(key) if p is not None else None
    if q is not None:
        _STATS["hits"] += 1
        w_c = w.contiguous()
        h0 = initial_state.contiguous()
        dht_c = dht.contiguous() if dht is not None else None
        b = bias if bias is not None else w_c
        cu = cu_seqlens if cu_seqlens is not None else w_c
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        dwp = torch.empty(p.buffers[0], dtype=torch.float32, device=x.device)
        dbp = (
            torch.empty(p.buffers[1], dtype=torch.float32, device=x.device)
            if bias is not None
            else dwp
        )
        p.run(
            *p.grid, p.stream(p.device), p.function, p.packed, None, None, None,
            x, w_c, b, h0, cu, dy, dht_c if dht_c is not None else w_c, dx, dwp, dbp,
            *p.scalars, *p.tail,
        )  # fmt: skip
        dh0 = torch.empty_like(h0)
        q.run(
            *q.grid, q.stream(q.device), q.function, q.packed, None, None, None,
            x, w_c, b, h0, cu, dy, dht_c if dht_c is not None else h0, dh0,
            *q.scalars, *q.tail,
        )  # fmt: skip
        db = dbp.sum(0).to(bias.dtype) if bias is not None else None
        return dx, dwp.sum(0).to(w.dtype), db, (dy if residual is not None else None), dh0
    _STATS["misses"] += 1
    N, W = box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
    if dy.shape != x.shape:
        raise ValueError(f"dy shape {tuple(dy.shape)} does not match x {tuple(x.shape)}")
    if dht is not None and tuple(dht.shape) != (N, x.shape[2], W):
        raise ValueError(f"dht must be [N, D, W] = {(N, x.shape[2], W)}")
    if x.numel() == 0 or initial_state.numel() == 0:
        return k11.conv_bwd(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    B, T, D = x.shape
    act = box.ACTIVATIONS[activation]
    w_c = w.contiguous()
    h0 = initial_state.contiguous()
    dht_c = dht.contiguous() if dht is not None else None
    b = bias if bias is not None else w_c
    cu = cu_seqlens if cu_seqlens is not None else w_c
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    TS = k11._case_segment(B, T, D)
    NS = k11._cdiv(T, TS)
    work = box._work_bucket(B * T * D)
    kw = k11._launch_kw(k11._bwd_config(B * T * D, work, False))
    BD = kw["BD"]
    dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
    dbp = (
        torch.empty((B * NS, D), dtype=torch.float32, device=x.device) if bias is not None else dwp
    )
    args = (
        x, w_c, b, h0, cu, dy, dht_c if dht_c is not None else w_c, dx, dwp, dbp,
        T, D, N, TS, NS, work, *x.stride(), *dy.stride(), dx.stride(0), dx.stride(1),
    )  # fmt: skip
    kw.update(
        W=W, ACT=act, HAS_BIAS=bias is not None, HAS_H0=True, HAS_DHT=dht_c is not None,
        VARLEN=cu_seqlens is not None, EVEN_T=T % TS == 0,
    )  # fmt: skip
    if x.dtype == torch.float32:
        cache = k11._CASE_BWD32_L
    else:
        cache = k11._CASE_BWD_L
        kw["FAST"] = k4.FAST_SIGMOID and x.dtype == torch.bfloat16
    grid = lambda m: (k11._cdiv(D, BD), NS, B)  # noqa: E731
    bufs = ((B * NS, D, W), (B * NS, D))
    k12._record(_CASE_BWD_H0, key, cache, grid, args, kw, 10, bufs)
    dh0 = torch.empty_like(h0)
    k12._record(
        _DH0, key, k11._DH0_L, lambda m: (k11._cdiv(D, 128), N),
        (x, w_c, b, h0, cu, dy, dht_c if dht_c is not None else h0, dh0, T, D, *x.stride(),
         *dy.stride()),
        dict(W=W, ACT=act, HAS_BIAS=bias is not None, HAS_DHT=dht_c is not None,
             VARLEN=cu_seqlens is not None, BD=128, num_warps=1), 8,
    )  # fmt: skip
    db = dbp.sum(0).to(bias.dtype) if bias is not None else None
    return dx, dwp.sum(0).to(w.dtype), db, (dy if residual is not None else None), dh0


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
