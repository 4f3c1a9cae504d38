"""cconv/018 packed-pipeline: idea 017 with the packed case backward pipelined too: its loop is
``loops.py``'s (016's with a loop-free sequence step where it holds), at NSTG =
CCONV_PACKED_BWD_STAGES (3) for packed calls from CCONV_SMALL_WORK elements up. Unpacked
calls launch the same loop body as 017 (the loop-free step is only compiled for packed
calls), at 017's stage counts.

Why (016's and 017's NOTES, H100): the packed backward did not move with 016's pipelining,
because its sequence step is a ``while`` loop inside the row loop and Triton pipelines
innermost loops only; pipelining took the bias + residual backward from 85.7% to 89.6% of the
copy rate, and the packed backward sits at 91.7% on the H100 and 83% on the H200 (013's
record ``20261204T142430Z-a71226e9``).

What changes against 017, call for call: a case backward launch takes K =
CCONV_SEQ_LOOKAHEAD, and a packed one NSTG = CCONV_PACKED_BWD_STAGES from CCONV_SMALL_WORK
elements up; its own plan table. Grids, segments, configurations, arguments, results (007's
arithmetic in 007's order) and errors are 017's.

Env knobs: 017's, and
    CCONV_PACKED_BWD_STAGES  stages of the packed backward's loop, 1 to 8
    CCONV_SEQ_LOOKAHEAD      sequence starts one loop-free step looks ahead (a power of two
                             from 2 to 64); a program whose rows span that many starts or
                             more runs the loop with 002's step, unpipelined
"""

from __future__ import annotations

import os

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
from ladder.kernels.cconv.ideas.i017 import kernel as k17
from ladder.kernels.cconv.ideas.i018 import loops

CASE_BWD_STAGES = int(os.environ.get("CCONV_CASE_BWD_STAGES", "3"))
STATE_BWD_STAGES = int(os.environ.get("CCONV_STATE_BWD_STAGES", "2"))
PACKED_BWD_STAGES = int(os.environ.get("CCONV_PACKED_BWD_STAGES", "3"))
SEQ_LOOKAHEAD = int(os.environ.get("CCONV_SEQ_LOOKAHEAD", "16"))

CASES = k17.CASES  # every case
WMAX = k17.WMAX

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
    "stages",
]

cconv_fwd = k17.cconv_fwd  # the dense entry points and every forward: 017's (015's)
cconv_bwd = k17.cconv_bwd
conv_fwd = k17.conv_fwd
cconv_update = k17.cconv_update
cconv_fwd_case = k17.cconv_fwd_case

_CASE_BWD_L = launch.CachedLaunch(loops.case_bwd_kernel)
# a call signature -> (the case loop's plan, the initial-state gradient's plan or None)
_CASE_BWD: dict[tuple, tuple[Plan, Plan | None]] = {}
_STATS = {"hits": 0, "misses": 0}


def plans() -> dict[str, int]:
    """015's ``plans()`` with this module's case backward (016's and 017's tables unused): {"hits", "misses", "dense_fwd",
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
    """NSTG of a case backward launch on n = B*T*D elements: 1 below CCONV_SMALL_WORK,
    CCONV_PACKED_BWD_STAGES for packed calls, CCONV_STATE_BWD_STAGES with a state (initial
    state or dht), CCONV_CASE_BWD_STAGES otherwise."""
    if n < SMALL_WORK:
        return 1
    if packed:
        return PACKED_BWD_STAGES
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
    with fp16 or bf16 x on this module's case loop at its stage count (``stages``), every other
    call 015's. Results
    and errors as 015's (and 013's).

    dy like x (any strides); dht [N, D, W] or None. dx [B, T, D] contiguous in x's dtype;
    dw [D, W] in w's dtype and db [D] in bias's dtype, reduced in a fixed order from fp32
    per-program partials; dresidual is dy itself (None without residual); dh0 [N, D, W] in
    the initial state's dtype (None without one). Raises ValueError on bad shapes (002's
    checks).
    """
    args = (x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    if (
        k14._odd((x, w, dy, bias, residual, initial_state, dht), cu_seqlens, activation)
        or not isinstance(x, torch.Tensor)
        or x.dtype == torch.float32
        or (dht is None and k4._dense_case(x, activation, bias, initial_state, cu_seqlens))
    ):
        return k15.conv_bwd(*args)
    return _case_bwd(*args)


def _case_bwd(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens):
    """017's ``_case_bwd`` on this module's ``loops.case_bwd_kernel`` (K =
    CCONV_SEQ_LOOKAHEAD), with NSTG from ``stages``."""
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
        NSTG=stages(B * T * D, has_h0 or dht_c is not None, cu_seqlens is not None),
        K=SEQ_LOOKAHEAD,
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


def cconv_bwd_case(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, opts: dict):
    """The family's case entry point: conv_bwd -> (dx, dw, db, dh0)."""
    dx, dw, db, _dr, dh0 = conv_bwd(
        x, w, dy, opts["bias"], opts["residual"], opts["initial_state"], opts["dht"],
        opts["activation"], opts["cu_seqlens"],
    )  # fmt: skip
    return dx, dw, db, dh0
