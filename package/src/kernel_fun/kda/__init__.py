"""kda: fla's chunked Kimi Delta Attention op, as the KimiDeltaAttention layer calls it.

    from kernel_fun.kda import chunk_kda      # instead of fla.ops.kda's chunk_kda

Same signature and return value as flash-linear-attention 0.6.0's `fla.ops.kda.chunk_kda`.
Calls inside the supported box run the chain promoted from the ladder, once one is vendored
(`_kernels/`, with `_provenance.py` naming the record and commit it came from); every other
call is forwarded to fla verbatim, so the result is bit-identical to fla's there. The chain
vendored now is ladder idea kda/025-saved-gate-cumsum: kda/022's kernels with every launch at a
fixed configuration (kda/024) and the forward's gate cumsum kept for the backward (record
20261207T101241Z-93364773: 1.547x fla's forward+backward, 1.249x its forward, at B16 T8192
H16 K128 V256 on an H100 80GB HBM3, where kda/024 gave 1.521x in the same run; 022 on an
H200, record 20261205T051110Z-dd4482b7: 1.526x and 1.189x). `is_supported(...)` says which case a call is
and why; `warmup(...)` checks the fla internals the chain relies on and fills the compile
caches (and fla's autotune caches where the chain still uses them: K above 128, safe_gate).

Supported box: bf16 q, k, v, g, beta on a CUDA device of a tested architecture (sm90); the
layer's flags (use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel and
state_v_first all True); A_log [HV] and dt_bias [HV * K] fp32; the softplus gate, or
safe_gate=True with lower_bound in [-5, 0); allow_neg_eigval either way; cu_seqlens (with or
cu_seqlens_cpu None); fp32 initial_state and output_final_state; HV a multiple of H;
K <= 256; chunk_size 64. Cases the chain has not yet passed its GPU tests on would go to fla
too (`ops.PENDING_CASES`: empty in this build).
"""

from .ops import chunk_kda, is_supported, warmup

__all__ = ["chunk_kda", "is_supported", "warmup"]
