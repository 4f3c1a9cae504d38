"""cconv/012 launch-plans: idea 011's kernels, configurations and launches, with the host work
of a repeated call done once per call signature.

011 caches the compiled kernel per launch signature (010's `launch.CachedLaunch`), but every
call still validates its arguments, picks the configuration and the time segment, builds the
launch's argument tuple and keyword dict, and computes the cache's signature over every
argument (the dtype and alignment of each tensor, three classes of each integer). Here the
entry points keep a plan per call signature: the tuple of what decides all of that (each
tensor's shape, strides, dtype and 16-byte alignment, the optional arguments' presence, the
activation, whether the final state is wanted, and the current CUDA device). A call whose
signature has a plan allocates its outputs and calls the compiled kernel's launcher with the
plan's grid, integer arguments and constexprs, on the current stream; it validates nothing,
since every check 011 makes reads only what the signature holds, and the plan was made by a
call that passed them. Any other call runs 011's host code unchanged, launches through
Triton and records the plan. Device arithmetic, grids and configurations are 011's.

Planned: the dense forward and backward (`cconv_fwd`, `cconv_bwd`), the case forward
(`conv_fwd`'s one-launch path, final state included) and the case backward without an
initial state (one launch and the reductions of dw's and db's partials; 011 also allocated
zeroed dw and db that the reductions then replaced, which a plan skips). The case backward
with an initial state (a second launch for its gradient) runs 011's `conv_bwd`, whose
launches 010's cache still serves.

Never planned, always 011's path: a launch while Triton's launch hooks are set (a profiler),
a kernel run by Triton's CPU interpreter (no compiled kernel), CCONV_LAUNCH_CACHE=0, the case
forward's separate final-state launch (packed batches past 65535 segments), and calls beyond
MAX_PLANS signatures per entry point.

Env knobs: 011's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i002.kernel import SMALL_WORK
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i010 import kernel as k10
from ladder.kernels.cconv.ideas.i010 import launch
from ladder.kernels.cconv.ideas.i011 import kernel as k11
from triton import knobs

CASES = ("dense", "bias-residual", "state", "varlen", "fp32")  # 011's, every case
WMAX = k11.WMAX
MAX_PLANS = 256  # per entry point

__all__ = [
    "CASES",
    "MAX_PLANS",
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


class Plan(NamedTuple):
    """One call signature's launch: the compiled kernel's launcher and its arguments but the
    tensors, and the shapes of the buffers the call allocates."""

    run: Any  # CompiledKernel.run
    function: Any
    packed: Any
    grid: tuple[int, int, int]
    scalars: tuple  # the integer arguments after the kernel's tensor arguments
    tail: tuple  # every parameter after the positional ones (constexprs, config values)
    device: int
    stream: Any  # the current-stream getter
    buffers: tuple  # shapes of the call's fp32 partials (empty where it has none)
    flags: tuple  # the entry point's own decisions (which operands are copied or passed)


_FWD: dict[tuple, Plan] = {}
_BWD: dict[tuple, Plan] = {}
_CASE_FWD: dict[tuple, Plan] = {}
_CASE_BWD: dict[tuple, Plan] = {}
_STATS = {"hits": 0, "misses": 0}


def plans() -> dict[str, int]:
    """{"hits", "misses", "dense_fwd", "dense_bwd", "case_fwd", "case_bwd"}: calls served by
    a plan, calls that were not, and the plans held per entry point."""
    return {**_STATS, "dense_fwd": len(_FWD), "dense_bwd": len(_BWD), "case_fwd": len(_CASE_FWD),
            "case_bwd": len(_CASE_BWD)}  # fmt: skip


def launches() -> dict[str, tuple[int, int]]:
    """011's launch counts: {kernel: (cached launches, launches through Triton)} of the calls
    no plan served."""
    return k11.launches()


def _hooked() -> bool:
    return launch._hooked(knobs.runtime.launch_enter_hook) or launch._hooked(
        knobs.runtime.launch_exit_hook
    )


def _sig(t: torch.Tensor | None) -> tuple | None:
    """What a plan needs to know of one tensor operand: shape, strides, dtype, alignment."""
    if t is None:
        return None
    return (t.shape, t.stride(), t.dtype, t.data_ptr() % 16 == 0)


def _key(*parts: Any) -> tuple | None:
    """The call signature (parts plus the current CUDA device), or None when no plan may
    serve the call: the launch cache is off, a launch hook is set, or there is no CUDA."""
    if not k10.LAUNCH_CACHE or _hooked():
        return None
    try:
        return (*parts, torch.cuda.current_device())
    except (RuntimeError, AssertionError):
        return None


def _record(
    table: dict, key: tuple | None, cache: launch.CachedLaunch, grid, args: tuple, kwargs: dict,
    ntensors: int, buffers: tuple = (), flags: tuple = (),
) -> None:  # fmt: skip
    """Launch through Triton (011's kernel, arguments and keywords) and, where the launch can
    be named (launch.CachedLaunch._entry), keep it as the plan of `key`."""
    if key is None or len(table) >= MAX_PLANS:
        k11._launch(cache, grid, args, kwargs, args[ntensors + 1])  # D follows T
        return
    compiled = cache.kernel[grid](*args, **kwargs)
    cache.misses += 1
    entry = cache._entry(compiled, args, kwargs, key[-1])
    if entry is None:
        return
    run, function, packed, meta, tail, device, stream = entry
    g = tuple(grid(meta)) + (1, 1)
    table[key] = Plan(
        run, function, packed, g[:3], args[ntensors:], tail, device, stream, buffers, flags
    )


def cconv_fwd(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = silu(causal depthwise conv(x, w)): 011's dense forward, planned per signature.

    x: [B, T, D] fp16/bf16, any strides. w: [D, W] any float dtype, W <= 4.
    Returns y: [B, T, D] contiguous, x's dtype. Raises ValueError on other shapes/dtypes.
    """
    key = _key(_sig(x), _sig(w))
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
    TS = k10._segment_small(B, T, D, small)
    NS = (T + TS - 1) // TS
    kw = k11._launch_kw(k11._fwd_config(B * T * D, work, True, False))
    BD = kw["BD"]
    sxb, sxt, sxd = x.stride()
    args = (x, w, y, T, D, TS, work, sxb, sxt, sxd, T * D, D)
    kw.update(W=W, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16, EVEN_T=T % TS == 0)
    grid = lambda m: (k11._cdiv(D, BD), NS, B)  # noqa: E731
    _record(_FWD, key, k11._DENSE_FWD_L, grid, args, kw, 3, flags=(copy_w,))
    return y


def cconv_bwd(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of y = cconv_fwd(x, w) for the upstream gradient dy: 011's dense backward,
    planned per signature.

    x, dy: [B, T, D] fp16/bf16, any strides (dy may have zero strides). w: [D, W].
    Returns dx: [B, T, D] contiguous in x's dtype and dw: [D, W] in w's dtype, reduced
    deterministically from fp32 per-program partials. Raises ValueError on other shapes and
    dtypes.
    """
    key = _key(_sig(x), _sig(w), _sig(dy))
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
    kw = k11._launch_kw(k11._bwd_config(B * T * D, work, True))
    BD = kw["BD"]
    dwp = torch.empty((B * NS, D, W), dtype=torch.float32, device=x.device)
    args = (
        x, w_c, dy, dx, dwp, T, D, TS, NS, work, *x.stride(), *dy.stride(), T * D, D,
    )  # fmt: skip
    kw.update(W=W, FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16, EVEN_T=T % TS == 0)
    grid = lambda m: (k11._cdiv(D, BD), NS, B)  # noqa: E731
    _record(_BWD, key, k11._DENSE_BWD_L, grid, args, kw, 5, ((B * NS, D, W),), (copy_w,))
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
    ofs = bool(output_final_state)
    key = _key(
        _sig(x), _sig(w), _sig(bias), _sig(residual), _sig(initial_state), ofs, activation,
        _sig(cu_seqlens),
    )  # fmt: skip
    p = _CASE_FWD.get(key) if key is not None else None
    if p is not None:
        _STATS["hits"] += 1
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
        _record(_CASE_FWD, planned, k11._CASE_FWD_L, grid, args, kw, 8, ((N, D, W),),
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
    dense case without dht through this module's planned cconv_bwd, a call with an initial
    state through 011's conv_bwd, every other call 011's case backward planned per
    signature. Arguments, results and errors as 011's.

    dy like x (any strides); dht [N, D, W] or None. dx [B, T, D] contiguous in x's dtype;
    dw [D, W] in w's dtype and db [D] in bias's dtype, reduced in a fixed order from fp32
    per-program partials; dresidual is dy itself (None without residual); dh0 [N, D, W] in
    the initial state's dtype (None without one). Raises ValueError on bad shapes (002's
    checks).
    """
    if dht is None and k4._dense_case(x, activation, bias, initial_state, cu_seqlens):
        box._check(x, w, bias, residual, initial_state, activation, cu_seqlens)
        dx, dw = cconv_bwd(x, w, dy)
        return dx, dw, None, (dy if residual is not None else None), None
    if initial_state is not None:
        return k11.conv_bwd(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    key = _key(
        _sig(x), _sig(w), _sig(dy), _sig(bias), _sig(residual), _sig(dht), activation,
        _sig(cu_seqlens),
    )  # fmt: skip
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
    _record(_CASE_BWD, key, cache, grid, args, kw, 10, ((B * NS, D, W), (B * NS, D)))
    db = dbp.sum(0).to(bias.dtype) if bias is not None else None
    return dx, dwp.sum(0).to(w.dtype), db, (dy if residual is not None else None), None


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
