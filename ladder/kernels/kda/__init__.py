"""kda: fla's chunked Kimi Delta Attention (chunk_kda) with KimiDeltaAttention's flags."""
