"""cconv/017 case-stages: idea 016 with the case backward's stage count chosen per case
instead of one for every case: calls with a state (an initial state or dht) at
CCONV_STATE_BWD_STAGES (2), packed calls at 1 (007's loop), the rest (bias, residual, no
activation) at 016's CCONV_CASE_BWD_STAGES (3); every call below CCONV_SMALL_WORK elements
at 1, as in 016. The kernel is 016's (``i016.loops.case_bwd_kernel``); nothing else changes.

Why (016's NOTES, H100): at the prefill shape (B16 T4096 D2048, initial state and dht) 016's
NSTG 3 made the backward 3.6% slower than 015's loop, while bias + residual gained 4.4%; a
direct probe of 016's launch (``docs/results/cconv-case-probe-h100-20261206.json``) timed
prefill at 0.3353 / 0.3338 / 0.3445 / 0.3758 ms for NSTG 1 / 2 / 3 / 4. The packed loop is
not pipelined at any NSTG (the sequence step is a loop inside the row loop, and Triton
pipelines innermost loops only: its compiled code is the same at every NSTG), so packed
calls take NSTG 1 and no second compiled variant.

What changes against 016, call for call: the NSTG of a case backward launch (above) and the
plan table (this module's own). Grids, segments, configurations, arguments, results and
errors are 016's (and so 013's, but for 015's handful of elements one rounding step apart).

Env knobs: 016's, and
    CCONV_STATE_BWD_STAGES  stages of the case backward's loop for calls with a state, 1 to 8
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i002.kernel import SMALL_WORK
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i010 import launch
from ladder.kernels.cconv.ideas.i011 import kernel as k11
from ladder.kernels.cconv.ideas.i012 import kernel as k12
from ladder.kernels.cconv.ideas.i012.kernel import Plan, _sig
from ladder.kernels.cconv.ideas.i013 import kernel as k13
from ladder.kernels.cconv.ideas.i014 import kernel as k14
from ladder.kernels.cconv.ideas.i015 import kernel as k15
from ladder.kernels.cconv.ideas.i016 import kernel as k16
from ladder.kernels.cconv.ideas.i016 import loops

CASE_BWD_STAGES = int(os.environ.get("CCONV_CASE_BWD_STAGES", "3"))
STATE_BWD_STAGES = int(os.environ.get("CCONV_STATE_BWD_STAGES", "2"))

CASES = ("dense", "bias-residual", "state", "varlen", "fp32")  # 016's, every case
WMAX = k16.WMAX

__all__ = [
    "CASES",
    "WMAX",
    "CaseLoop",
    "case_bwd_on",
    "cconv_bwd",
    "cconv_bwd_case",
    "cconv_fwd",
    "cconv_fwd_case",
    "cconv_update",
    "conv_bwd",
    "conv_fwd",
    "launches",
    "not_case_loop",
    "plans",
    "stages",
]

cconv_fwd = k16.cconv_fwd  # the dense entry points and every forward: 016's (015's)
cconv_bwd = k16.cconv_bwd
conv_fwd = k16.conv_fwd
cconv_update = k16.cconv_update
cconv_fwd_case = k16.cconv_fwd_case

_CASE_BWD_L = launch.CachedLaunch(loops.case_bwd_kernel)
# a call signature -> (the case loop's plan, the initial-state gradient's plan or None)
_CASE_BWD: dict[tuple, tuple[Plan, Plan | None]] = {}
_STATS = {"hits": 0, "misses": 0}


def plans() -> dict[str, int]:
    """015's ``plans()`` with this module's case backward (016's table is not used): {"hits", "misses", "dense_fwd",
    "dense_bwd", "case_fwd", "case_bwd", "case_bwd_h0"} (the last two: 013's fp32 calls and
    this module's, counted together)."""
    p = k15.plans()
    h0 = sum(1 for _, q in _CASE_BWD.values() if q is not None)
    return {**p, "hits": p["hits"] + _STATS["hits"], "misses": p["misses"] + _STATS["misses"],
            "case_bwd": p["case_bwd"] + len(_CASE_BWD) - h0,
            "case_bwd_h0": p["case_bwd_h0"] + h0}  # fmt: skip


def launches() -> dict[str, tuple[int, int]]:
    """{kernel: (cached launches, launches through Triton)} of the calls no plan served:
    015's, with this module's case backward in place of 011's."""
    return {**k15.launches(), "case_bwd": (_CASE_BWD_L.hits, _CASE_BWD_L.misses)}


def stages(n: int, state: bool, packed: bool) -> int:
    """NSTG of a case backward launch on n = B*T*D elements: 1 below CCONV_SMALL_WORK and for
    packed calls (their loop is not pipelined), CCONV_STATE_BWD_STAGES with a state (initial
    state or dht), CCONV_CASE_BWD_STAGES otherwise."""
    if n < SMALL_WORK or packed:
        return 1
    return STATE_BWD_STAGES if state else CASE_BWD_STAGES


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
    """(dx, dw, db, dresidual, dh0) of conv_fwd for the output gradients dy (and dht): a case
    with fp16 or bf16 x on 016's case loop at this module's stage count (``stages``), every
    other call 015's. Results and errors as 015's (and 013's).

    dy like x (any strides); dht [N, D, W] or None. dx [B, T, D] contiguous in x's dtype;
    dw [D, W] in w's dtype and db [D] in bias's dtype, reduced in a fixed order from fp32
    per-program partials; dresidual is dy itself (None without residual); dh0 [N, D, W] in
    the initial state's dtype (None without one). Raises ValueError on bad shapes (002's
    checks).
    """
    args = (x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    if not_case_loop(*args):
        return k15.conv_bwd(*args)
    return case_bwd_on(_LOOP, *args)


def not_case_loop(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens) -> bool:
    """True for the backward calls that are 015's (016's routing): an argument of another
    type (014's check), fp32 x, and the dense case without dht."""
    return (
        k14._odd((x, w, dy, bias, residual, initial_state, dht), cu_seqlens, activation)
        or not isinstance(x, torch.Tensor)
        or x.dtype == torch.float32
        or (dht is None and k4._dense_case(x, activation, bias, initial_state, cu_seqlens))
    )


@dataclass(frozen=True)
class CaseLoop:
    """What a case backward launch comes from: the launch cache of a kernel with 016's case
    loop's arguments, its plan table and hit / miss counts, the NSTG rule
    ``stages(n, state, packed)`` and the kernel's further constexprs."""

    launch: launch.CachedLaunch
    table: dict
    stats: dict
    stages: Callable[[int, bool, bool], int]
    extra: dict = field(default_factory=dict)


def case_bwd_on(loop: CaseLoop, x, w, dy, bias, residual, initial_state, dht, activation,
                cu_seqlens):  # fmt: skip
    """016's ``_case_bwd`` (013's case backward, the same checks in the same order, planned
    per call signature) on ``loop``: its kernel, plan table and counts, NSTG from its
    ``stages`` and its ``extra`` constexprs."""
    _CASE_BWD_L, _CASE_BWD, _STATS = loop.launch, loop.table, loop.stats
    key = k13._signature(
        lambda: (
            _sig(x), _sig(w), _sig(dy), _sig(bias), _sig(residual), _sig(initial_state),
            _sig(dht), activation, _sig(cu_seqlens),
        )
    )  # fmt: skip
    has_h0 = initial_state is not None
    plan = _CASE_BWD.get(key) if key is not None else None
    if plan is not None:
        _STATS["hits"] += 1
        p, q = plan
        w_c = w.contiguous()
        h0 = initial_state.contiguous() if has_h0 else None
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
            x, w_c, b, h0 if has_h0 else w_c, cu, dy, dht_c if dht_c is not None else w_c, dx,
            dwp, dbp, *p.scalars, *p.tail,
        )  # fmt: skip
        dh0 = None
        if q is not None:
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
    if x.numel() == 0 or (has_h0 and initial_state.numel() == 0):
        return k11.conv_bwd(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    B, T, D = x.shape
    act = box.ACTIVATIONS[activation]
    w_c = w.contiguous()
    h0 = initial_state.contiguous() if has_h0 else None
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
        x, w_c, b, h0 if has_h0 else w_c, cu, dy, dht_c if dht_c is not None else w_c, dx, dwp,
        dbp, T, D, N, TS, NS, work, *x.stride(), *dy.stride(), dx.stride(0), dx.stride(1),
    )  # fmt: skip
    kw.update(
        W=W, ACT=act, HAS_BIAS=bias is not None, HAS_H0=has_h0, HAS_DHT=dht_c is not None,
        VARLEN=cu_seqlens is not None, EVEN_T=T % TS == 0,
        FAST=k4.FAST_SIGMOID and x.dtype == torch.bfloat16,
        NSTG=loop.stages(B * T * D, has_h0 or dht_c is not None, cu_seqlens is not None),
        **loop.extra,
    )  # fmt: skip
    grid = lambda m: (k11._cdiv(D, BD), NS, B)  # noqa: E731
    # both launches are planned together: the plan table holds the pair or nothing
    planned = key if len(_CASE_BWD) < k12.MAX_PLANS else None
    loop: dict[tuple, Plan] = {}
    k12._record(loop, planned, _CASE_BWD_L, grid, args, kw, 10, ((B * NS, D, W), (B * NS, D)))
    dh0 = None
    grad: dict[tuple, Plan] = {}
    if has_h0:
        dh0 = torch.empty_like(h0)
        k12._record(
            grad, planned, k11._DH0_L, lambda m: (k11._cdiv(D, 128), N),
            (x, w_c, b, h0, cu, dy, dht_c if dht_c is not None else h0, dh0, T, D, *x.stride(),
             *dy.stride()),
            dict(W=W, ACT=act, HAS_BIAS=bias is not None, HAS_DHT=dht_c is not None,
                 VARLEN=cu_seqlens is not None, BD=128, num_warps=1), 8,
        )  # fmt: skip
    if planned is not None and planned in loop and (not has_h0 or planned in grad):
        _CASE_BWD[planned] = (loop[planned], grad.get(planned))
    db = dbp.sum(0).to(bias.dtype) if bias is not None else None
    return dx, dwp.sum(0).to(w.dtype), db, (dy if residual is not None else None), dh0


_LOOP = CaseLoop(_CASE_BWD_L, _CASE_BWD, _STATS, stages)


def cconv_bwd_case(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, opts: dict):
    """The family's case entry point: conv_bwd -> (dx, dw, db, dh0)."""
    dx, dw, db, _dr, dh0 = conv_bwd(
        x, w, dy, opts["bias"], opts["residual"], opts["initial_state"], opts["dht"],
        opts["activation"], opts["cu_seqlens"],
    )  # fmt: skip
    return dx, dw, db, dh0
