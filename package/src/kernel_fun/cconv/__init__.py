"""cconv: the short convolution of KDA / GatedDeltaNet layers (depthwise causal conv + silu).

    from kernel_fun.cconv import causal_conv1d      # instead of fla's causal_conv1d

Same signature and return value as flash-linear-attention 0.6.0's
`fla.modules.causal_conv1d.causal_conv1d`. Calls inside the supported box run the one-pass
strip kernels promoted from the ladder (`_kernels/`, see `_provenance.py` for the record and
commit they came from); every other call is forwarded to fla verbatim, so the result is
bit-identical to fla's there. `is_supported(...)` says which case a call is and why;
`warmup(...)` checks the fla internals this package relies on and compiles the kernels a
call will launch.

Supported box (README, "The supported box (cconv)"): every case of fla's causal_conv1d
(bias, residual, activation None/"silu"/"swish", initial and final state, cu_seqlens; x
fp16/bf16/fp32 [B, T, D] any strides on a CUDA device of a tested architecture; weight
[D, W <= 4] any float dtype) except backend "cuda"/"mix" and cp_context, plus the decode
step `causal_conv1d_update`. This takes the box kernels of the vendored idea (this build's
is named in `_provenance.py`; its module in `_kernels/` imports the earlier ideas' modules
it runs); a build with idea 001's kernels alone runs only bf16/fp16 x with silu and no
optional argument and sends the rest to fla.
"""

from .ops import causal_conv1d, causal_conv1d_update, is_supported, warmup

__all__ = ["causal_conv1d", "causal_conv1d_update", "is_supported", "warmup"]
