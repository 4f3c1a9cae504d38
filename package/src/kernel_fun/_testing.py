"""Helpers shared by kernel-fun's GPU tests and its measuring tools (tools/prodtime.py,
tools/fsdp2_kda.py, tools/kda_fla_configs.py); not public API.

- `kda_chain_calls()`: counts calls of the vendored kda chain's forward and backward. The
  chain launches some of fla's own kernels under fla's names, so a kernel-name witness
  cannot tell the chain from fla; its entry points are counted instead.
- `cuda_kernel_names(fn)`: the CUDA kernels a callable launched (torch.profiler).
- `learnable_tokens(...)`: fresh token streams a small model learns in a few steps.
- `kda_op_inputs(...)`: chunk_kda inputs with KimiDeltaAttention's initialisation.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def kda_chain_calls() -> Iterator[dict[str, int]]:
    """Count calls of the vendored kda chain while the block runs: yields {"fwd": n, "bwd": n},
    updated live. RuntimeError when this build has no vendored kda chain."""
    from .kda import ops

    chain = ops._kernels()
    if chain is None:
        raise RuntimeError("this kernel-fun build has no vendored kda chain")
    counts = {"fwd": 0, "bwd": 0}
    fwd, bwd = chain.kda_fwd, chain.kda_bwd

    def counted_fwd(*args: Any, **kwargs: Any) -> Any:
        counts["fwd"] += 1
        return fwd(*args, **kwargs)

    def counted_bwd(*args: Any, **kwargs: Any) -> Any:
        counts["bwd"] += 1
        return bwd(*args, **kwargs)

    chain.kda_fwd, chain.kda_bwd = counted_fwd, counted_bwd
    try:
        yield counts
    finally:
        chain.kda_fwd, chain.kda_bwd = fwd, bwd


def cuda_kernel_names(fn: Callable[[], object]) -> list[str]:
    """Names of the CUDA kernels `fn` launched, one per launch (torch.profiler, CUDA
    activity; the device is synchronised before the profile closes)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return [e.name for e in prof.events() if e.device_type == cuda]


def learnable_tokens(vocab: int, size: tuple[int, int, int], device: Any, seed: int) -> Any:
    """Token streams, int64 [steps, batch, length] on `device`, that a model can learn in a
    few steps (uniform random tokens cannot be learned: the loss stays at log(vocab)).

    Tokens come from a fixed subset of vocab // 16 ids, and each is followed by a fixed
    successor 3 times in 4 (a first-order Markov chain), so the loss falls both from the
    unigram and from context. ValueError when vocab < 16."""
    import torch

    if vocab < 16:
        raise ValueError(
            f"vocab must be at least 16 (the streams use vocab // 16 ids), got {vocab}"
        )
    gen = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randperm(vocab, device=device, generator=gen)[: vocab // 16]
    n = ids.numel()
    successor = torch.randperm(n, device=device, generator=gen)
    steps, batch, length = size
    idx = torch.empty(steps, batch, length, dtype=torch.long, device=device)
    idx[..., 0] = torch.randint(0, n, (steps, batch), device=device, generator=gen)
    follow = torch.rand(steps, batch, length, device=device, generator=gen) < 0.75
    noise = torch.randint(0, n, (steps, batch, length), device=device, generator=gen)
    for t in range(1, length):
        idx[..., t] = torch.where(follow[..., t], successor[idx[..., t - 1]], noise[..., t])
    return ids[idx]


def kda_op_inputs(B: int, T: int, H: int, K: int, V: int, device: Any, seed: int) -> dict:
    """Inputs of chunk_kda as KimiDeltaAttention makes them, from one generator on `device`:
    q, k, g [B, T, H, K], v and do [B, T, H, V], beta [B, T, H], all bf16 standard normal;
    A_log [H] fp32, log of uniform(1, 16); dt_bias [H * K] fp32, the inverse softplus of
    dt log-uniform in [1e-3, 1e-1] (fla's layer initialisation)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*size: int) -> Any:
        return torch.randn(size, device=device, generator=gen).to(torch.bfloat16)

    q, k, g = randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, K)
    v, beta, do = randn(B, T, H, V), randn(B, T, H), randn(B, T, H, V)
    A_log = torch.empty(H, device=device).uniform_(1, 16, generator=gen).log()
    dt = torch.exp(torch.rand(H * K, device=device, generator=gen) * math.log(100) + math.log(1e-3))
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    return dict(q=q, k=k, v=v, g=g, beta=beta, do=do, A_log=A_log, dt_bias=dt_bias)
