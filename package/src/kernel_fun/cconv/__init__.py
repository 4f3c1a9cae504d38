"""cconv: the short convolution of KDA / GatedDeltaNet layers (depthwise causal conv + silu).

    from kernel_fun.cconv import causal_conv1d      # instead of fla's causal_conv1d

Same signature and return value as flash-linear-attention 0.6.0's
`fla.modules.causal_conv1d.causal_conv1d`. Calls inside the supported box run the one-pass
strip kernels promoted from the ladder (`_kernels/`, see `_provenance.py` for the record and
commit they came from); every other call is forwarded to fla verbatim, so the result is
bit-identical to fla's there. `is_supported(...)` says which case a call is and why;
`warmup(...)` checks the fla internals this package relies on and fills the autotune caches.

Supported box: activation "silu"/"swish"; no bias, residual, initial or final state,
cu_seqlens, chunk_indices or cp_context; backend "triton"; x [B, T, D] fp16/bf16 on a CUDA
device of sm90 or newer, any strides; weight [D, W] in any float dtype with W <= 4. dx comes
back in x's dtype and dw in the weight's dtype.
"""

from .ops import causal_conv1d, is_supported, warmup

__all__ = ["causal_conv1d", "is_supported", "warmup"]
