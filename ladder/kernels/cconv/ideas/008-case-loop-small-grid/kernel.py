"""cconv/008 case-loop-small-grid: idea 007's case loops with idea 005's dense grid.

Two ideas each won half of the box on the H200 (NOTES.md):
- 005 (`k5`) sizes the dense loop's grid for small calls: B1 T4096 D768 forward 0.91x fla,
  where 004's grid, which 007 keeps, gives 0.49x.
- 007 (`k7`, with 006's forward, `k6`) runs every case other than dense in 004's loop form:
  4.9-5.5x fla on the case backward, where 005 keeps 002's kernels (3.7-4.1x).

Here each call takes the half that won its case, with no new kernel:
- the dense case (x bf16 / fp16, silu, no bias, initial state or packing; forward without a
  residual, backward without dht): 005's entry points, so 004's loop on 005's grid;
- every other case: 006's forward and 007's backward (their case kernels already run on 002's
  grid, whose segments shorten on small calls the way 005's do);
- the final state, dh0 and the decode step: 002's kernels, as in 005 and 007.

Env knobs: none of its own. It reads those of the modules it imports: CCONV_MIN_PROGRAMS and
CCONV_SMALL_BWD (005), CCONV_CASE_FWD (006), CCONV_CASE_BWD (007), and 002's and 004's.
"""

from __future__ import annotations

import torch
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i005 import kernel as k5
from ladder.kernels.cconv.ideas.i006 import kernel as k6
from ladder.kernels.cconv.ideas.i007 import kernel as k7

# The family's cases this idea implements (ladder/kernels/cconv/family.py CASES); the decode
# step (cconv_update) is outside the ladder's fwd/bwd protocol.
CASES = ("dense", "bias-residual", "state", "varlen", "fp32")
WMAX = k4.WMAX

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

# The dense entry points are 005's (004's loop on the small-call grid); the decode step is
# 002's, which every one of these ideas hands out.
cconv_fwd = k5.cconv_fwd
cconv_bwd = k5.cconv_bwd
cconv_update = k5.cconv_update


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
    [N, D, W] in x's dtype, or None. The dense case without a residual runs 005's conv_fwd,
    every other call 006's. Raises ValueError on other shapes and dtypes (002's checks, made
    by whichever of the two runs).
    """
    if residual is None and k4._dense_case(x, activation, bias, initial_state, cu_seqlens):
        route = k5.conv_fwd
    else:
        route = k6.conv_fwd
    return route(x, w, bias, residual, initial_state, output_final_state, activation, cu_seqlens)


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

    Shapes, dtypes and errors as 007's conv_bwd. The dense case without dht runs 005's
    conv_bwd (004's loop; dresidual is dy itself), every other call 007's case loop.
    """
    if dht is None and k4._dense_case(x, activation, bias, initial_state, cu_seqlens):
        route = k5.conv_bwd
    else:
        route = k7.conv_bwd
    return route(x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)


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
