"""Are the flash-linear-attention (fla) symbols this package calls still where we call them?

The package is a partial replacement: every call it does not implement goes to fla, and the
signature it mirrors is fla's. An fla upgrade that moves a function or renames a keyword
would otherwise surface as an ImportError or a TypeError in the middle of a training run,
or, for a reordered positional parameter, as arguments silently bound to the wrong names.

So every fla symbol and keyword the package uses is listed here as data (`FLA_SYMBOLS`), and
`check_fla()` probes all of them. It runs from a family's warmup, never at import, and its
probe is cached. Policy:

  * an fla version outside TESTED_FLA: a warning, once;
  * a symbol, module or keyword that moved: `FlaDriftError`, naming every one of them;
    with KERNEL_FUN_FALLBACK=1 a warning instead, and `check_fla()` returns False so the
    caller sends its calls to fla.

The tables cover fla-core 0.5.2 and 0.6.0, which keep the causal conv in different places:

  0.5.2   fla.modules.conv.causal_conv1d   (causal_conv1d)
          fla.modules.conv.triton.ops      (causal_conv1d_fwd/_bwd, CausalConv1dFunction)
          fla.modules.conv.short_conv      (ShortConvolution)
          fla.modules.convolution          a real module re-exporting all of the above
  0.6.0   fla.modules.causal_conv1d.ops    (all of the above)
          fla.modules.convolution          an alias module assembled in fla.modules

so a row lists candidate modules and the first one that has the symbol is used.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from .support import fallback_on_drift, log_once, log_versions_once

log = logging.getLogger("kernel_fun")

# fla-core versions the package has been run against (not a guess at compatibility).
TESTED_FLA: frozenset[str] = frozenset({"0.5.2", "0.6.0"})

_CONV_IMPL_0_6 = "fla.modules.causal_conv1d.ops"

# Keywords of fla's public causal_conv1d, in fla's order. kernel_fun.cconv.causal_conv1d
# mirrors this signature positionally, so the order is checked, not just the names.
CAUSAL_CONV1D_PARAMS: tuple[str, ...] = (
    "x",
    "weight",
    "bias",
    "residual",
    "initial_state",
    "output_final_state",
    "activation",
    "backend",
    "cu_seqlens",
    "cu_seqlens_cpu",
    "chunk_indices",
    "cp_context",
)

_KDA_CHUNK = "fla.ops.kda.chunk"

# Parameters of fla's public chunk_kda, in fla 0.6.0's order. kernel_fun.kda.chunk_kda
# mirrors this signature positionally, so the order is checked, not just the names.
CHUNK_KDA_PARAMS: tuple[str, ...] = (
    "q", "k", "v", "g", "beta", "scale", "initial_state", "output_final_state",
    "use_qk_l2norm_in_kernel", "use_gate_in_kernel", "use_beta_sigmoid_in_kernel",
    "allow_neg_eigval", "safe_gate", "lower_bound", "disable_recompute",
    "return_intermediate_states", "state_v_first", "cu_seqlens", "cu_seqlens_cpu", "cp_context",
    "use_graph", "max_num_seqs",
)  # fmt: skip


@dataclass(frozen=True)
class FlaSymbol:
    """One fla symbol the package uses.

    key        how the package asks for it (`fla_symbol(key)`); unique
    name       the attribute name in fla
    modules    candidate module paths, newest layout first; the first that imports and has
               `name` is the one used
    keywords   parameters the package passes by name; each must be a named parameter
               (a catch-all **kwargs does not count)
    ordered    the keywords must also be fla's leading parameters, in this order
    used_by    what in the package depends on it
    family     the op family that depends on it: `check_fla(family)` probes only its rows,
               so an fla that moved one family's internals does not stop another family
    """

    key: str
    name: str
    modules: tuple[str, ...]
    keywords: tuple[str, ...] = ()
    ordered: bool = False
    used_by: str = ""
    family: str = "cconv"


FLA_SYMBOLS: tuple[FlaSymbol, ...] = (
    FlaSymbol(
        key="causal_conv1d",
        name="causal_conv1d",
        modules=(_CONV_IMPL_0_6, "fla.modules.conv.causal_conv1d"),
        keywords=CAUSAL_CONV1D_PARAMS,
        ordered=True,
        used_by="kernel_fun.cconv fallback (called verbatim) and the signature it mirrors",
    ),
    FlaSymbol(
        key="causal_conv1d_fwd",
        name="causal_conv1d_fwd",
        modules=(_CONV_IMPL_0_6, "fla.modules.conv.triton.ops"),
        keywords=(
            "x",
            "weight",
            "bias",
            "residual",
            "initial_state",
            "output_final_state",
            "activation",
            "cu_seqlens",
            "cu_seqlens_cpu",
            "chunk_indices",
        ),
        used_by="the cconv baseline (fla's forward kernel, called as CausalConv1dFunction does)",
    ),
    FlaSymbol(
        key="causal_conv1d_bwd",
        name="causal_conv1d_bwd",
        modules=(_CONV_IMPL_0_6, "fla.modules.conv.triton.ops"),
        keywords=(
            "x",
            "dy",
            "dht",
            "weight",
            "bias",
            "residual",
            "initial_state",
            "activation",
            "cu_seqlens",
            "cu_seqlens_cpu",
            "chunk_indices",
        ),
        used_by="the cconv baseline (fla's backward kernel)",
    ),
    FlaSymbol(
        key="causal_conv1d_update",
        name="causal_conv1d_update",
        modules=(_CONV_IMPL_0_6, "fla.modules.conv.triton.ops"),
        keywords=("x", "cache", "residual", "weight", "bias", "activation"),
        ordered=True,
        used_by="kernel_fun.cconv.causal_conv1d_update fallback (called verbatim) and its signature",
    ),
    FlaSymbol(
        key="CausalConv1dFunction",
        name="CausalConv1dFunction",
        modules=(_CONV_IMPL_0_6, "fla.modules.conv.triton.ops"),
        used_by="the cconv baseline's autograd path",
    ),
    FlaSymbol(
        key="ShortConvolution",
        name="ShortConvolution",
        modules=(_CONV_IMPL_0_6, "fla.modules.conv.short_conv"),
        used_by="kernel_fun.patch_fla (the layer that calls causal_conv1d inside fla)",
    ),
    FlaSymbol(
        key="convolution.causal_conv1d",
        name="causal_conv1d",
        modules=("fla.modules.convolution",),
        keywords=CAUSAL_CONV1D_PARAMS,
        ordered=True,
        used_by="the public import path model code uses; kernel_fun.patch_fla replaces it",
    ),
    FlaSymbol(
        key="convolution.ShortConvolution",
        name="ShortConvolution",
        modules=("fla.modules.convolution",),
        used_by="the public import path of the layer; kernel_fun.patch_fla",
    ),
    # ---- kda: fla's chunk_kda, and the stages of its chain the promoted kernels call.
    FlaSymbol(
        key="chunk_kda",
        name="chunk_kda",
        modules=(_KDA_CHUNK,),
        keywords=CHUNK_KDA_PARAMS,
        ordered=True,
        used_by="kernel_fun.kda fallback (called verbatim) and the signature it mirrors",
        family="kda",
    ),
    FlaSymbol(
        key="kda.chunk_kda",
        name="chunk_kda",
        modules=("fla.ops.kda",),
        keywords=CHUNK_KDA_PARAMS,
        ordered=True,
        used_by="the public import path model code uses; kernel_fun.patch_fla replaces it",
        family="kda",
    ),
    FlaSymbol(
        key="KimiDeltaAttention",
        name="KimiDeltaAttention",
        modules=("fla.layers.kda",),
        used_by="kernel_fun.patch_fla (the layer that calls chunk_kda inside fla)",
        family="kda",
    ),
    FlaSymbol(
        key="backends._function_registries",
        name="_function_registries",
        modules=("fla.backends",),
        used_by="kernel_fun.kda's gate (a call fla would hand to another backend goes to fla)",
        family="kda",
    ),
    FlaSymbol(
        key="kda_gate_chunk_cumsum",
        name="kda_gate_chunk_cumsum",
        modules=("fla.ops.kda.gate",),
        keywords=(
            "g",
            "A_log",
            "dt_bias",
            "scale",
            "chunk_size",
            "cu_seqlens",
            "chunk_indices",
            "lower_bound",
        ),
        used_by="the kda chain's backward (recomputes the cumulative gate)",
        family="kda",
    ),
    FlaSymbol(
        key="recompute_w_u_fwd",
        name="recompute_w_u_fwd",
        modules=("fla.ops.kda.wy_fast",),
        keywords=("q", "k", "v", "beta", "A", "gk", "cu_seqlens", "chunk_indices"),
        used_by="the kda chain's backward (recomputes w, u, qg, kg)",
        family="kda",
    ),
    FlaSymbol(
        key="chunk_gated_delta_rule_fwd_h",
        name="chunk_gated_delta_rule_fwd_h",
        modules=("fla.ops.common.chunk_delta_h",),
        keywords=(
            "k",
            "w",
            "u",
            "gk",
            "initial_state",
            "output_final_state",
            "cu_seqlens",
            "chunk_indices",
            "chunk_size",
            "state_v_first",
        ),
        used_by="the kda chain's backward (recomputes the chunk states h)",
        family="kda",
    ),
    FlaSymbol(
        key="chunk_gated_delta_rule_bwd_dhu",
        name="chunk_gated_delta_rule_bwd_dhu",
        modules=("fla.ops.common.chunk_delta_h",),
        keywords=(
            "q",
            "k",
            "w",
            "gk",
            "h0",
            "dht",
            "do",
            "dv",
            "scale",
            "cu_seqlens",
            "chunk_size",
            "chunk_indices",
            "state_v_first",
        ),
        used_by="the kda chain's backward where its fixed dh launch does not apply (fla's "
        "state gradients dh, dh0 and the inter-chunk dv)",
        family="kda",
    ),
    FlaSymbol(
        key="chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64",
        name="chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64",
        modules=("fla.ops.common.chunk_delta_h",),
        keywords=(
            "q",
            "k",
            "w",
            "g",
            "gk",
            "dht",
            "dh0",
            "do",
            "dh",
            "dv",
            "dv2",
            "cu_seqlens",
            "chunk_offsets",
            "scale",
            "T",
            "H",
            "HV",
            "K",
            "V",
            "BT",
            "BV",
            "USE_G",
            "USE_GK",
            "USE_INITIAL_STATE",
            "USE_FINAL_STATE_GRADIENT",
            "STATE_V_FIRST",
            "IS_VARLEN",
        ),  # fmt: skip
        used_by="the kda chain's backward (fla's state-gradient kernel, launched at a fixed "
        "configuration: dh, dh0 and the inter-chunk dv)",
        family="kda",
    ),
    FlaSymbol(
        key="prepare_chunk_indices",
        name="prepare_chunk_indices",
        modules=("fla.ops.utils.index", "fla.ops.utils"),
        keywords=("cu_seqlens", "chunk_size"),
        used_by="the kda chain (the (sequence, chunk) pairs of a packed batch)",
        family="kda",
    ),
    FlaSymbol(
        key="prepare_chunk_offsets",
        name="prepare_chunk_offsets",
        modules=("fla.ops.utils",),
        keywords=("cu_seqlens", "chunk_size"),
        used_by="the kda chain's backward (each sequence's first chunk, for the dh kernel)",
        family="kda",
    ),
    FlaSymbol(
        key="l2norm_fwd",
        name="l2norm_fwd",
        modules=("fla.modules.norm.l2norm",),
        keywords=("x",),
        used_by="the kda chain's forward (the q/k L2 norm and its rstd)",
        family="kda",
    ),
    FlaSymbol(
        key="fused_beta_sigmoid",
        name="fused_beta_sigmoid",
        modules=("fla.ops.common.gate",),
        keywords=("x", "scale"),
        used_by="the kda chain's forward (beta = scale * sigmoid(beta logits))",
        family="kda",
    ),
    FlaSymbol(
        key="chunk_kda_fwd_intra",
        name="chunk_kda_fwd_intra",
        modules=("fla.ops.kda.chunk_intra",),
        keywords=(
            "q",
            "k",
            "v",
            "gk",
            "beta",
            "scale",
            "cu_seqlens",
            "chunk_size",
            "chunk_indices",
            "safe_gate",
        ),  # fmt: skip
        used_by="the kda chain's forward (the intra-chunk products, the solve, w, u and kg)",
        family="kda",
    ),
    FlaSymbol(
        key="chunk_kda_fwd_kernel_inter_solve_fused",
        name="chunk_kda_fwd_kernel_inter_solve_fused",
        modules=("fla.ops.kda.chunk_intra",),
        keywords=(
            "q",
            "k",
            "g",
            "beta",
            "Aqk",
            "Akkd",
            "Akk",
            "scale",
            "cu_seqlens",
            "chunk_indices",
            "T",
            "H",
            "HV",
            "K",
            "BT",
            "BC",
            "NC",
            "USE_SAFE_GATE",
            "USE_GRAPH",
            "BK",
            "IS_VARLEN",
        ),  # fmt: skip
        used_by="the kda chain's forward (the off-diagonal score tiles and the solve, launched "
        "by name after the chain's own diagonal tiles)",
        family="kda",
    ),
    FlaSymbol(
        key="chunk_gla_fwd_o_gk",
        name="chunk_gla_fwd_o_gk",
        modules=("fla.ops.gla.chunk",),
        keywords=(
            "q",
            "v",
            "g",
            "A",
            "h",
            "scale",
            "cu_seqlens",
            "chunk_size",
            "state_v_first",
        ),  # fmt: skip
        used_by="the kda chain's forward for K above 128 (fla's output kernel after its "
        "state pass)",
        family="kda",
    ),
    FlaSymbol(
        key="fused_beta_sigmoid_bwd",
        name="fused_beta_sigmoid_bwd",
        modules=("fla.ops.common.gate",),
        keywords=("x", "dy", "scale"),
        used_by="the kda chain's backward (dbeta through beta's sigmoid)",
        family="kda",
    ),
    # ---- kda: fla kernels the chain launches itself at fixed configurations (no autotuner).
    # Arguments passed by position are fla's leading parameters, so those rows are ordered.
    FlaSymbol(
        key="l2norm_fwd_kernel",
        name="l2norm_fwd_kernel",
        modules=("fla.modules.norm.l2norm",),
        keywords=("x", "y", "rstd", "eps", "T", "D", "BD", "NB", "BT"),
        ordered=True,
        used_by="the kda chain (the q and k L2 norm, launched at a fixed configuration)",
        family="kda",
    ),
    FlaSymbol(
        key="l2norm_bwd_kernel",
        name="l2norm_bwd_kernel",
        modules=("fla.modules.norm.l2norm",),
        keywords=("y", "rstd", "dy", "dx", "eps", "T", "D", "BD", "NB", "BT"),
        ordered=True,
        used_by="the kda chain's backward (dq, dk through the q/k L2 norm, fixed configuration)",
        family="kda",
    ),
    FlaSymbol(
        key="kda_gate_chunk_cumsum_vector_kernel",
        name="kda_gate_chunk_cumsum_vector_kernel",
        modules=("fla.ops.kda.gate",),
        keywords=(
            "s",
            "A_log",
            "dt_bias",
            "o",
            "scale",
            "cu_seqlens",
            "chunk_indices",
            "lower_bound",
            "T",
            "H",
            "S",
            "BT",
            "BS",
            "REVERSE",
            "HAS_A",
            "HAS_BIAS",
            "HAS_SCALE",
            "IS_VARLEN",
            "USE_LOWER_BOUND",
            "USE_GRAPH",
        ),  # fmt: skip
        ordered=True,
        used_by="the kda chain (the gate's chunk cumsum, forward and the backward's recompute, "
        "fixed configuration)",
        family="kda",
    ),
    FlaSymbol(
        key="recompute_w_u_fwd_kda_kernel",
        name="recompute_w_u_fwd_kda_kernel",
        modules=("fla.ops.kda.wy_fast",),
        keywords=(
            "q",
            "k",
            "qg",
            "kg",
            "v",
            "beta",
            "w",
            "u",
            "A",
            "gk",
            "cu_seqlens",
            "chunk_indices",
            "T",
            "H",
            "HV",
            "K",
            "V",
            "BT",
            "BK",
            "BV",
            "STORE_QG",
            "STORE_KG",
            "IS_VARLEN",
            "USE_GRAPH",
        ),  # fmt: skip
        ordered=True,
        used_by="the kda chain (w, u, qg, kg in the forward and the backward's recompute, fixed "
        "configuration)",
        family="kda",
    ),
    FlaSymbol(
        key="chunk_kda_bwd_kernel_dAv",
        name="chunk_kda_bwd_kernel_dAv",
        modules=("fla.ops.kda.chunk_bwd",),
        keywords=(
            "q",
            "k",
            "v",
            "A",
            "do",
            "dv",
            "dA",
            "cu_seqlens",
            "chunk_indices",
            "scale",
            "T",
            "H",
            "HV",
            "K",
            "V",
            "BT",
            "BK",
            "BV",
            "IS_VARLEN",
        ),  # fmt: skip
        used_by="the kda chain's backward (dAqk and the intra-chunk dv, fixed configuration)",
        family="kda",
    ),
    FlaSymbol(
        key="chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
        name="chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
        modules=("fla.ops.common.chunk_delta_h",),
        keywords=(
            "k",
            "v",
            "w",
            "v_new",
            "g",
            "gk",
            "h",
            "h0",
            "ht",
            "cu_seqlens",
            "chunk_offsets",
            "T",
            "H",
            "HV",
            "K",
            "V",
            "BT",
            "BV",
            "USE_G",
            "USE_GK",
            "USE_INITIAL_STATE",
            "STORE_FINAL_STATE",
            "SAVE_NEW_VALUE",
            "STATE_V_FIRST",
            "IS_VARLEN",
        ),  # fmt: skip
        used_by="the kda chain's backward (recomputes the chunk states h, fixed configuration)",
        family="kda",
    ),
)


def _row(key: str) -> FlaSymbol:
    """The `FLA_SYMBOLS` row for `key`; KeyError naming the known keys otherwise."""
    for sym in FLA_SYMBOLS:
        if sym.key == key:
            return sym
    known = sorted(s.key for s in FLA_SYMBOLS)
    raise KeyError(f"{key!r} is not an fla symbol kernel-fun uses; known: {known}")


class FlaDriftError(RuntimeError):
    """An fla symbol, module or keyword this package calls has moved or disappeared."""


@dataclass
class FlaProbe:
    """The result of probing the installed fla against `FLA_SYMBOLS`.

    version    fla.__version__ (or "unknown")
    resolved   symbol key -> the module path it was found in
    problems   one line per drift found; empty when everything is where the tables say
    missing_dependencies  modules outside fla that fla's modules failed to import (installed
               fla, missing dependency: not drift, but no fla module works without them)
    """

    version: str
    resolved: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    missing_dependencies: list[str] = field(default_factory=list)


def _import(path: str) -> tuple[Any | None, Exception | None]:
    """(module, None), or (None, the exception) when `path` cannot be imported."""
    try:
        return importlib.import_module(path), None
    except Exception as exc:  # an fla module that fails to import for any reason is drift
        return None, exc


def _outside_fla(exc: Exception) -> str | None:
    """The missing module's name when `exc` is a module outside fla not being installed."""
    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    return name if name and name.split(".")[0] != "fla" else None


def _parameters(obj: Any) -> list[inspect.Parameter] | None:
    """Named parameters of a callable (through functools.wraps, and through Triton's
    heuristics / autotune / jit wrappers to the kernel's Python function), or None if not
    inspectable."""
    while not inspect.isroutine(obj) and hasattr(obj, "fn"):
        obj = obj.fn
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _resolve(sym: FlaSymbol) -> tuple[str | None, Any, list[str], list[str]]:
    """(module path, object, [], []) for the first candidate with the symbol; else
    (None, None, why per candidate, modules outside fla whose absence stopped an import)."""
    misses: list[str] = []
    missing: list[str] = []
    for path in sym.modules:
        mod, exc = _import(path)
        if mod is None:
            misses.append(f"{path} ({type(exc).__name__}: {exc})")
            dep = _outside_fla(exc)
            if dep and dep not in missing:
                missing.append(dep)
            continue
        if hasattr(mod, sym.name):
            return path, getattr(mod, sym.name), [], []
        misses.append(f"{path} (no attribute {sym.name!r})")
    return None, None, misses, missing


def _keyword_problems(sym: FlaSymbol, path: str, obj: Any, version: str) -> list[str]:
    if not sym.keywords:
        return []
    params = _parameters(obj)
    if params is None:
        return [f"{path}.{sym.name}: signature cannot be inspected in fla {version}"]
    names = [p.name for p in params]
    missing = [kw for kw in sym.keywords if kw not in names]
    if missing:
        return [f"{path}.{sym.name} no longer accepts {missing} in fla {version}"]
    if sym.ordered:
        leading = tuple(names[: len(sym.keywords)])
        if leading != sym.keywords:
            return [
                f"{path}.{sym.name} reordered its parameters in fla {version}: "
                f"expected {list(sym.keywords)}, found {list(leading)}"
            ]
    return []


def _fla_version() -> str:
    import fla

    return str(getattr(fla, "__version__", "unknown"))


def _probe(symbols: tuple[FlaSymbol, ...]) -> FlaProbe:
    try:
        version = _fla_version()
    except Exception as exc:
        return FlaProbe("not installed", problems=[f"fla cannot be imported: {exc}"])
    probe = FlaProbe(version)
    for sym in symbols:
        path, obj, misses, missing = _resolve(sym)
        if path is None:
            probe.problems.append(
                f"{sym.name} ({sym.used_by}) is in none of its known modules in fla "
                f"{version}: " + "; ".join(misses)
            )
            probe.missing_dependencies += [
                m for m in missing if m not in probe.missing_dependencies
            ]
            continue
        probe.resolved[sym.key] = path
        probe.problems.extend(_keyword_problems(sym, path, obj, version))
    return probe


def probe_fla(family: str | None = None) -> FlaProbe:
    """Probe the installed fla against `FLA_SYMBOLS`, once per process and family (cached).

    family: only the rows of that family ("cconv", "kda"); None probes every row.
    Imports fla and the modules the tables name; raises nothing. See `check_fla` for the
    policy applied to the result.
    """
    return _probe_cached(family)


@cache
def _probe_cached(family: str | None) -> FlaProbe:
    return _probe(tuple(s for s in FLA_SYMBOLS if family is None or s.family == family))


def check_fla(family: str | None = None) -> bool:
    """Verify the fla symbols and keywords this package (or one `family` of it) calls.

    Call from warmup and on a family's first use. Returns True when everything is in place. Logs a warning (once) when fla's version is
    not in TESTED_FLA. On drift raises `FlaDriftError` listing every problem, unless
    KERNEL_FUN_FALLBACK is on (read per call): then it logs the problems as a warning (once)
    and returns False, and the caller routes its calls to fla.
    """
    probe = probe_fla(family)
    if probe.version not in TESTED_FLA and probe.version != "not installed":
        log_once(
            f"kernel-fun: fla {probe.version} is untested (tested: "
            f"{', '.join(sorted(TESTED_FLA))}); check numerics before trusting a run",
            logging.WARNING,
        )
    if not probe.problems:
        return True
    summary = " | ".join(probe.problems)
    if fallback_on_drift():
        log_once(
            f"kernel-fun: fla drift, KERNEL_FUN_FALLBACK=1 so {family or 'every family'} "
            f"calls fla: {summary}",
            logging.WARNING,
        )
        return False
    if probe.missing_dependencies:
        deps = " ".join(probe.missing_dependencies)
        raise FlaDriftError(
            f"fla {probe.version} is installed but its modules cannot be imported: it needs "
            f"{deps}, which is not installed (fla does not declare it); `pip install {deps}`, "
            f"or set KERNEL_FUN_FALLBACK=1 to fall back to fla. Details: {summary}"
        )
    raise FlaDriftError(
        f"fla {probe.version} moved what kernel-fun calls: {summary}. Install a tested fla "
        f"({', '.join(sorted(TESTED_FLA))}) or set KERNEL_FUN_FALLBACK=1 to fall back to fla."
    )


def fla_symbol(key: str) -> Any:
    """The fla object for table row `key` (e.g. "causal_conv1d_fwd"), as fla has it now.

    Resolved on every call (cheap after the first import), so a monkey patch applied to fla
    is visible here; for the pre-patch original of a function use `fla_original`. Raises
    KeyError for a key not in `FLA_SYMBOLS` and FlaDriftError when fla lacks the symbol.
    """
    sym = _row(key)
    path, obj, misses, _ = _resolve(sym)
    if path is None:
        raise FlaDriftError(f"{sym.name} is in none of its known fla modules: {'; '.join(misses)}")
    return obj


# Original fla callables, recorded before anything could replace them: key -> callable.
_ORIGINALS: dict[str, Callable[..., Any]] = {}


def _is_ours(fn: Any) -> bool:
    return str(getattr(fn, "__module__", "") or "").split(".")[0] == "kernel_fun"


def remember_original(fn: Callable[..., Any], key: str = "causal_conv1d") -> None:
    """Record `fn` as fla's original for `key`, before a patch replaces fla's attribute.

    kernel_fun.patch_fla calls this with the function it is about to replace. The first
    record wins: a later call (a second patch, a re-import) cannot swap the original.
    Raises ValueError when `fn` is one of this package's own functions, KeyError when `key`
    is not a row of `FLA_SYMBOLS`.
    """
    _row(key)
    if _is_ours(fn):
        raise ValueError(
            f"{getattr(fn, '__qualname__', fn)!r} is kernel-fun's own function, not fla's; "
            f"record the fla function before patching"
        )
    _ORIGINALS.setdefault(key, fn)


def fla_original(key: str) -> Callable[..., Any]:
    """fla's original callable for `key`, as it was before any patch by this package.

    Captured on first use (or taken from `remember_original`) and kept for the process.
    Raises FlaDriftError when fla lacks it, and RuntimeError when fla's attribute is already
    this package's replacement and no original was recorded.
    """
    fn = _ORIGINALS.get(key)
    if fn is not None:
        return fn
    fn = fla_symbol(key)
    if _is_ours(fn):
        raise RuntimeError(
            f"fla's {key} is already replaced by kernel-fun's and its original was never "
            f"recorded; call kernel_fun._common.compat.remember_original before patching"
        )
    return _ORIGINALS.setdefault(key, fn)


def fla_causal_conv1d() -> Callable[..., Any]:
    """fla's own causal_conv1d (the function object), never a patched replacement.

    The fallback of kernel_fun.cconv calls this verbatim, so a fallback computes exactly
    what fla computes. Same errors as `fla_original`.
    """
    return fla_original("causal_conv1d")


def fla_chunk_kda() -> Callable[..., Any]:
    """fla's own chunk_kda (the function object, backend dispatch included), never a patched
    replacement. The fallback of kernel_fun.kda calls this verbatim. Same errors as
    `fla_original`.
    """
    return fla_original("chunk_kda")


def _reset_for_tests() -> None:
    """Forget the cached probe and the recorded originals."""
    _probe_cached.cache_clear()
    _ORIGINALS.clear()


def engage(family: str) -> bool:
    """A family's first-use bookkeeping, called by its entry point before running our kernels:
    log the versions line once and probe the fla internals the family uses. Returns False when
    the probe found drift (then fla serves every call of the family): a training step fla could
    run must not crash here, so the error is logged loudly once instead of raised."""
    log_versions_once()
    try:
        return check_fla(family)
    except FlaDriftError as e:
        log_once(f"kernel-fun {family}: {e}; falling back to fla", logging.ERROR)
        return False


DRIFT_REASON = "fla drift found by the compatibility probe (see the error logged above)"


def drift_reason(family: str) -> str | None:
    """None when `family` may run our kernels as far as fla's internals go (``engage``),
    else the fallback reason to report."""
    return None if engage(family) else DRIFT_REASON
