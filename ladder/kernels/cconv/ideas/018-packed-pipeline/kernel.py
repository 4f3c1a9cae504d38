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
from ladder.kernels.cconv.ideas.i002.kernel import SMALL_WORK
from ladder.kernels.cconv.ideas.i010 import launch
from ladder.kernels.cconv.ideas.i015 import kernel as k15
from ladder.kernels.cconv.ideas.i017 import kernel as k17
from ladder.kernels.cconv.ideas.i018 import loops

PACKED_BWD_STAGES = int(os.environ.get("CCONV_PACKED_BWD_STAGES", "3"))
SEQ_LOOKAHEAD = int(os.environ.get("CCONV_SEQ_LOOKAHEAD", "16"))

CASES = ("dense", "bias-residual", "state", "varlen", "fp32")  # 017's, every case
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
_CASE_BWD: dict = {}
_STATS = {"hits": 0, "misses": 0}


def plans() -> dict[str, int]:
    """015's ``plans()`` with this module's case backward (016's and 017's tables unused):
    {"hits", "misses", "dense_fwd", "dense_bwd", "case_fwd", "case_bwd", "case_bwd_h0"}."""
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
    CCONV_PACKED_BWD_STAGES for packed calls, else 017's (CCONV_STATE_BWD_STAGES with a
    state, CCONV_CASE_BWD_STAGES otherwise)."""
    if n >= SMALL_WORK and packed:
        return PACKED_BWD_STAGES
    return k17.stages(n, state, packed)


_LOOP = k17.CaseLoop(_CASE_BWD_L, _CASE_BWD, _STATS, stages, {"K": SEQ_LOOKAHEAD})


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
    """(dx, dw, db, dresidual, dh0) of conv_fwd for the output gradients dy (and dht): 017's
    routing and host code, a case with fp16 or bf16 x on this module's case loop (K =
    CCONV_SEQ_LOOKAHEAD) at its stage count (``stages``), every other call 015's. Results
    and errors as 017's.

    dy like x (any strides); dht [N, D, W] or None. dx [B, T, D] contiguous in x's dtype;
    dw [D, W] in w's dtype and db [D] in bias's dtype, reduced in a fixed order from fp32
    per-program partials; dresidual is dy itself (None without residual); dh0 [N, D, W] in
    the initial state's dtype (None without one). Raises ValueError on bad shapes (002's
    checks).
    """
    args = (x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    if k17.not_case_loop(*args):
        return k15.conv_bwd(*args)
    return k17.case_bwd_on(_LOOP, *args)


def cconv_bwd_case(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, opts: dict):
    """The family's case entry point: conv_bwd -> (dx, dw, db, dh0)."""
    dx, dw, db, _dr, dh0 = conv_bwd(
        x, w, dy, opts["bias"], opts["residual"], opts["initial_state"], opts["dht"],
        opts["activation"], opts["cu_seqlens"],
    )  # fmt: skip
    return dx, dw, db, dh0
