"""Dispatch for `kernel_fun.kda.chunk_kda`: our kernels inside the supported box, fla
verbatim outside it.

The gate is a whitelist. `FLA_PARAMETERS` classifies every parameter of fla's `chunk_kda`;
of the keywords fla reads from `**kwargs`, `A_log`, `dt_bias` and `chunk_size` are known and
checked, and any other keyword (the deprecated `transpose_state_layout` included, whose
warning and error are fla's) forces the fallback, so a flag this package has never seen can
never be silently ignored. A call that fla itself would hand to another of its backends
(FlashKDA for inference, ...) goes to fla too.

The entry point is opaque to torch.compile (`torch.compiler.disable`), every tensor
operation of our path runs inside one `torch.autograd.Function`, and every launch runs
under `torch.cuda.device(q.device)`, so a call on tensors of a device that is not the
current one works.

Autotuning and warmup. The promoted chain (ladder idea kda/025, with kda/024's launches)
launches every kernel it runs at a fixed configuration, untuned: its own kernels (the
forward's fused state pass and output and diagonal score tiles, the backward's fused WY
stage, intra-chunk stage and gate tail) and the fla kernels it reuses (the L2 norm and its
backward, the gate cumsum, the off-diagonal tiles and solve, w/u, dAv, the state recompute
and the state gradient), which it launches by name at the configurations fla's autotuner
picked at prod (`_kernels/launch24.py`; the names and keywords are in
`_common.compat.FLA_SYMBOLS`). The L2 norm's NB, a constexpr fla's kernels take only as an
autotune key, is passed as 1 at every T, so a new T compiles nothing either. Two cases still
go through fla's autotuner: K above 128 (fla's forward stages and state kernels) and, with
safe_gate, the forward's intra-chunk stage (fla's). Read from fla 0.6.0 (`key=[...]` of
every autotuned kernel those stages launch):

  * no kernel keys on T itself. chunk_delta_h (fwd_h, bwd_dhu), kda/chunk_intra,
    kda/chunk_intra_token_parallel, kda/wy_fast, kda/chunk_bwd (dAv), kda/gate
    (kda_gate_chunk_cumsum) and gla/chunk (chunk_gla_fwd_o_gk, K > 128) key on head counts,
    head sizes, block sizes, STATE_V_FIRST and IS_VARLEN only;
  * modules/norm/l2norm's l2norm_fwd_kernel / l2norm_bwd_kernel key on
    NB = ceil(rows / 65536) with rows = B * T * H (the q and k rows normalised): the one
    length-dependent key, one bucket per 65536 rows, reached through fla's autotuner only
    where the chain calls fla's L2 norm wrappers (K above 128).

So `warmup` runs the chain (forward and backward) at each batch size asked for, at the
smallest T of every NB bucket up to B * T_max * H rows, plus T = 64 and 100 (the Triton
integer specialisations T % 16 == 0 and not); with `varlen=True` it does the same for a
packed batch. After it, calls with those B, any T <= T_max (or packed length <= T_max) and
the same H, HV, K, V, dtype and flags autotune nothing.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
from typing import Any

import torch

from .._common import compat, support

FAMILY = "kda"
SUPPORTED_DTYPES = (torch.bfloat16,)
PARAM_DTYPE = torch.float32  # A_log, dt_bias, initial_state
MAX_K = 256
MAX_V = 512  # the promoted WY stage holds one chunk's V in one program (wy.kda_bwd_wy)
CHUNK_SIZE = 64
# the chain and its stages were checked and timed on sm90 only
TESTED_ARCHS: frozenset[tuple[int, int]] = frozenset({(9, 0)})
LOWER_BOUND_RANGE = (-5.0, 0.0)  # fla's safe range for the lower-bound gate: [-5, 0)

# Cases the gate can classify but the promoted chain has not yet passed its GPU tests on
# (package/tests/test_kda_gpu.py and test_kda_layer_gpu.py run them with this emptied): they
# go to fla until those tests pass on the H200. Passed there (H200, fla 0.6.0): dense calls,
# initial/final state, T not a multiple of 64, beta in (0, 2), GVA, the lower-bound gate,
# packed sequences with and without a state (length-1 sequences included) and int32
# cu_seqlens (what fla's KimiDeltaAttention builds from an attention_mask), so none is
# pending. Known case names: "varlen", "varlen_state", "varlen_int32", "gva", "lower_bound".
PENDING_CASES: dict[str, str] = {}
CU_DTYPES = (torch.int32, torch.int64)
L2NORM_ROWS_PER_BUCKET = 65536  # fla 0.6.0's l2norm: NB = cdiv(rows, 2048 * 32)

# Every parameter of fla 0.6.0's chunk_kda, and what this package does with it.
# "ours": values inside the box run our kernels; "layer flag": only True runs ours;
# "default-only": anything but the default forces the fallback. A test compares these keys
# with fla's live signature.
FLA_PARAMETERS: dict[str, str] = {
    "q": "ours: [B, T, H, K] bf16 CUDA tensor, K <= 256",
    "k": "ours: [B, T, H, K] bf16, q's shape",
    "v": "ours: [B, T, HV, V] bf16, HV a multiple of H, V <= 512",
    "g": "ours: [B, T, HV, K] bf16 raw gate input",
    "beta": "ours: [B, T, HV] bf16 raw logits",
    "scale": "ours: None (K ** -0.5) or a number",
    "initial_state": "ours: None or [N, HV, V, K] fp32",
    "output_final_state": "ours: True or False",
    "use_qk_l2norm_in_kernel": "layer flag (True)",
    "use_gate_in_kernel": "layer flag (True)",
    "use_beta_sigmoid_in_kernel": "layer flag (True)",
    "allow_neg_eigval": "ours: True or False",
    "safe_gate": "ours: False (softplus gate) or True with lower_bound in [-5, 0)",
    "lower_bound": "ours: None (softplus gate) or in [-5, 0) with safe_gate=True",
    "disable_recompute": "default-only (False)",
    "return_intermediate_states": "default-only (False)",
    "state_v_first": "layer flag (True)",
    "cu_seqlens": "ours: None or [N + 1] int64 or int32 on q's device, B == 1",
    "cu_seqlens_cpu": "default-only: None (fla would chunk by it, the chain by cu_seqlens)",
    "cp_context": "default-only (None)",
    "use_graph": "default-only (False)",
    "max_num_seqs": "default-only (None)",
    "kwargs": "ours: A_log [HV] fp32, dt_bias [HV * K] fp32, chunk_size 64; any other "
    "keyword goes to fla",
}

_LAYER_FLAGS = (
    "use_qk_l2norm_in_kernel",
    "use_gate_in_kernel",
    "use_beta_sigmoid_in_kernel",
    "state_v_first",
)
_DEFAULT_ONLY = {
    "disable_recompute": False,
    "return_intermediate_states": False,
    "cp_context": None,
    "use_graph": False,
    "max_num_seqs": None,
}
_KNOWN_KWARGS = ("A_log", "dt_bias", "chunk_size")

_kernels_mod: Any = False  # False: not looked up yet; None: this build has none or it broke
_kernels_error: str | None = None  # why a vendored chain that exists failed to import


def _kernels():
    """The promoted chain: the vendored `_kernels` package, whose `__init__` exports the
    family's entry points `kda_fwd` and `kda_bwd` (from whichever module the vendor wrote),
    imported on first use (it pulls in triton). None when this build has no vendored kda
    kernels, or when they fail to import (`_kernels_error` then says why, and every call
    goes to fla with it as the reason; support.import_vendored). Looked up once."""
    global _kernels_mod, _kernels_error
    if _kernels_mod is False:
        _kernels_mod, _kernels_error = support.import_vendored(FAMILY, (f"{__package__}._kernels",))
    return _kernels_mod


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_flag(x: Any) -> bool:
    return x is True or x is False


def _warm_sig(q: torch.Tensor, v: torch.Tensor, options: dict[str, Any]) -> tuple:
    """What decides compilation and autotuning of one call: shapes, dtype, device and the
    kernel-selecting flags. The stream is deliberately absent (see
    support.capture_unsupported_reason)."""
    cu = options["cu_seqlens"]
    return (
        FAMILY,
        tuple(q.shape),
        tuple(v.shape),
        q.dtype,
        None if cu is None else (int(cu.shape[0]), cu.dtype),
        options["initial_state"] is not None,
        bool(options["output_final_state"]),
        bool(options["safe_gate"]),
        bool(options["allow_neg_eigval"]),
        q.device.index,
    )


def _device_reason(q: torch.Tensor) -> str | None:
    """None when q's device is one the kda chain was tested on (TESTED_ARCHS, or any with
    KERNEL_FUN_ALLOW_ARCH on), else why not: the gate every Triton family shares."""
    return support.triton_unsupported_reason(q, FAMILY, TESTED_ARCHS)


def _fla_backend_reason(
    q: Any, k: Any, v: Any, g: Any, beta: Any, options: dict[str, Any], kwargs: dict[str, Any]
) -> str | None:
    """Why fla would not run its own Triton chain for this call (it would hand it to another
    of its registered backends, e.g. FlashKDA for inference), or None."""
    registries = compat.fla_symbol("backends._function_registries")
    registry = registries.get(inspect.unwrap(compat.fla_chunk_kda()))
    if registry is None:
        return None
    for backend in registry._get_sorted_backends():
        if not (backend.is_available() and backend.is_enabled()):
            continue
        accepted, _ = backend.verify(
            "chunk_kda", q=q, k=k, v=v, g=g, beta=beta, **options, **kwargs
        )
        if accepted and backend.get_implementation("chunk_kda") is not None:
            return f"fla routes this call to its {backend.backend_type!r} backend"
    return None


def _unsupported_reason(
    q: Any, k: Any, v: Any, g: Any, beta: Any, options: dict[str, Any], kwargs: dict[str, Any]
) -> str | None:
    """None when our kernels take this call, else why not (one line), fla drift included.
    Never raises: an argument the gate cannot even classify is a reason to hand the call to
    fla."""
    try:
        reason = _classify(q, k, v, g, beta, options, kwargs)
    except Exception as exc:  # e.g. an array where a flag was expected: fla decides
        return support.unclassifiable(exc)
    return reason if reason is not None else compat.drift_reason(FAMILY)


def _classify(
    q: Any, k: Any, v: Any, g: Any, beta: Any, options: dict[str, Any], kwargs: dict[str, Any]
) -> str | None:
    if support.disabled(FAMILY):
        return "disabled by KERNEL_FUN_DISABLE / KERNEL_FUN_KDA_DISABLE"
    unknown = sorted(set(kwargs) - set(_KNOWN_KWARGS))
    if unknown:
        return f"keyword(s) {unknown} are not handled by kernel-fun"
    chunk_size = kwargs.get("chunk_size", CHUNK_SIZE)
    if type(chunk_size) is not int or chunk_size != CHUNK_SIZE:
        return f"chunk_size={support.brief(chunk_size)} is not supported (only {CHUNK_SIZE})"
    for name in _LAYER_FLAGS:
        if options[name] is not True:
            return f"{name}={support.brief(options[name])} is not supported (only True, as the layer passes)"
    for name, default in _DEFAULT_ONLY.items():
        if options[name] is not default:
            return f"{name}={support.brief(options[name])} is not supported (only {default!r})"
    for name in ("output_final_state", "allow_neg_eigval", "safe_gate"):
        if not _is_flag(options[name]):
            return f"{name}={support.brief(options[name])} is not a bool"
    scale = options["scale"]
    if scale is not None and not (_is_number(scale) and math.isfinite(scale)):
        return f"scale={support.brief(scale)} is not supported (None or a finite number)"
    lower_bound = options["lower_bound"]
    if options["safe_gate"]:
        lo, hi = LOWER_BOUND_RANGE
        if not (_is_number(lower_bound) and lo <= lower_bound < hi):
            return f"safe_gate=True needs lower_bound in [{lo:g}, {hi:g}), got {support.brief(lower_bound)}"
    elif lower_bound is not None:
        return "lower_bound without safe_gate=True is not supported (a gate form outside the box)"

    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            return f"{name} is not a tensor"
        if t.dtype not in SUPPORTED_DTYPES:
            return f"{name} dtype {t.dtype} is not supported (bfloat16)"
    if q.dim() != 4 or v.dim() != 4:
        return f"q and v must be [B, T, H, K] and [B, T, HV, V], got {q.dim()} and {v.dim()} dims"
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if tuple(k.shape) != tuple(q.shape):
        return f"k shape {tuple(k.shape)} differs from q's {tuple(q.shape)}"
    if tuple(v.shape[:2]) != (B, T) or HV == 0 or HV % max(H, 1):
        return f"v shape {tuple(v.shape)} does not fit q's {tuple(q.shape)} (HV a multiple of H)"
    if tuple(g.shape) != (B, T, HV, K) or tuple(beta.shape) != (B, T, HV):
        return f"g {tuple(g.shape)} / beta {tuple(beta.shape)} are not [B, T, HV, K] / [B, T, HV]"
    if q.numel() == 0 or v.numel() == 0:
        return "empty input"
    if K > MAX_K:
        return f"head size K={K} is not supported (K <= {MAX_K})"
    if V > MAX_V:
        return f"value size V={V} is not supported (V <= {MAX_V})"

    A_log, dt_bias = kwargs.get("A_log"), kwargs.get("dt_bias")
    for name, t, n in (("A_log", A_log, HV), ("dt_bias", dt_bias, HV * K)):
        if not isinstance(t, torch.Tensor):
            return f"{name} must be a tensor (got {type(t).__name__})"
        if t.dtype != PARAM_DTYPE or t.dim() != 1 or t.shape[0] != n:
            return f"{name} must be [{n}] float32, got {tuple(t.shape)} {t.dtype}"

    h0 = options["initial_state"]
    cu, cu_cpu = options["cu_seqlens"], options["cu_seqlens_cpu"]
    if cu is not None:
        if not isinstance(cu, torch.Tensor) or cu.dtype not in CU_DTYPES or cu.dim() != 1:
            return "cu_seqlens must be a 1-D int32 or int64 tensor"
        if B != 1 or cu.shape[0] < 2:
            return f"cu_seqlens needs B == 1 and at least one sequence (B={B})"
    if cu_cpu is not None:
        # fla builds its chunk indices from cu_seqlens_cpu when given, and the chain from
        # cu_seqlens: the two agree only if the copy is exact, which cannot be checked
        # without a device sync. KimiDeltaAttention never passes it.
        return "cu_seqlens_cpu is given (fla chunks by it; the chain chunks by cu_seqlens)"
    if h0 is not None:
        N = B if cu is None else cu.shape[0] - 1
        if not isinstance(h0, torch.Tensor) or h0.dtype != PARAM_DTYPE:
            return "initial_state must be a float32 tensor"
        if tuple(h0.shape) != (N, HV, V, K):
            return f"initial_state must be [N, HV, V, K]={[N, HV, V, K]}, got {list(h0.shape)}"

    reason = _device_reason(q)
    if reason is not None:
        return reason
    others = [t for t in (k, v, g, beta, A_log, dt_bias, h0, cu) if t is not None]
    if any(t.device != q.device for t in others):
        return "all tensors must be on q's device"

    reason = _fla_backend_reason(q, k, v, g, beta, options, kwargs)
    if reason is not None:
        return reason
    if _kernels() is None:
        if _kernels_error is not None:
            return f"this build's vendored kda chain failed to import ({_kernels_error})"
        return "this build has no vendored kda kernels (kernel_fun/kda/_kernels)"
    for case, present in (
        ("varlen", cu is not None),
        (
            "varlen_state",
            cu is not None and (h0 is not None or bool(options["output_final_state"])),
        ),
        ("varlen_int32", cu is not None and cu.dtype == torch.int32),
        ("gva", HV > H),
        ("lower_bound", bool(options["safe_gate"])),
    ):
        if present and case in PENDING_CASES:
            return (
                f"{PENDING_CASES[case]}: the promoted chain has not passed its GPU tests on "
                "this case yet"
            )
    if cu is not None and support.capturing():
        return "a packed batch under CUDA graph capture needs fla's use_graph path"
    grads = (q, k, v, g, beta, A_log, dt_bias, h0)
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in grads)
    return support.capture_unsupported_reason(_warm_sig(q, v, options), needs_grad)


def _on_device(device: torch.device):
    """`torch.cuda.device(device)` for a CUDA device, so launches go to it; else a no-op."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


class _ChunkKDA(torch.autograd.Function):
    """(o, final_state) = chunk_kda with the layer's flags, through the promoted chain."""

    @staticmethod
    def forward(
        ctx,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        A_log: torch.Tensor,
        dt_bias: torch.Tensor,
        initial_state: torch.Tensor | None,
        scale: float,
        output_final_state: bool,
        cu_seqlens: torch.Tensor | None,
        lower_bound: float | None,
        safe_gate: bool,
        allow_neg_eigval: bool,
        sig: tuple,
    ):
        chain = _kernels()
        q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
        if initial_state is not None:
            initial_state = initial_state.contiguous()
        with _on_device(q.device):
            o, final_state, kctx = chain.kda_fwd(
                q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
                cu_seqlens, lower_bound, safe_gate, allow_neg_eigval,
            )  # fmt: skip
        # The tensors the chain's forward saved (with save_for_backward on the stand-in ctx,
        # as fla's ChunkKDAFunction.forward does) go to autograd's own bookkeeping, as fla's
        # Function does: an input changed in place before backward raises, a second backward
        # without retain_graph raises, saved-tensor hooks (save_on_cpu, checkpointing) apply,
        # and autograd frees them after backward.
        saved = getattr(kctx, "saved_tensors", None)
        ctx.chain_saved = saved is not None
        if ctx.chain_saved:
            ctx.save_for_backward(*saved)
            kctx.saved_tensors = None
        ctx.kctx = kctx
        ctx.sig = sig
        ctx.device = q.device
        support.mark_warm(sig, "fwd")
        return o, final_state

    @staticmethod
    def backward(ctx, do: torch.Tensor, dht: torch.Tensor | None):
        chain = _kernels()
        kctx = ctx.kctx
        if ctx.chain_saved:
            kctx.saved_tensors = ctx.saved_tensors  # raises where autograd says so
        try:
            with _on_device(ctx.device):
                dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0 = chain.kda_bwd(
                    kctx, do.contiguous(), None if dht is None else dht.contiguous()
                )
        finally:
            if ctx.chain_saved:
                kctx.saved_tensors = None
        support.mark_warm(ctx.sig, "bwd")
        return (dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0, *([None] * 7))


def _options(
    scale: Any,
    initial_state: Any,
    output_final_state: Any,
    use_qk_l2norm_in_kernel: Any,
    use_gate_in_kernel: Any,
    use_beta_sigmoid_in_kernel: Any,
    allow_neg_eigval: Any,
    safe_gate: Any,
    lower_bound: Any,
    disable_recompute: Any,
    return_intermediate_states: Any,
    state_v_first: Any,
    cu_seqlens: Any,
    cu_seqlens_cpu: Any,
    cp_context: Any,
    use_graph: Any,
    max_num_seqs: Any,
) -> dict[str, Any]:
    """fla's named parameters after the five tensors, by name: what the gate checks and the
    fallback passes."""
    return {
        "scale": scale,
        "initial_state": initial_state,
        "output_final_state": output_final_state,
        "use_qk_l2norm_in_kernel": use_qk_l2norm_in_kernel,
        "use_gate_in_kernel": use_gate_in_kernel,
        "use_beta_sigmoid_in_kernel": use_beta_sigmoid_in_kernel,
        "allow_neg_eigval": allow_neg_eigval,
        "safe_gate": safe_gate,
        "lower_bound": lower_bound,
        "disable_recompute": disable_recompute,
        "return_intermediate_states": return_intermediate_states,
        "state_v_first": state_v_first,
        "cu_seqlens": cu_seqlens,
        "cu_seqlens_cpu": cu_seqlens_cpu,
        "cp_context": cp_context,
        "use_graph": use_graph,
        "max_num_seqs": max_num_seqs,
    }


@torch.compiler.disable
def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    lower_bound: float | None = None,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    state_v_first: bool = False,
    cu_seqlens: torch.LongTensor | None = None,
    cu_seqlens_cpu: torch.LongTensor | None = None,
    cp_context: Any | None = None,
    use_graph: bool = False,
    max_num_seqs: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Drop-in for fla's `chunk_kda` (flash-linear-attention 0.6.0), same contract.

    q, k: [B, T, H, K]; v: [B, T, HV, V]; g: [B, T, HV, K] raw gate input; beta: [B, T, HV]
    raw logits; A_log: [HV] and dt_bias: [HV * K] by keyword; initial_state: [N, HV, V, K]
    fp32 (state_v_first); cu_seqlens: [N + 1] int64 or int32 with B == 1. Returns (o, final_state):
    o [B, T, HV, V] in q's dtype, final_state [N, HV, V, K] fp32 or None. Gradients come back
    for q, k, v, g, beta, A_log, dt_bias and initial_state.

    Inside the supported box (the module docstring and `FLA_PARAMETERS`) the promoted chain
    runs; anything else, including every argument this package does not know, is passed to
    fla unchanged, so it returns (or raises) exactly what fla does. Errors: none of its own;
    fla's for inputs fla rejects.
    """
    options = _options(
        scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, use_gate_in_kernel,
        use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound, disable_recompute,
        return_intermediate_states, state_v_first, cu_seqlens, cu_seqlens_cpu, cp_context,
        use_graph, max_num_seqs,
    )  # fmt: skip
    reason = _unsupported_reason(q, k, v, g, beta, options, kwargs)
    if reason is not None:
        support.report_fallback(FAMILY, reason)
        return compat.fla_chunk_kda()(q=q, k=k, v=v, g=g, beta=beta, **options, **kwargs)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    return _ChunkKDA.apply(
        q, k, v, g, beta, kwargs["A_log"], kwargs["dt_bias"], initial_state, float(scale),
        output_final_state, cu_seqlens, lower_bound, safe_gate, allow_neg_eigval,
        _warm_sig(q, v, options),
    )  # fmt: skip


def is_supported(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    lower_bound: float | None = None,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    state_v_first: bool = False,
    cu_seqlens: torch.LongTensor | None = None,
    cu_seqlens_cpu: torch.LongTensor | None = None,
    cp_context: Any | None = None,
    use_graph: bool = False,
    max_num_seqs: int | None = None,
    **kwargs: Any,
) -> tuple[bool, str]:
    """Would `chunk_kda` with these arguments run our kernels? Returns (ok, reason):
    (True, "supported") or (False, why it would go to fla). Reads the env switches now."""
    options = _options(
        scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, use_gate_in_kernel,
        use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound, disable_recompute,
        return_intermediate_states, state_v_first, cu_seqlens, cu_seqlens_cpu, cp_context,
        use_graph, max_num_seqs,
    )  # fmt: skip
    reason = _unsupported_reason(q, k, v, g, beta, options, kwargs)
    return (reason is None, reason or "supported")


def warm_lengths(B: int, H: int, T_max: int) -> list[int]:
    """The sequence lengths `warmup` runs at for batch size B (B = 1 for a packed batch):
    the smallest T of every l2norm bucket NB = ceil(B * T * H / 65536) reachable with
    T <= T_max, plus 64 and 100 where they fit, ascending. Raises ValueError for B, H or
    T_max below 1."""
    if min(B, H, T_max) < 1:
        raise ValueError(f"B, H and T_max must be >= 1, got B={B}, H={H}, T_max={T_max}")
    rows = B * H
    out = {T for T in (64, 100) if T <= T_max}
    for n in range(1, math.ceil(rows * T_max / L2NORM_ROWS_PER_BUCKET) + 1):
        T = L2NORM_ROWS_PER_BUCKET * (n - 1) // rows + 1
        if T <= T_max and math.ceil(rows * T / L2NORM_ROWS_PER_BUCKET) == n:
            out.add(T)
    return sorted(out)


def _warm_inputs(B, T, H, HV, K, V, dtype, dev, lower_bound, state, N):
    q, k = (torch.randn(B, T, H, K, device=dev, dtype=dtype) for _ in range(2))
    v = torch.randn(B, T, HV, V, device=dev, dtype=dtype)
    g = torch.randn(B, T, HV, K, device=dev, dtype=dtype)
    beta = torch.randn(B, T, HV, device=dev, dtype=dtype)
    A_log = torch.zeros(HV, device=dev) if lower_bound is not None else (
        torch.empty(HV, device=dev).uniform_(1, 16).log()
    )  # fmt: skip
    dt_bias = torch.full((HV * K,), -4.0, device=dev)
    h0 = torch.randn(N, HV, V, K, device=dev) if state else None
    return q, k, v, g, beta, A_log, dt_bias, h0


def _check_warmup_flags(lower_bound: Any, **flags: Any) -> None:
    """ValueError for warmup flags that are not bools, or a lower_bound that does not fit
    safe_gate (a number in LOWER_BOUND_RANGE with safe_gate=True, None without)."""
    for name, value in flags.items():
        if not _is_flag(value):
            raise ValueError(f"warmup: {name}={value!r} is not a bool")
    lo, hi = LOWER_BOUND_RANGE
    if flags["safe_gate"]:
        ok = isinstance(lower_bound, (int, float)) and not isinstance(lower_bound, bool)
        if not ok or not lo <= lower_bound < hi:
            raise ValueError(
                f"warmup: safe_gate=True needs lower_bound in [{lo}, {hi}), got {lower_bound!r}"
            )
    elif lower_bound is not None:
        raise ValueError(f"warmup: lower_bound={lower_bound!r} without safe_gate=True")


def warmup(
    H: int,
    HV: int | None = None,
    K: int = 128,
    V: int = 128,
    *,
    B: int | tuple[int, ...] = 1,
    T_max: int = 8192,
    varlen: bool = False,
    dtype: torch.dtype = torch.bfloat16,
    safe_gate: bool = False,
    lower_bound: float | None = None,
    allow_neg_eigval: bool = False,
    state: bool = False,
    device: torch.device | str | int | None = None,
    backward: bool = True,
) -> int:
    """Check fla's internals and fill the compile and autotune caches for one head layout.

    H, HV (default H), K, V: the heads and head sizes; B: the batch size(s) calls will use;
    T_max: the longest T (or packed length) calls will use; varlen: also warm the packed
    layout, with int64 and with int32 cu_seqlens; dtype, safe_gate / lower_bound, allow_neg_eigval, state
    (initial_state in, final_state out): the call's flags. Runs the chain at `warm_lengths`
    (see the module docstring for why those lengths), forward and backward unless
    backward=False. Later calls with these settings at any T <= T_max autotune nothing.

    Raises compat.FlaDriftError when an fla symbol or keyword the kda chain calls has moved
    (KERNEL_FUN_FALLBACK=1 turns that into a warning, and calls then go to fla). Returns the
    number of warm-up calls made (0 when our kernels are not used here, e.g. on a CPU-only
    machine or outside the supported box). Raises ValueError, on any machine, for an H, HV, K,
    V, B or T_max that is not a positive int, an HV that is not a multiple of H (fla's GVA
    rule) or an empty B, flags that are not bools, or a lower_bound that does not fit
    safe_gate (in [-5, 0) with safe_gate=True, None without), a dtype that is not a floating
    dtype or a device that does not parse, and TypeError for a dtype that is not a
    torch.dtype. Settings outside the box (e.g. K > 256, fp32) return 0 and log why
    once, at WARNING.
    """
    HV = H if HV is None else HV
    batches = tuple(B) if isinstance(B, (tuple, list)) else (B,)
    if not batches:
        raise ValueError("warmup: B is an empty tuple; give the batch size(s) calls will use")
    support.check_positive_ints(H=H, HV=HV, K=K, V=V, T_max=T_max)
    if isinstance(B, (tuple, list)):
        support.check_positive_ints(**{f"B[{i}]": b for i, b in enumerate(batches)})
    else:
        support.check_positive_ints(B=B)
    if HV % H:
        raise ValueError(f"warmup: HV={HV} is not a multiple of H={H}; fla's GVA needs HV % H == 0")
    support.check_dtypes(dtype=dtype)
    _check_warmup_flags(
        varlen=varlen, safe_gate=safe_gate, allow_neg_eigval=allow_neg_eigval, state=state,
        backward=backward, lower_bound=lower_bound,
    )  # fmt: skip
    device = support.check_device(device)
    if not compat.check_fla(FAMILY) or not torch.cuda.is_available():
        return 0
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else device
    if dev.type != "cuda":
        return 0
    # packed batches in both offset dtypes: fla's layer builds int32 cu_seqlens from an
    # attention_mask, and the dtype is part of every compiled and tuned kernel's signature
    packed_dtypes = (torch.int64, torch.int32) if varlen else ()
    layouts = [(b, None) for b in batches] + [(1, d) for d in packed_dtypes]
    flags = dict(
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        state_v_first=True, safe_gate=safe_gate, lower_bound=lower_bound,
        allow_neg_eigval=allow_neg_eigval, output_final_state=state,
    )  # fmt: skip
    calls = 0
    with torch.cuda.device(dev):
        for b, cu_dtype in layouts:
            for T in warm_lengths(b, H, T_max):
                cu = None
                if cu_dtype is not None:
                    cuts = [0, T] if T < 2 else [0, T // 3 + 1, T]
                    cu = torch.tensor(cuts, dtype=cu_dtype, device=dev)
                N = b if cu is None else cu.shape[0] - 1
                q, k, v, g, beta, A_log, dt_bias, h0 = _warm_inputs(
                    b, T, H, HV, K, V, dtype, dev, lower_bound, state, N
                )
                leaves = (q, k, v, g, beta, A_log, dt_bias, h0)
                if backward:
                    for t in leaves:
                        if t is not None:
                            t.requires_grad_(True)
                call = dict(initial_state=h0, cu_seqlens=cu, A_log=A_log, dt_bias=dt_bias, **flags)
                ok, reason = is_supported(q, k, v, g, beta, **call)
                if not ok:
                    support.log_once(
                        f"kda warmup: these settings go to fla ({reason}); nothing to warm",
                        logging.WARNING,
                    )
                    return calls
                with torch.set_grad_enabled(backward):
                    o, ht = chunk_kda(q, k, v, g, beta, **call)
                    if backward:
                        outs = [o] + ([ht] if ht is not None else [])
                        torch.autograd.backward(outs, [torch.randn_like(t) for t in outs])
                calls += 1
        torch.cuda.synchronize(dev)
    return calls
