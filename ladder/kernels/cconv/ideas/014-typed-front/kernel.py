"""cconv/014 typed-front: idea 013's kernels, launch plans and small-call configurations, with
a type check in front of the case entry points.

013's errata (its NOTES.md): four bad-argument orders where ``conv_fwd`` / ``conv_bwd`` fail
differently from 011's, each needing an argument that is not what its slot takes (a non-tensor
where a tensor goes, an activation or ``output_final_state`` whose ``==`` or ``bool`` raises):
013 reads the activation, ``initial_state.numel()`` or ``bool(output_final_state)`` before
011's checks would have raised, and with a bias that is not a tensor it launches the case
loop before failing. A review of this idea found a fifth kind: a tensor of an element type
no float operand can have (quantized, bits, packed 4-bit) as w or bias, where 013's backward
launches or reduces in another order than 011's before failing. Here a call of ``conv_fwd`` /
``conv_bwd`` whose float slots hold anything but None or a ``torch.Tensor`` of a float
element type (FLOAT_DTYPES), whose ``cu_seqlens`` is neither None nor a tensor, whose
activation is neither None nor a ``str``, or whose ``output_final_state`` is neither a
``bool`` nor an ``int``, goes to 011's entry point unplanned, which fails exactly as 011
fails (for the four orders, its checks' error before any launch) or, for an argument it
accepts, computes the call. Every other call is 013's, launch for launch.

Device arithmetic and launches are 013's on every call whose arguments have those types.

Env knobs: 013's (and through it 012's and 011's).
"""

from __future__ import annotations

import torch
from ladder.kernels.cconv.ideas.i011 import kernel as k11
from ladder.kernels.cconv.ideas.i013 import kernel as k13

CASES = ("dense", "bias-residual", "state", "varlen", "fp32")  # 013's, every case
WMAX = k13.WMAX

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

cconv_fwd = k13.cconv_fwd  # the dense entry points: 013's (no erratum there)
cconv_bwd = k13.cconv_bwd
cconv_update = k13.cconv_update
plans = k13.plans
launches = k13.launches


# the element types a float operand may have; any other (quantized, bits, packed 4-bit, integer,
# bool, complex) is odd: 013's backward skips 011's `torch.zeros_like(w)` / `(bias)` before its
# launch, launches the initial-state gradient before reducing the partials and reduces db before
# dw, so with such a w or bias it fails after other launches, or with another error, than 011
FLOAT_DTYPES = frozenset(
    getattr(torch, name)
    for name in ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
                 "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, name)
)  # fmt: skip


def _odd(
    floats: tuple, cu_seqlens: object, activation: object, output_final_state: object = False
) -> bool:
    """True when an argument is not of its slot's type: a float slot (``floats``) holding
    anything but None or a ``torch.Tensor`` with an element type in FLOAT_DTYPES,
    ``cu_seqlens`` neither None nor a ``torch.Tensor``, an activation neither None nor a
    ``str``, an ``output_final_state`` neither a ``bool`` nor an ``int``. Exact type checks
    for the activation and the flag (a ``str`` or ``int`` subclass may redefine ``==`` or
    ``bool``)."""
    for t in floats:
        if t is not None and (not isinstance(t, torch.Tensor) or t.dtype not in FLOAT_DTYPES):
            return True
    if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
        return True
    if activation is not None and type(activation) is not str:
        return True
    return type(output_final_state) not in (bool, int)


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
    013's conv_fwd, or 011's for a call with an argument of another type (``_odd``).

    x: [B, T, D] fp16/bf16/fp32 any strides ([1, total, D] with cu_seqlens [N+1] int);
    w: [D, W<=4] any float dtype; bias [D]; residual like x; initial_state [N, D, W].
    y = act(conv(x) + bias) + residual: [B, T, D] contiguous in x's dtype; final_state
    [N, D, W] in x's dtype, or None. Raises ValueError on other shapes and dtypes (002's
    checks), and 011's errors for arguments of other types.
    """
    args = (x, w, bias, residual, initial_state, output_final_state, activation, cu_seqlens)
    if _odd((x, w, bias, residual, initial_state), cu_seqlens, activation, output_final_state):
        return k11.conv_fwd(*args)
    return k13.conv_fwd(*args)


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
    """(dx, dw, db, dresidual, dh0) of conv_fwd for the output gradients dy (and dht): 013's
    conv_bwd, or 011's for a call with an argument of another type (``_odd``). Arguments,
    results and errors as 011's.

    dy like x (any strides); dht [N, D, W] or None. dx [B, T, D] contiguous in x's dtype;
    dw [D, W] in w's dtype and db [D] in bias's dtype, reduced in a fixed order from fp32
    per-program partials; dresidual is dy itself (None without residual); dh0 [N, D, W] in
    the initial state's dtype (None without one). Raises ValueError on bad shapes (002's
    checks).
    """
    args = (x, w, dy, bias, residual, initial_state, dht, activation, cu_seqlens)
    if _odd((x, w, dy, bias, residual, initial_state, dht), cu_seqlens, activation):
        return k11.conv_bwd(*args)
    return k13.conv_bwd(*args)


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
