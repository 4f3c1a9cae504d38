"""Dispatch for `kernel_fun.cconv.causal_conv1d` and `causal_conv1d_update`: our kernels
inside the supported box, fla verbatim outside it.

The gate is a whitelist. `FLA_PARAMETERS` classifies every parameter of fla's
`causal_conv1d`; a keyword fla may grow later lands in `**kwargs`, and any keyword there
forces the fallback, so a flag this package has never seen can never be silently ignored.

Two kinds of vendored module: `_kernels/strip.py` (idea 001: bf16/fp16 x, silu, no optional
argument) and box modules, which take every case of fla's causal_conv1d but
`backend="cuda"` / `"mix"` and `cp_context`, and the decode step (`BOX_API`: the module of
idea 002 or a later one that was promoted; an earlier idea's module vendored only because the
winner imports from it keeps just what the winner uses, and need not carry it). The box
module (`box_modules()`: the vendored winner's module when it carries every case, else the
first of strip4, strip3 and strip2 the build vendors) is imported on first use; while none
is, or the one found lacks `BOX_API` (`_box()` is None), only 001's case runs our kernels.

The entry point is opaque to torch.compile (traced, it calls a `torch.compiler.disable`d
copy of itself), and every tensor operation of our path runs inside one
`torch.autograd.Function`, except a dense call that needs no gradient (no input requires
grad, or grad mode is off), which runs the dense forward directly (`_dense_call`). Every launch, forward and
backward, runs under its tensors' device (`_on`), whatever the current device is.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch
import torch.autograd.forward_ad as _fwad

from .._common import compat, support

FAMILY = "cconv"
BOX_MODULE = "kernel_fun.cconv._kernels.strip2"  # idea 002, once vendored
MERGED_MODULE = "kernel_fun.cconv._kernels.strip3"  # idea 003, once vendored
EXACT_MODULE = "kernel_fun.cconv._kernels.strip4"  # idea 004, once vendored (tried first)
# The box modules, newest idea first: whichever of them the build vendors takes every case.
BOX_MODULES = (EXACT_MODULE, MERGED_MODULE, BOX_MODULE)
ACTIVATIONS = (None, "silu", "swish")
STRIP_X_DTYPES = (torch.float16, torch.bfloat16)  # idea 001
BOX_X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # idea 002
SEQLEN_DTYPES = (torch.int32, torch.int64)
MAX_W = 4
MAX_B = 65535  # the batch is the grid's third dimension
MAX_N = 65535  # sequences are the state kernels' second grid dimension

# Every parameter of fla 0.6.0's causal_conv1d, and what this package does with it.
# A test compares these keys with fla's live signature.
FLA_PARAMETERS: dict[str, str] = {
    "x": "ours: [B, T, D] fp16/bf16/fp32 CUDA tensor, any strides",
    "weight": "ours: [D, W] float tensor, W <= 4",
    "bias": "ours: None or a [D] float tensor",
    "residual": "ours: None or a float tensor shaped like x",
    "initial_state": "ours: None or an [N, D, W] float tensor",
    "output_final_state": "ours: False / None / True",
    "activation": "ours: None, 'silu' or 'swish'",
    "backend": "ours: 'triton'; 'cuda' / 'mix' go to fla",
    "cu_seqlens": "ours: None or a 1-D int32/int64 tensor [N+1] on x's device, with B = 1",
    "cu_seqlens_cpu": "default-only (None): fla chunks by it, our kernels by cu_seqlens",
    "chunk_indices": "default-only (None): fla's kernels read it, ours derive it from cu_seqlens",
    "cp_context": "default-only (None): context parallelism goes to fla",
    "kwargs": "default-only (empty): any extra keyword goes to fla",
}

# Parameters of fla 0.6.0's causal_conv1d_update (a test compares them with fla's).
FLA_UPDATE_PARAMETERS: dict[str, str] = {
    "x": "ours: [N, D], [1, N, D] or [N, 1, D] fp16/bf16/fp32 CUDA tensor",
    "cache": "ours: a contiguous [N, D, W] float tensor, updated in place",
    "residual": "ours: None or a float tensor shaped like x",
    "weight": "ours: [D, W] float tensor, W <= 4",
    "bias": "ours: None or a [D] float tensor",
    "activation": "ours: None, 'silu' or 'swish'",
}

_kernels_mod = None
_box_mod: Any = False  # False: not looked up yet; None: not vendored, or broken
_box_error: str | None = None  # why a vendored box module failed to import


def _kernels():
    """The 001 kernels, imported on first use (they pull in triton)."""
    global _kernels_mod
    if _kernels_mod is None:
        from . import _kernels

        _kernels_mod = _kernels
    return _kernels_mod


def kernel_names() -> dict[str, tuple[str, ...]]:
    """torch.profiler names of this build's own conv kernels, by direction: {"fwd": ...,
    "bwd": ..., "other": ...} (a kernel whose name holds "fwd" is a forward one, "bwd" a
    backward one; the final-state, initial-state-gradient and decode kernels are "other").
    Launch witnesses and tools/prodtime.py count by these names, whichever idea the build
    vendored (their kernels' names differ). Imports the vendored kernels (triton) and fla's
    conv module. Raises RuntimeError when this build vendors no cconv kernels, when they
    define no forward or no backward kernel (a witness counting by an empty group could not
    tell our launches from none), or when one of them has the name of a kernel of fla's
    conv (a launch of fla's would count as ours)."""
    try:
        names = support.triton_kernels_of(f"{__package__}._kernels")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}._kernels":
            raise
        raise RuntimeError(
            "this kernel-fun build vendors no cconv kernels (kernel_fun.cconv._kernels is "
            "missing); vendor them with `make vendor FAMILY=cconv`"
        ) from exc
    fwd = tuple(n for n in names if "fwd" in n)
    bwd = tuple(n for n in names if "bwd" in n and n not in fwd)
    if not fwd or not bwd:
        raise RuntimeError(
            f"the vendored cconv kernels define no {'forward' if not fwd else 'backward'} "
            f"kernel (found {names}); re-vendor with `make vendor FAMILY=cconv`"
        )
    try:  # every kernel of fla's conv package, its backends included
        fla_names = set(support.triton_kernels_of("fla.modules.causal_conv1d"))
    except ImportError:  # a backend that does not import here: fla's two Triton kernels
        fla_names = {"causal_conv1d_fwd_kernel", "causal_conv1d_bwd_kernel"}
    clash = sorted(set(names) & fla_names)
    if clash:
        raise RuntimeError(
            f"the vendored cconv kernels {clash} have the names of fla's conv kernels, so a "
            "profiler cannot tell their launches apart; rename them in the idea and re-vendor"
        )
    return {"fwd": fwd, "bwd": bwd, "other": tuple(n for n in names if n not in fwd + bwd)}


BOX_API = ("conv_fwd", "conv_bwd", "cconv_update", "cconv_fwd", "cconv_bwd")


def _missing_box_api(mod) -> list[str]:
    """The names of BOX_API that module `mod` lacks (empty when it carries every case)."""
    return [a for a in BOX_API if not hasattr(mod, a)]


def _winner_module() -> str | None:
    """The module the vendored `_kernels` package takes its entry points from: the one its
    generated `__init__.py` imports them from (`from .<module> import ...`, read, not
    imported), or None when the build vendors none. (Not the entry points' `__module__`: a
    promoted idea may hand out another idea's functions as its own.)"""
    import ast
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec(f"{__package__}._kernels")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None  # not vendored
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (AttributeError, TypeError, OSError, SyntaxError, UnicodeDecodeError) as exc:
        support.log_once(
            f"kernel-fun {FAMILY}: cannot read the vendored kernels' __init__.py ({exc}); the "
            "case kernels are looked up among the known modules only",
            logging.WARNING,
        )
        return None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            return f"{__package__}._kernels.{node.module}"
    return None


def box_modules() -> tuple[str, ...]:
    """The modules to look for the box kernels in, in order: the vendored winner's module
    (`_winner_module()`) when it has the whole box API (BOX_API; 001's dense-only module does
    not), then BOX_MODULES, newest first. So a newly promoted idea's module is found without
    listing it here."""
    import importlib

    name = _winner_module()
    if name is None:
        return BOX_MODULES
    try:
        winner = importlib.import_module(name)
    except Exception:
        # a broken winner: tried first, so import_vendored reports it and calls go to fla,
        # rather than an older module's kernels running in its place
        return (name, *(m for m in BOX_MODULES if m != name))
    if _missing_box_api(winner):
        return BOX_MODULES
    return (name, *(m for m in BOX_MODULES if m != name))


def _box():
    """The kernels of every case (BOX_API: the vendored winner's module when it has them,
    else 004's strip4, 003's strip3 or 002's strip2), or None while none is vendored or when
    the vendored one fails to import (`_box_error` then says why; support.import_vendored).
    Looked up once."""
    global _box_mod, _box_error
    if _box_mod is False:
        mod, error = support.import_vendored(FAMILY, box_modules())
        missing = _missing_box_api(mod) if mod is not None else []
        if missing:
            # An earlier idea's module vendored as a helper of the winner keeps only what the
            # winner uses from it (tools/vendor.py), so it need not carry the box API.
            mod, error = None, f"{mod.__name__} has no {', '.join(missing)}"
            support.log_once(
                f"kernel-fun {FAMILY}: the vendored box module {error}; those calls go to fla",
                logging.WARNING,
            )
        _box_mod, _box_error = mod, error
    return _box_mod


def _no_box_reason(what: str) -> str:
    """Why `what` goes to fla in a build whose box kernels are absent or broken."""
    if _box_error is not None:
        return f"{what} needs the cconv box kernels, which this build cannot use ({_box_error})"
    return (
        f"{what} needs the cconv box kernels (ideas 002 and later), which this build does "
        "not include"
    )


def _on(t: torch.Tensor):
    """A context running launches on `t`'s device (a no-op when it is the current one)."""
    index = t.device.index
    if index is None or index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(index)


def _warm_sig(x: torch.Tensor, weight: torch.Tensor, case: tuple = ()) -> tuple:
    """What decides compilation and autotuning of one call: shapes, strides, dtypes, device,
    and the case flags. The stream is deliberately absent (see
    support.capture_unsupported_reason)."""
    return (
        FAMILY,
        tuple(x.shape),
        tuple(x.stride()),
        x.dtype,
        tuple(weight.shape),
        weight.dtype,
        x.device.index,
        case,
    )


def _is_float_on(t: Any, device: torch.device) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.device == device


def _unsupported_reason(
    x: Any,
    weight: Any,
    activation: Any,
    backend: Any,
    options: dict[str, Any],
    kwargs: dict[str, Any],
) -> str | None:
    """None when our kernels take this call, else why not (one line), fla drift included.
    Never raises: an argument the gate cannot even classify is a reason to hand the call to
    fla."""
    try:
        reason = _classify(x, weight, activation, backend, options, kwargs)
    except Exception as exc:  # e.g. an array where a flag was expected: fla decides
        return support.unclassifiable(exc)
    return reason if reason is not None else compat.drift_reason(FAMILY)


def _needs_box(x: torch.Tensor, activation: Any, options: dict[str, Any]) -> str | None:
    """Which argument puts the call outside idea 001's case (None: 001 takes it)."""
    if x.dtype not in STRIP_X_DTYPES:
        return f"x dtype {x.dtype}"
    if activation is None:
        return "activation=None"
    for name in ("bias", "residual", "initial_state", "cu_seqlens"):
        if options[name] is not None:
            return name
    if options["output_final_state"]:
        return "output_final_state=True"
    return None


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
    if options["cp_context"] is not None:
        return "cp_context (context parallelism) is not supported (only cp_context=None)"
    if not isinstance(backend, str) or backend != "triton":
        return f"backend={support.brief(backend)} is not supported (only 'triton')"
    if not (activation is None or (isinstance(activation, str) and activation in ACTIVATIONS)):
        return f"activation={support.brief(activation)} is not supported (only None/'silu'/'swish')"
    ofs = options["output_final_state"]
    if not (ofs is None or isinstance(ofs, bool)):
        return f"output_final_state={support.brief(ofs)} is not supported (only True/False/None)"
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return "x and weight must both be tensors"
    if x.dim() != 3:
        return f"x must be [B, T, D], got {x.dim()} dims"
    if x.dtype not in BOX_X_DTYPES:
        return f"x dtype {x.dtype} is not supported (float16/bfloat16/float32)"
    B, T, D = x.shape
    if weight.dim() != 2 or weight.shape[0] != D:
        return f"weight must be [D, W] with D={D}, got {tuple(weight.shape)}"
    W = weight.shape[1]
    if not 1 <= W <= MAX_W:
        return f"weight width W={W} is not supported (W <= {MAX_W})"
    if not weight.is_floating_point():
        return f"weight dtype {weight.dtype} is not a float dtype"
    if x.numel() == 0:
        return "empty input"
    if B > MAX_B:
        return f"batch B={B} exceeds {MAX_B}"
    reason = support.triton_unsupported_reason(x, FAMILY)
    if reason is not None:
        return reason
    dev = x.device
    if weight.device != dev:
        return f"weight is on {weight.device}, x on {dev}"
    bias, residual, h0 = options["bias"], options["residual"], options["initial_state"]
    cu = options["cu_seqlens"]
    if bias is not None and not (_is_float_on(bias, dev) and tuple(bias.shape) == (D,)):
        return f"bias must be a float [D={D}] tensor on {dev}"
    if residual is not None and not (_is_float_on(residual, dev) and residual.shape == x.shape):
        return f"residual must be a float tensor shaped like x on {dev}"
    # fla's chunking hints: fla computes with them as given, our kernels from cu_seqlens; the
    # two agree only if the hints are exact, which cannot be checked without a device sync.
    # (fla's layers never pass them.)
    for hint in ("cu_seqlens_cpu", "chunk_indices"):
        if options[hint] is not None:
            return f"{hint} is given (fla computes with it; our kernels derive it from cu_seqlens)"
    if cu is None:
        N = B
    else:
        if not (isinstance(cu, torch.Tensor) and cu.device == dev and cu.dtype in SEQLEN_DTYPES):
            return f"cu_seqlens must be an int32/int64 tensor on {dev}"
        if cu.dim() != 1 or cu.numel() < 2 or B != 1:
            return "cu_seqlens must be [N+1] with x [1, total, D]"
        N = cu.numel() - 1
    if N > MAX_N:
        return f"{N} sequences exceed {MAX_N}"
    if h0 is not None and not (_is_float_on(h0, dev) and tuple(h0.shape) == (N, D, W)):
        return f"initial_state must be a float [N={N}, D={D}, W={W}] tensor on {dev}"
    need = _needs_box(x, activation, options)
    if need is not None and _box() is None:
        return _no_box_reason(need)
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (x, weight, bias, residual, h0)
    )
    return support.capture_unsupported_reason(_warm_sig(x, weight, _case(options)), needs_grad)


def _case(options: dict[str, Any]) -> tuple:
    """The flags that select a kernel variant (part of the capture signature)."""
    return tuple(
        options[k] is not None for k in ("bias", "residual", "initial_state", "cu_seqlens")
    )


def _dense():
    """The kernels of the dense case: the box module's once vendored (003's are 001's loop),
    else 001's."""
    return _box() or _kernels()


class _CausalConv1dSilu(torch.autograd.Function):
    """y = silu(causal_conv1d(x, weight)), the dense case (x bf16/fp16, no optional
    argument): the shortest host path, through the dense entry points."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        with _on(x):
            y = _dense().cconv_fwd(x, weight)
        ctx.save_for_backward(x, weight)
        ctx.sig = _warm_sig(x, weight, (False, False, False, False))
        support.mark_warm(ctx.sig, "fwd")
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight = ctx.saved_tensors
        with _on(x):
            dx, dw = _dense().cconv_bwd(x, weight, dy)
        support.mark_warm(ctx.sig, "bwd")
        return (
            dx if ctx.needs_input_grad[0] else None,
            dw if ctx.needs_input_grad[1] else None,
        )


class _CausalConv1d(torch.autograd.Function):
    """(y, final_state) of fla's causal_conv1d, every case, through the box module (idea 003's
    or 002's kernels).

    Gradients: x, weight, bias, residual (dy itself), initial_state; final_state's gradient
    (dht) flows back into x and the initial state."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, initial_state, output_final_state, activation,
                cu_seqlens):  # fmt: skip
        with _on(x):
            y, final_state = _box().conv_fwd(
                x, weight, bias, residual, initial_state, bool(output_final_state), activation,
                cu_seqlens,
            )  # fmt: skip
        ctx.save_for_backward(x, weight, bias, residual, initial_state, cu_seqlens)
        ctx.activation = activation
        ctx.sig = _warm_sig(x, weight, (bias is not None, residual is not None,
                                        initial_state is not None, cu_seqlens is not None))  # fmt: skip
        support.mark_warm(ctx.sig, "fwd")
        return y, final_state

    @staticmethod
    def backward(ctx, dy, dht):
        x, weight, bias, residual, initial_state, cu_seqlens = ctx.saved_tensors
        with _on(x):
            dx, dw, db, dr, dh0 = _box().conv_bwd(
                x, weight, dy, bias, residual, initial_state, dht, ctx.activation, cu_seqlens
            )
        support.mark_warm(ctx.sig, "bwd")
        need = ctx.needs_input_grad
        return (
            dx if need[0] else None,
            dw if need[1] else None,
            db if need[2] else None,
            dr if need[3] else None,
            dh0 if need[4] else None,
            None,
            None,
            None,
        )


_NO_CASE = (False, False, False, False)


def _forward_ad_active() -> bool:
    """Whether a forward-mode AD level is open (torch.autograd.forward_ad.dual_level)."""
    return getattr(_fwad, "_current_level", -1) != -1


# torch.func's wrapper test, looked up once (absent from a torch without functorch)
_IS_WRAPPED = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)


def _functorch_wrapped(t: torch.Tensor) -> bool:
    """Whether `t` is a torch.func transform's wrapper (vmap, grad, jvp)."""
    return _IS_WRAPPED is not None and bool(_IS_WRAPPED(t))


def _dense_fast(x: Any, weight: Any, activation: Any, backend: Any, options: tuple) -> bool:
    """True when the call is certainly the dense case (x bf16/fp16 [B, T, D], silu, every
    optional argument absent) with every check of the full gate (`_classify`) passing, on
    cheap attribute reads, and no autograd transform other than reverse mode is active
    (forward-mode dual tensors and torch.func's wrapped tensors take the full path, whose
    autograd function raises for them as fla's does). Any doubt, an exception included,
    answers False and the full gate decides, so the two never disagree on a call this
    accepts. `options`: fla's optional arguments as passed."""
    try:
        return _dense_fast_checks(x, weight, activation, backend, options)
    except Exception:  # an argument that cannot even be read: the full gate decides
        return False


def _dense_fast_checks(x: Any, weight: Any, activation: Any, backend: Any, options: tuple) -> bool:
    bias, residual, h0, ofs, cu, cu_cpu, chunk_indices, cp_context = options
    if not (
        bias is None and residual is None and h0 is None and cu is None and cu_cpu is None
        and chunk_indices is None and cp_context is None and (ofs is False or ofs is None)
    ):  # fmt: skip
        return False
    if type(activation) is not str or activation not in ("silu", "swish"):
        return False
    if type(backend) is not str or backend != "triton":
        return False
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)):
        return False
    if x.dtype not in STRIP_X_DTYPES or x.dim() != 3 or weight.dim() != 2:
        return False
    B, T, D = x.shape
    W = weight.shape[1]
    if weight.shape[0] != D or not 1 <= W <= MAX_W or not weight.is_floating_point():
        return False
    if B * T * D == 0 or B > MAX_B or weight.device != x.device:
        return False
    if _forward_ad_active() or _functorch_wrapped(x) or _functorch_wrapped(weight):
        return False
    # the switches (read now), a CUDA tensor, a tested architecture; then capture, whose
    # rules the full gate applies
    if support.triton_unsupported_reason(x, FAMILY) is not None or support.capturing():
        return False
    return compat.engage(FAMILY)


def _dense_call(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """y of a call `_dense_fast` accepted: through the autograd function when a gradient is
    wanted, else the dense forward alone (no autograd node to build)."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _CausalConv1dSilu.apply(x, weight)
    with _on(x):
        y = _dense().cconv_fwd(x, weight)
    support.mark_warm(_warm_sig(x, weight, _NO_CASE), "fwd", eager=True)  # _dense_fast checked
    return y


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
    """fla's optional parameters by name: what the gate checks and the fallback passes."""
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

    x: [B, T, D] ([1, total, D] with cu_seqlens [N+1]); weight: [D, W]; bias [D]; residual
    like x; initial_state [N, D, W]. Returns (y, final_state): y = act(conv(x) + bias) +
    residual, [B, T, D] contiguous in x's dtype; final_state [N, D, W] in x's dtype when
    output_final_state, else None. Inside the supported box (module docstring) our kernels
    run; anything else, including every argument this package does not know, is passed to
    fla unchanged, so it returns (or raises) exactly what fla does. Errors: none of its own;
    fla's for inputs fla rejects. One difference on our path: the final state's gradient
    reaches x in every slot (fla 0.6.0 drops slot 0's). Opaque to torch.compile: traced,
    it calls a `torch.compiler.disable`d copy of itself (eager calls skip that wrapper's
    cost).
    """
    opts = (bias, residual, initial_state, output_final_state, cu_seqlens, cu_seqlens_cpu,
            chunk_indices, cp_context)  # fmt: skip
    if torch.compiler.is_compiling():
        return _causal_conv1d_opaque(x, weight, activation, backend, opts, kwargs)
    if not kwargs and _dense_fast(x, weight, activation, backend, opts):
        return _dense_call(x, weight), None
    return _causal_conv1d(x, weight, activation, backend, opts, kwargs)


def _causal_conv1d(
    x: Any, weight: Any, activation: Any, backend: Any, opts: tuple, kwargs: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """causal_conv1d past the fast path: the full gate, then our kernels or fla."""
    (bias, residual, initial_state, output_final_state, cu_seqlens, cu_seqlens_cpu,
     chunk_indices, cp_context) = opts  # fmt: skip
    options = _options(
        bias, residual, initial_state, output_final_state,
        cu_seqlens, cu_seqlens_cpu, chunk_indices, cp_context,
    )  # fmt: skip
    reason = _unsupported_reason(x, weight, activation, backend, options, kwargs)
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
    if _needs_box(x, activation, options) is None:
        return _CausalConv1dSilu.apply(x, weight), None
    # The box kernels read bias[d] and cu_seqlens[n] at offsets d and n: a strided view
    # (bias[::2]) must reach them as a contiguous copy (fla's input guard makes the same
    # copies), the bias's through autograd so that its gradient lands in the view.
    bias = bias.contiguous() if bias is not None else None
    cu_seqlens = cu_seqlens.contiguous() if cu_seqlens is not None else None
    return _CausalConv1d.apply(
        x, weight, bias, residual, initial_state, output_final_state, activation, cu_seqlens
    )


_causal_conv1d_opaque = torch.compiler.disable(_causal_conv1d)


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


def _update_x(x: torch.Tensor) -> tuple[int, int] | None:
    """(N, D) of a decode step's x as fla reads it, or None for a shape fla's kernel rejects."""
    if x.dim() == 2:
        return x.shape[0], x.shape[1]
    if x.dim() == 3 and x.shape[0] == 1:
        return x.shape[1], x.shape[2]
    if x.dim() == 3 and x.shape[1] == 1:
        return x.shape[0], x.shape[2]
    return None


def _update_reason(x, cache, residual, weight, bias, activation) -> str | None:
    if support.disabled(FAMILY):
        return "disabled by KERNEL_FUN_DISABLE / KERNEL_FUN_CCONV_DISABLE"
    if not (activation is None or (isinstance(activation, str) and activation in ACTIVATIONS)):
        return f"activation={support.brief(activation)} is not supported (only None/'silu'/'swish')"
    if not all(isinstance(t, torch.Tensor) for t in (x, cache, weight)):
        return "x, cache and weight must be tensors"
    if x.dtype not in BOX_X_DTYPES:
        return f"x dtype {x.dtype} is not supported (float16/bfloat16/float32)"
    nd = _update_x(x)
    if nd is None:
        return f"x must be [N, D], [1, N, D] or [N, 1, D], got {tuple(x.shape)}"
    N, D = nd
    if weight.dim() != 2 or weight.shape[0] != D or not 1 <= weight.shape[1] <= MAX_W:
        return f"weight must be [D={D}, W<={MAX_W}], got {tuple(weight.shape)}"
    if not weight.is_floating_point():
        return f"weight dtype {weight.dtype} is not a float dtype"
    if x.numel() == 0 or N > MAX_N:
        return f"x {tuple(x.shape)}: {N} sequences of D={D} channels (1 to {MAX_N} sequences of D >= 1)"
    reason = support.triton_unsupported_reason(x, FAMILY)
    if reason is not None:
        return reason
    dev = x.device
    W = weight.shape[1]
    if not (_is_float_on(cache, dev) and tuple(cache.shape) == (N, D, W)):
        return f"cache must be a float [N={N}, D={D}, W={W}] tensor on {dev}"
    if not cache.is_contiguous():
        return "cache is not contiguous (fla updates a contiguous copy)"
    if weight.device != dev:
        return f"weight is on {weight.device}, x on {dev}"
    if bias is not None and not (_is_float_on(bias, dev) and tuple(bias.shape) == (D,)):
        return f"bias must be a float [D={D}] tensor on {dev}"
    if residual is not None and not (_is_float_on(residual, dev) and residual.shape == x.shape):
        return f"residual must be a float tensor shaped like x on {dev}"
    if _box() is None:
        return _no_box_reason("the decode step")
    return None


def causal_conv1d_update(
    x: torch.Tensor,
    cache: torch.Tensor,
    residual: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
) -> torch.Tensor:
    """Drop-in for fla's `causal_conv1d_update` (0.6.0): one decode step, one token per
    sequence (the call `ShortConvolution.step` makes).

    x: [N, D], [1, N, D] or [N, 1, D]; cache: [N, D, W], updated in place to
    [cache[..., 1:], x]; residual like x; weight [D, W]; bias [D]. Returns (y, cache): y =
    act(sum_k weight[:, k] cache[:, :, k] + bias) + residual, shaped like x, in x's dtype.
    Outside the supported box the call is fla's, verbatim (same result or error). Opaque to
    torch.compile, as causal_conv1d.
    """
    if torch.compiler.is_compiling():
        return _update_opaque(x, cache, residual, weight, bias, activation)
    return _update(x, cache, residual, weight, bias, activation)


def _update(x, cache, residual, weight, bias, activation):
    """causal_conv1d_update's gate, then our decode kernel or fla's call."""
    try:
        reason = _update_reason(x, cache, residual, weight, bias, activation)
    except Exception as exc:
        reason = support.unclassifiable(exc)
    if reason is None:
        reason = compat.drift_reason(FAMILY)
    if reason is not None:
        support.report_fallback(FAMILY, reason)
        return compat.fla_original("causal_conv1d_update")(
            x=x, cache=cache, residual=residual, weight=weight, bias=bias, activation=activation
        )
    with _on(x):  # the decode kernel reads bias[d] at offset d too
        return _box().cconv_update(
            x, cache, residual, weight, bias.contiguous() if bias is not None else None,
            activation,
        )  # fmt: skip


_update_opaque = torch.compiler.disable(_update)


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
    """Check fla's internals and compile the kernels for calls of width D up to T_max.

    Raises compat.FlaDriftError when an fla symbol or keyword this package calls has moved
    (KERNEL_FUN_FALLBACK=1 turns that into a warning, and calls then go to fla). Runs one
    forward (and backward) at T = T_max, T_max - 1, T_max/2, T_max/2 - 1, ..., 1, which
    visits every size bucket (the kernels' configuration is chosen by B*T*D rounded to a
    power of four) up to B * T_max * D with both an even and a ragged last time segment, so
    later calls at any T <= T_max, at this D, W and these dtypes, compile and autotune
    nothing. Returns the number of warm-up calls made (0 when our kernels are not used here,
    e.g. on a CPU-only machine, or a W or dtype outside the supported box). Raises, on any
    machine, ValueError for a D, W, B or T_max that is not a positive int, a dtype that is
    not a floating dtype, a device that does not parse or a backward that is not a bool, and
    TypeError for a dtype that is not a torch.dtype.
    """
    support.check_positive_ints(D=D, W=W, B=B, T_max=T_max)
    support.check_dtypes(dtype=dtype, weight_dtype=weight_dtype)
    if not isinstance(backward, bool):
        raise ValueError(f"warmup: backward={backward!r} is not a bool")
    device = support.check_device(device)
    if not compat.check_fla(FAMILY) or not torch.cuda.is_available():
        return 0
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else device
    if dev.type != "cuda":
        return 0
    w = torch.randn(D, W, device=dev, dtype=torch.float32).to(weight_dtype)
    calls = 0
    # T_max, T_max - 1, T_max / 2, T_max / 2 - 1, ...: each size bucket with an even and a
    # ragged last time segment (whether the segment length divides T is compiled in)
    lengths = []
    T = T_max
    while T >= 1:
        lengths += [T, T - 1] if T > 1 else [T]
        T //= 2
    for T in lengths:
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
    torch.cuda.synchronize(dev)
    return calls
