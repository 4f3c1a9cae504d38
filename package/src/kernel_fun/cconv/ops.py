"""Dispatch for `kernel_fun.cconv.causal_conv1d`: our kernels inside the supported box, fla
verbatim outside it.

The gate is a whitelist. `FLA_PARAMETERS` classifies every parameter of fla's
`causal_conv1d`; a keyword fla may grow later lands in `**kwargs`, and any keyword there
forces the fallback, so a flag this package has never seen can never be silently ignored.

The entry point is opaque to torch.compile (`torch.compiler.disable`) and every tensor
operation of our path runs inside one `torch.autograd.Function`: Dynamo speculating the
backward of a two-tensor Function with symbolic strides is what failed before.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from .._common import compat, support

FAMILY = "cconv"
SUPPORTED_ACTIVATIONS = ("silu", "swish")
SUPPORTED_X_DTYPES = (torch.float16, torch.bfloat16)
MAX_W = 4
MAX_B = 65535  # the batch is the grid's third dimension
MIN_SM_MAJOR = 9  # timed on the H200 (sm90); Triton-only, so newer parts qualify too

# Every parameter of fla 0.6.0's causal_conv1d, and what this package does with it.
# "ours": values inside the box run our kernels; "default-only": anything but the default
# value forces the fallback. A test compares these keys with fla's live signature.
FLA_PARAMETERS: dict[str, str] = {
    "x": "ours: [B, T, D] fp16/bf16 CUDA tensor, any strides",
    "weight": "ours: [D, W] float tensor, W <= 4",
    "bias": "default-only (None)",
    "residual": "default-only (None)",
    "initial_state": "default-only (None)",
    "output_final_state": "default-only (False)",
    "activation": "ours: 'silu' or 'swish'",
    "backend": "ours: 'triton'",
    "cu_seqlens": "default-only (None)",
    "cu_seqlens_cpu": "default-only (None)",
    "chunk_indices": "default-only (None)",
    "cp_context": "default-only (None)",
    "kwargs": "default-only (empty): any extra keyword goes to fla",
}

_DEFAULT_ONLY = {
    "bias": None,
    "residual": None,
    "initial_state": None,
    "output_final_state": False,
    "cu_seqlens": None,
    "cu_seqlens_cpu": None,
    "chunk_indices": None,
    "cp_context": None,
}

_kernels_mod = None


def _kernels():
    """The promoted kernels, imported on first use (they pull in triton)."""
    global _kernels_mod
    if _kernels_mod is None:
        from . import _kernels

        _kernels_mod = _kernels
    return _kernels_mod


def _warm_sig(x: torch.Tensor, weight: torch.Tensor) -> tuple:
    """What decides compilation and autotuning of one call: shapes, strides, dtypes, device.
    The stream is deliberately absent (see support.capture_unsupported_reason)."""
    return (
        FAMILY,
        tuple(x.shape),
        tuple(x.stride()),
        x.dtype,
        tuple(weight.shape),
        weight.dtype,
        x.device.index,
    )


def _unsupported_reason(
    x: Any,
    weight: Any,
    activation: Any,
    backend: Any,
    options: dict[str, Any],
    kwargs: dict[str, Any],
) -> str | None:
    """None when our kernels take this call, else why not (one line). Never raises: an
    argument the gate cannot even classify is a reason to hand the call to fla."""
    try:
        return _classify(x, weight, activation, backend, options, kwargs)
    except Exception as exc:  # e.g. an array where a flag was expected: fla decides
        return f"arguments kernel-fun cannot classify ({type(exc).__name__}: {exc})"


def _classify(
    x: Any,
    weight: Any,
    activation: Any,
    backend: Any,
    options: dict[str, Any],
    kwargs: dict[str, Any],
) -> str | None:
    if support.disabled(FAMILY):
        return "disabled by KERNEL_FUN_DISABLE / KERNEL_FUN_CCONV_DISABLE"
    if kwargs:
        return f"keyword(s) {sorted(kwargs)} are not handled by kernel-fun"
    for name, default in _DEFAULT_ONLY.items():
        value = options[name]
        if name == "output_final_state":
            if not (value is False or value is None):
                return f"output_final_state={value!r} is not supported (only False)"
        elif value is not default:
            return f"{name} is not supported (only {name}=None)"
    if not isinstance(activation, str) or activation not in SUPPORTED_ACTIVATIONS:
        return f"activation={activation!r} is not supported (only 'silu'/'swish')"
    if not isinstance(backend, str) or backend != "triton":
        return f"backend={backend!r} is not supported (only 'triton')"
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return "x and weight must both be tensors"
    if x.dim() != 3:
        return f"x must be [B, T, D], got {x.dim()} dims"
    if x.dtype not in SUPPORTED_X_DTYPES:
        return f"x dtype {x.dtype} is not supported (float16/bfloat16)"
    if weight.dim() != 2 or weight.shape[0] != x.shape[2]:
        return f"weight must be [D, W] with D={x.shape[2]}, got {tuple(weight.shape)}"
    if not 1 <= weight.shape[1] <= MAX_W:
        return f"weight width W={weight.shape[1]} is not supported (W <= {MAX_W})"
    if not weight.is_floating_point():
        return f"weight dtype {weight.dtype} is not a float dtype"
    if x.numel() == 0:
        return "empty input"
    if x.shape[0] > MAX_B:
        return f"batch B={x.shape[0]} exceeds {MAX_B}"
    reason = support.triton_unsupported_reason(x, FAMILY, MIN_SM_MAJOR)
    if reason is not None:
        return reason
    if weight.device != x.device:
        return f"weight is on {weight.device}, x on {x.device}"
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    return support.capture_unsupported_reason(_warm_sig(x, weight), needs_grad)


class _CausalConv1dSilu(torch.autograd.Function):
    """y = silu(causal_conv1d(x, weight)) through the promoted strip kernels."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        k = _kernels()
        y = k.cconv_fwd(x, weight)
        ctx.save_for_backward(x, weight)
        ctx.sig = _warm_sig(x, weight)
        support.mark_warm(ctx.sig, "fwd")
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight = ctx.saved_tensors
        dx, dw = _kernels().cconv_bwd(x, weight, dy)
        support.mark_warm(ctx.sig, "bwd")
        return (
            dx if ctx.needs_input_grad[0] else None,
            dw if ctx.needs_input_grad[1] else None,
        )


def _engage() -> bool:
    """First-use bookkeeping; False when fla drift was found (then fla serves every call)."""
    support.log_versions_once()
    try:
        return compat.check_fla(FAMILY)
    except compat.FlaDriftError as e:
        # A training step fla could run must not crash here: report loudly, fall back.
        support.log_once(f"kernel-fun cconv: {e}; falling back to fla", logging.ERROR)
        return False


def _options(
    bias: Any,
    residual: Any,
    initial_state: Any,
    output_final_state: Any,
    cu_seqlens: Any,
    cu_seqlens_cpu: Any,
    chunk_indices: Any,
    cp_context: Any,
) -> dict[str, Any]:
    """fla's default-only parameters by name: what the gate checks and the fallback passes."""
    return {
        "bias": bias,
        "residual": residual,
        "initial_state": initial_state,
        "output_final_state": output_final_state,
        "cu_seqlens": cu_seqlens,
        "cu_seqlens_cpu": cu_seqlens_cpu,
        "chunk_indices": chunk_indices,
        "cp_context": cp_context,
    }


@torch.compiler.disable
def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool | None = False,
    activation: str | None = None,
    backend: str | None = "triton",
    cu_seqlens: torch.Tensor | None = None,
    cu_seqlens_cpu: torch.LongTensor | None = None,
    chunk_indices: torch.LongTensor | None = None,
    cp_context: Any | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Drop-in for fla's `causal_conv1d` (flash-linear-attention 0.6.0), same contract.

    x: [B, T, D]; weight: [D, W]. Returns (y, final_state): y [B, T, D] contiguous in x's
    dtype, final_state None on our path (our path never produces one). Inside the supported
    box (module docstring) our kernels run; anything else, including every argument this
    package does not know, is passed to fla unchanged, so it returns (or raises) exactly what
    fla does. Errors: none of its own; fla's for inputs fla rejects.
    """
    options = _options(
        bias, residual, initial_state, output_final_state,
        cu_seqlens, cu_seqlens_cpu, chunk_indices, cp_context,
    )  # fmt: skip
    reason = _unsupported_reason(x, weight, activation, backend, options, kwargs)
    if reason is None and not _engage():
        reason = "fla drift found by the compatibility probe (see the error logged above)"
    if reason is not None:
        support.report_fallback(FAMILY, reason)
        return compat.fla_causal_conv1d()(
            x=x,
            weight=weight,
            activation=activation,
            backend=backend,
            **options,
            **kwargs,
        )
    return _CausalConv1dSilu.apply(x, weight), None


def is_supported(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool | None = False,
    activation: str | None = None,
    backend: str | None = "triton",
    cu_seqlens: torch.Tensor | None = None,
    cu_seqlens_cpu: torch.LongTensor | None = None,
    chunk_indices: torch.LongTensor | None = None,
    cp_context: Any | None = None,
    **kwargs: Any,
) -> tuple[bool, str]:
    """Would `causal_conv1d` with these arguments run our kernels? Returns (ok, reason):
    (True, "supported") or (False, why it would go to fla). Reads the env switches now."""
    options = _options(
        bias, residual, initial_state, output_final_state,
        cu_seqlens, cu_seqlens_cpu, chunk_indices, cp_context,
    )  # fmt: skip
    reason = _unsupported_reason(x, weight, activation, backend, options, kwargs)
    return (reason is None, reason or "supported")


def warmup(
    D: int,
    W: int = 4,
    *,
    B: int = 1,
    T_max: int = 8192,
    dtype: torch.dtype = torch.bfloat16,
    weight_dtype: torch.dtype = torch.float32,
    device: torch.device | str | int | None = None,
    backward: bool = True,
) -> int:
    """Check fla's internals and fill the autotune caches for calls of width D up to T_max.

    Raises compat.FlaDriftError when an fla symbol or keyword this package calls has moved
    (KERNEL_FUN_FALLBACK=1 turns that into a warning, and calls then go to fla). Runs one
    forward (and backward) at T = T_max, T_max/2, ..., 1, which visits every autotune size
    bucket (the kernels key on B*T*D rounded to a power of four) up to B * T_max * D, so
    later calls at any T <= T_max, at this D, W and these dtypes, autotune
    nothing. Returns the number of warm-up calls made (0 when our kernels are not used here,
    e.g. on a CPU-only machine).
    """
    if not compat.check_fla(FAMILY) or not torch.cuda.is_available():
        return 0
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else device
    dev = torch.device(dev) if not isinstance(dev, torch.device) else dev
    if dev.type != "cuda":
        return 0
    w = torch.randn(D, W, device=dev, dtype=torch.float32).to(weight_dtype)
    calls = 0
    T = T_max
    while T >= 1:
        x = torch.randn(B, T, D, device=dev, dtype=dtype)
        ok, _ = is_supported(x, w, activation="silu")
        if not ok:
            break
        if backward:
            xg = x.requires_grad_()
            wg = w.detach().requires_grad_()
            y, _ = causal_conv1d(xg, wg, activation="silu")
            y.backward(torch.randn_like(y))
        else:
            with torch.no_grad():
                causal_conv1d(x, w, activation="silu")
        calls += 1
        T //= 2
    torch.cuda.synchronize(dev)
    return calls
