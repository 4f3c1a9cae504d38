"""Helpers shared by kernel-fun's GPU tests and its measuring tools (tools/prodtime.py,
tools/fsdp2_kda.py, tools/kda_fla_configs.py); not public API.

- `kda_chain_calls()`: counts calls of the vendored kda chain's forward and backward. The
  chain launches some of fla's own kernels under fla's names, so a kernel-name witness
  cannot tell the chain from fla; its entry points are counted instead.
- `cuda_kernel_names(fn)`: the CUDA kernels a callable launched (torch.profiler).
- `conv_launches(names)`: those names counted as our conv kernels' or fla's, by direction.
- `learnable_tokens(...)`: fresh token streams a small model learns in a few steps.
- `kda_op_inputs(...)`: chunk_kda inputs with KimiDeltaAttention's initialisation.
- `autotuners(modules)`: the autotuned Triton kernels a set of modules defines.
- `block_stack(...)`: a small language model of N pre-norm residual blocks (KDA layers in
  the training checks).
- `trim_fla_autotune(n)`: cut fla's autotune lists to n configs, for correctness runs on a
  cold machine (`KERNEL_FUN_TEST_FLA_CONFIGS`); never for anything that times fla.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
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


OUR_CONV = ("cconv_fwd", "cconv_bwd")
FLA_CONV = ("causal_conv1d_fwd_kernel", "causal_conv1d_bwd_kernel")


def conv_launches(names: Iterable[str]) -> dict[str, int]:
    """Conv launches among CUDA kernel names (one per launch, `cuda_kernel_names`), under
    OUR_CONV's keys ("cconv_fwd" / "cconv_bwd": launches of this build's own forward /
    backward conv kernels, as `kernel_fun.cconv.ops.kernel_names()` finds them, whatever the
    vendored idea named them) and FLA_CONV's (fla's two kernels). A launch counts when its
    name is one of the group's exactly (Triton kernels run under their function's name):
    fla's `compute_dh0_kernel` is not our `dh0_kernel`. TypeError when `names` is a str or
    bytes (one name, not a list of them) or holds anything but str: counting either would
    give zeros, which reads as "nothing launched"."""
    from kernel_fun.cconv.ops import kernel_names

    if isinstance(names, str | bytes):
        raise TypeError("conv_launches takes a list of kernel names (cuda_kernel_names), not one")
    names = list(names)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"conv_launches takes kernel names as str, got {bad[:3]!r}")
    ours = kernel_names()
    groups = {"cconv_fwd": ours["fwd"], "cconv_bwd": ours["bwd"]} | {k: (k,) for k in FLA_CONV}
    return {k: sum(n in group for n in names) for k, group in groups.items()}


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


FLA_CONFIGS_ENV = "KERNEL_FUN_TEST_FLA_CONFIGS"
FLA_TRIM_MODULES = ("fla.ops.kda", "fla.layers", "fla.modules")


def trim_fla_autotune(n: int) -> dict[str, tuple[int, int]]:
    """Keep at most `n` configs in each of fla's autotuned kernels (the modules of
    FLA_TRIM_MODULES imported first, then every loaded fla module). Kept: the `n` configs with
    the fewest pipeline stages, then the fewest warps (the least shared memory and registers,
    so the most likely to fit); the autotuner still benchmarks among them. Returns {kernel:
    (configs before, configs after)}. ValueError when n < 1.

    A cold machine then compiles n configurations per kernel and key instead of fla's whole
    list (up to 48; fla's kda chain compiles for minutes per new shape). Which configuration
    fla picks changes rounding order only, so correctness checks may trim; timings may not."""
    import importlib
    import sys

    if n < 1:
        raise ValueError(f"{FLA_CONFIGS_ENV} must be a positive number of configs, got {n}")
    for name in FLA_TRIM_MODULES:
        importlib.import_module(name)
    modules = [m for k, m in list(sys.modules.items()) if k.startswith("fla.") and m is not None]
    out = {}
    for name, tuner in autotuners(modules).items():
        before = len(tuner.configs)
        tuner.configs = sorted(tuner.configs, key=lambda c: (c.num_stages, c.num_warps))[:n]
        tuner.cache.clear()
        out[name] = (before, len(tuner.configs))
    return out


def autotuners(modules: Iterable[Any]) -> dict[str, Any]:
    """{"module.attr": triton Autotuner} for every autotuned Triton kernel defined in the
    given module objects, found through heuristics and other wrappers (each once)."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import KernelInterface

    out: dict[str, Any] = {}
    seen: set[int] = set()
    for mod in modules:
        for attr, obj in list(vars(mod).items()):
            x, depth = obj, 0
            while not isinstance(x, Autotuner) and isinstance(x, KernelInterface) and depth < 8:
                x, depth = getattr(x, "fn", None), depth + 1
            if isinstance(x, Autotuner) and id(x) not in seen:
                seen.add(id(x))
                out[f"{mod.__name__}.{attr}"] = x
    return out


def block_stack(vocab: int, hidden: int, n_layers: int, make_block: Callable[[int], Any]) -> Any:
    """Token embedding, n_layers pre-norm residual blocks (`make_block(i)`, a module whose
    forward returns a tuple with the output [B, T, hidden] first, as fla's layers do), final
    RMSNorm and a linear head: tokens [B, T] int64 -> logits [B, T, vocab]. Parameters are
    created in that order, from torch's current random state."""
    import torch.nn as nn

    class BlockStack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.norms = nn.ModuleList(nn.RMSNorm(hidden, eps=1e-5) for _ in range(n_layers))
            self.blocks = nn.ModuleList(make_block(i) for i in range(n_layers))
            self.norm_f = nn.RMSNorm(hidden, eps=1e-5)
            self.head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, tokens: Any) -> Any:
            h = self.embed(tokens)
            for norm, block in zip(self.norms, self.blocks):
                h = h + block(norm(h))[0]
            return self.head(self.norm_f(h))

    return BlockStack()
