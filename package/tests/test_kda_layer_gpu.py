"""End to end on a real layer: flash-linear-attention's KimiDeltaAttention, fla vs patched.

The layer is fla's own (fla.layers.KimiDeltaAttention); `kernel_fun.patched_fla()` swaps the
function its three ShortConvolutions call and its `chunk_kda`. Checked here, on the GPU:

  * numerics: the layer's output, input gradient and every parameter gradient, computed with
    fla's conv and with ours from the same weights and inputs, are each compared with the
    same layer run in fp32 (fp32 weights and inputs). Ours must be as close to it as fla is:
    rel-L2 error <= (ERR_RATIO_MAX + 3/sqrt(2n)) x fla's + SLACK, where the 3/sqrt(2n) term
    (three standard deviations of the norm of n independent rounding errors, n = the
    tensor's size) only matters for small tensors such as A_log's 16 entries, whose error
    norms fluctuate by tens of percent between two equally rounded runs. The direct
    ours-vs-fla difference is reported next to it. In the fp32 run the chunked KDA kernel is
    replaced by fla's own fp32 torch reference for it (naive_recurrent_kda with
    naive_kda_gate, the reference fla tests chunk_kda against), and the short conv by its
    definition in fp32 torch (shifted products, then silu): exact fp32 (no TF32),
    independent of both convs under test, and no fp32 build of fla's Triton chunk or conv
    kernels (each one more cold-cache compile and autotune) is needed. Two precisions:
    all-bf16 parameters (as fla's own layer tests run) and fp32 parameters under bf16
    autocast (the conv then sees bf16 x with an fp32 weight, the production call);
  * a profiler witness: while patched, kernel-fun's conv kernels (forward and backward, as
    `kernel_fun.cconv.ops.kernel_names()` names them) run and fla's ("causal_conv1d_fwd_kernel" /
    "causal_conv1d_bwd_kernel") do not; unpatched, the reverse;
  * a chain witness: while patched, the vendored kda chain's forward and backward run once
    per layer step under amp (bf16 parameters make A_log bf16, a call the kda box sends to
    fla) (counted at its entry points: it launches some of fla's kernels under
    fla's names); unpatched, never;
  * packed sequences (cu_seqlens, a length-1 sequence and partial chunks included): output
    and every gradient against the same layer run per sequence in fp32, ours within fla's
    error as above;
  * training: 20 AdamW steps (bf16 autocast, fp32 weights, a fresh batch per step) of a
    2-layer KDA stack at the layer test's B and T from the same initialization, fla vs
    patched, follow the same loss curve to within LOSS_REL_TOL at every step (and the
    witnesses hold in both runs).

Each test prints one summary line (pytest shows it even when output is captured). On a
machine with cold Triton caches most of the time goes to compiling and autotuning fla's
kernels (minutes); later runs reuse the caches.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from kernel_fun._testing import FLA_CONV, OUR_CONV, block_stack
from kernel_fun._testing import conv_launches as _conv_launches
from kernel_fun._testing import cuda_kernel_names as _cuda_kernels
from kernel_fun._testing import kda_chain_calls as _kda_chain_calls
from kernel_fun._testing import learnable_tokens as _learnable_tokens

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _verify_pending_cases(monkeypatch):
    """These tests are the GPU verification of the cases kernel_fun.kda still sends to fla
    (ops.PENDING_CASES): they run the chain on every case."""
    from kernel_fun.kda import ops

    monkeypatch.setattr(ops, "PENDING_CASES", {})


# The layer as it is trained (16 heads of 128, value heads twice as wide, width-4 conv).
HIDDEN, HEADS, HEAD_DIM, EXPAND_V, CONV_SIZE = 2048, 16, 128, 2, 4
B, T = 2, 2048

ERR_RATIO_MAX = 1.10  # the family contract's bound on our error over fla's
SLACK = 2.0**-9  # bf16's unit roundoff: differences below it are not resolvable in bf16
SIGMAS = 3.0  # allowance for the norm's sampling spread on small tensors (see _allowed)
LOSS_REL_TOL = 1e-2
TRAIN_STEPS = 20


def _kda(layer_idx: int = 0) -> nn.Module:
    from fla.layers import KimiDeltaAttention

    return KimiDeltaAttention(
        hidden_size=HIDDEN,
        expand_v=EXPAND_V,
        head_dim=HEAD_DIM,
        num_heads=HEADS,
        mode="chunk",
        use_short_conv=True,
        conv_size=CONV_SIZE,
        layer_idx=layer_idx,
    )


def _patched_fla():
    import kernel_fun

    return kernel_fun.patched_fla()


def _chunk_kda_fp32(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    lower_bound: float | None = None,
    state_v_first: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """chunk_kda as KimiDeltaAttention calls it in training, in fp32 torch: fla's reference
    recurrence (naive_recurrent_kda) after the l2 norm, gate and beta the kernel fuses."""
    from fla.ops.kda.gate import naive_kda_gate
    from fla.ops.kda.naive import naive_recurrent_kda

    assert initial_state is None and not output_final_state and cu_seqlens is None
    assert not allow_neg_eigval and lower_bound is None and not kwargs, kwargs
    q, k, v, beta = q.float(), k.float(), v.float(), beta.float()
    if use_qk_l2norm_in_kernel:
        q, k = F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1)
    if use_gate_in_kernel:
        g = naive_kda_gate(g, A_log, dt_bias)
    if use_beta_sigmoid_in_kernel:
        beta = beta.sigmoid()
    o, _ = naive_recurrent_kda(q, k, v, g.float(), beta, scale=scale)
    return o, None


def _causal_conv1d_fp32(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool | None = False,
    activation: str | None = None,
    backend: str | None = None,
    cu_seqlens: torch.Tensor | None = None,
    chunk_indices: torch.Tensor | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """causal_conv1d as ShortConvolution calls it in training, in fp32 torch, from the
    definition: x [B, T, D], weight [D, W]; the tap for x[t - j] is weight[:, W-1-j]."""
    assert bias is None and residual is None and initial_state is None
    assert not output_final_state and cu_seqlens is None and chunk_indices is None
    assert activation in ("silu", "swish") and not kwargs, (activation, kwargs)
    x, w = x.float(), weight.float()
    T, W = x.shape[1], w.shape[1]
    z = x * w[:, W - 1]
    for j in range(1, min(W, T)):
        z = z + F.pad(x[:, : T - j], (0, 0, j, 0)) * w[:, W - 1 - j]
    return F.silu(z), None


@contextlib.contextmanager
def _fp32_reference_kda() -> Iterator[None]:
    """KimiDeltaAttention.forward resolves `chunk_kda` from its module's globals per call,
    and ShortConvolution.forward `causal_conv1d` from its own module's."""
    import fla.layers.kda as kda_module
    import fla.modules.causal_conv1d.ops as conv_module

    saved_kda, saved_conv = kda_module.chunk_kda, conv_module.causal_conv1d
    assert saved_conv.__module__.startswith("fla."), "fla's conv is patched: unpatch first"
    kda_module.chunk_kda = _chunk_kda_fp32
    conv_module.causal_conv1d = _causal_conv1d_fp32
    try:
        yield
    finally:
        kda_module.chunk_kda = saved_kda
        conv_module.causal_conv1d = saved_conv


def _allowed(e_fla: float, numel: int) -> float:
    """The largest error (rel-L2 vs fp32) ours may have where fla's is `e_fla`.

    ERR_RATIO_MAX x fla's, widened by SIGMAS standard deviations of the L2 norm of `numel`
    independent errors (relative spread 1/sqrt(2 numel)): two runs that round differently
    but equally well differ by that much by chance. Plus SLACK for errors near bf16's floor.
    """
    return (ERR_RATIO_MAX + SIGMAS / math.sqrt(2.0 * numel)) * e_fla + SLACK


def _rel_l2(a: torch.Tensor, ref: torch.Tensor) -> float:
    """||a - ref||_2 / ||ref||_2 in float64."""
    a64, r64 = a.double(), ref.double()
    return float((a64 - r64).norm() / r64.norm().clamp_min(1e-30))


# ------------------------------------------------------------------------------------------
# profiler witness
# ------------------------------------------------------------------------------------------


def _witness(names: list[str], patched: bool, convs_per_step: int) -> dict[str, int]:
    """Assert whose conv kernels ran; return the launch counts."""
    counts = _conv_launches(names)
    ran, absent = (OUR_CONV, FLA_CONV) if patched else (FLA_CONV, OUR_CONV)
    for k in ran:
        assert counts[k] >= convs_per_step, f"expected >= {convs_per_step} {k} launches: {counts}"
    for k in absent:
        assert counts[k] == 0, f"{k} ran while {'patched' if patched else 'unpatched'}: {counts}"
    return counts


# ------------------------------------------------------------------------------------------
# one layer: fla vs patched vs fp32
# ------------------------------------------------------------------------------------------


def _step(
    layer: nn.Module, x: torch.Tensor, do: torch.Tensor, amp: bool, **layer_kwargs: object
) -> dict[str, torch.Tensor]:
    """Forward + backward; returns output, input grad and every parameter grad (fp32 copies).
    layer_kwargs go to the layer's forward (cu_seqlens for a packed batch)."""
    layer.zero_grad(set_to_none=True)
    xg = x.detach().clone().requires_grad_(True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        o = layer(xg, **layer_kwargs)[0]
    o.backward(do.to(o.dtype))
    out = {"output": o.detach().float(), "dx": xg.grad.float()}
    for name, p in layer.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        out[name] = p.grad.detach().float().clone()
    return out


@pytest.mark.parametrize("precision", ["bf16", "amp"])
def test_kda_layer_matches_fla_to_its_own_tolerance(precision, capsys):
    t0 = time.perf_counter()
    amp = precision == "amp"
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layer = _kda().to(dev).train()
    if not amp:
        layer = layer.to(torch.bfloat16)
    gen = torch.Generator(device=dev).manual_seed(1)
    act_dtype = torch.float32 if amp else torch.bfloat16
    x = torch.randn(B, T, HIDDEN, device=dev, generator=gen).to(act_dtype)
    do = torch.randn(B, T, HIDDEN, device=dev, generator=gen).to(act_dtype)

    # Warm-up (autotuning) of both paths, so neither measured run tunes.
    _step(layer, x, do, amp)
    with _patched_fla():
        _step(layer, x, do, amp)

    fla_run = _step(layer, x, do, amp)
    fla_again = _step(layer, x, do, amp)
    with _patched_fla():
        ours = _step(layer, x, do, amp)

    ref_layer = layer if amp else copy.deepcopy(layer).float()
    with _fp32_reference_kda():
        ref = _step(ref_layer, x.float(), do.float(), amp=False)
    assert ref["output"].dtype == torch.float32

    rows = []
    for name, r in ref.items():
        e_fla, e_ours = _rel_l2(fla_run[name], r), _rel_l2(ours[name], r)
        rows.append((name, e_fla, e_ours, _rel_l2(ours[name], fla_run[name]), r.numel()))
    with capsys.disabled():  # every number, before any assertion can stop the test
        print(f"\nKDA layer [{precision}], rel-L2 error vs the fp32 layer:")
        for n, ef, eo, d, k in rows:
            print(
                f"    {n:<28} fla {ef:.3e}  ours {eo:.3e}  (allowed {_allowed(ef, k):.3e})"
                f"  ours-vs-fla {d:.3e}"
            )
    bad = [
        f"{n}: ours {eo:.3e} > allowed {_allowed(ef, k):.3e} (fla {ef:.3e}, {k} elements)"
        for n, ef, eo, _, k in rows
        if not eo <= _allowed(ef, k)
    ]
    assert not bad, "error vs the fp32 layer exceeds fla's:\n" + "\n".join(bad)
    assert all(math.isfinite(v) for row in rows for v in row[1:])

    # whose conv kernels ran, and that the patched step went through the kda chain
    with _patched_fla(), _kda_chain_calls() as chain_calls:
        w_ours = _witness(_cuda_kernels(lambda: _step(layer, x, do, amp)), True, 3)
    # bf16 parameters make A_log and dt_bias bf16, outside the kda box (fp32 only): that
    # layer's chunk_kda goes to fla; under amp (fp32 parameters) it runs the chain.
    assert chain_calls == ({"fwd": 1, "bwd": 1} if amp else {"fwd": 0, "bwd": 0}), chain_calls
    with _kda_chain_calls() as unpatched_calls:
        w_fla = _witness(_cuda_kernels(lambda: _step(layer, x, do, amp)), False, 3)
    assert unpatched_calls == {"fwd": 0, "bwd": 0}, unpatched_calls

    out_row = rows[0]
    worst = max(rows[1:], key=lambda r: r[2] / max(r[1], 1e-30))
    widest = max(rows, key=lambda r: r[3])
    fla_noise = max(_rel_l2(fla_again[n], fla_run[n]) for n in fla_run)
    line = (
        f"KDA layer B{B} T{T} hidden{HIDDEN} {HEADS}x{HEAD_DIM} expand_v{EXPAND_V} "
        f"W{CONV_SIZE} [{precision}]: rel-L2 vs fp32 layer: output fla {out_row[1]:.2e} "
        f"ours {out_row[2]:.2e}; worst grad {worst[0]} fla {worst[1]:.2e} ours {worst[2]:.2e} "
        f"(ratio {worst[2] / max(worst[1], 1e-30):.3f}); ours vs fla max {widest[3]:.2e} "
        f"({widest[0]}), fla vs fla {fla_noise:.1e}; kernels patched "
        f"cconv_fwd/bwd {w_ours['cconv_fwd']}/{w_ours['cconv_bwd']}, fla's 0; unpatched "
        f"fla fwd/bwd {w_fla['causal_conv1d_fwd_kernel']}/{w_fla['causal_conv1d_bwd_kernel']}"
        f", kda chain fwd/bwd {chain_calls['fwd']}/{chain_calls['bwd']}"
        f" ({time.perf_counter() - t0:.0f} s)"
    )
    with capsys.disabled():
        print(line)


# packed sequences (cu_seqlens): against the same layer run per sequence in fp32
VARLEN_LENGTHS = (1, 700, 63, 1, 1283)  # T = 2048: a length-1 sequence, partial chunks


def _per_sequence_fp32(layer: nn.Module, x: torch.Tensor, do: torch.Tensor, lengths) -> dict:
    """The packed step's definition: each sequence alone through the fp32 layer (fp32
    weights, fla's fp32 reference recurrence and the conv's definition), outputs and input
    gradients concatenated, parameter gradients summed."""
    ref = copy.deepcopy(layer).float()
    ref.zero_grad(set_to_none=True)
    xs = x.detach().float().clone().requires_grad_(True)
    outs, start = [], 0
    with _fp32_reference_kda():
        for n in lengths:
            o = ref(xs[:, start : start + n])[0]
            o.backward(do[:, start : start + n].float())
            outs.append(o.detach())
            start += n
    out = {"output": torch.cat(outs, dim=1), "dx": xs.grad.float()}
    out.update({n: p.grad.detach().float().clone() for n, p in ref.named_parameters()})
    return out


def test_kda_layer_packed_sequences_match_per_sequence_fp32(capsys):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layer = _kda().to(dev).train()
    gen = torch.Generator(device=dev).manual_seed(4)
    total = sum(VARLEN_LENGTHS)
    x = torch.randn(1, total, HIDDEN, device=dev, generator=gen).to(torch.bfloat16)
    do = torch.randn(1, total, HIDDEN, device=dev, generator=gen).to(torch.bfloat16)
    cu = torch.tensor([0, *torch.tensor(VARLEN_LENGTHS).cumsum(0).tolist()], device=dev)

    _step(layer, x, do, True, cu_seqlens=cu)  # warm-up (autotuning) of both paths
    with _patched_fla():
        _step(layer, x, do, True, cu_seqlens=cu)
    fla_run = _step(layer, x, do, True, cu_seqlens=cu)
    with _patched_fla(), _kda_chain_calls() as chain_calls:
        ours = _step(layer, x, do, True, cu_seqlens=cu)
    assert chain_calls == {"fwd": 1, "bwd": 1}, chain_calls
    ref = _per_sequence_fp32(layer, x, do, VARLEN_LENGTHS)

    rows = [
        (n, _rel_l2(fla_run[n], r), _rel_l2(ours[n], r), _rel_l2(ours[n], fla_run[n]), r.numel())
        for n, r in ref.items()
    ]
    bad = [
        f"{n}: ours {eo:.3e} > allowed {_allowed(ef, k):.3e} (fla {ef:.3e})"
        for n, ef, eo, _, k in rows
        if not eo <= _allowed(ef, k)
    ]
    worst = max(rows, key=lambda r: r[2] / max(r[1], 1e-30))
    with capsys.disabled():
        print(
            f"\nKDA layer packed {VARLEN_LENGTHS} [amp]: rel-L2 vs per-sequence fp32: output "
            f"fla {rows[0][1]:.2e} ours {rows[0][2]:.2e}; worst {worst[0]} fla {worst[1]:.2e} "
            f"ours {worst[2]:.2e}; ours vs fla max {max(r[3] for r in rows):.2e}"
        )
    assert all(math.isfinite(v) for row in rows for v in row[1:4])
    assert not bad, "packed error vs the per-sequence fp32 layer exceeds fla's:\n" + "\n".join(bad)


# ------------------------------------------------------------------------------------------
# 20 training steps of a small stack
# ------------------------------------------------------------------------------------------


def _stack(vocab: int, n_layers: int) -> nn.Module:
    """Token embedding, N pre-norm residual KDA blocks, final norm, linear head."""
    return block_stack(vocab, HIDDEN, n_layers, _kda)


def _train(
    model: nn.Module, tokens: torch.Tensor, steps: int, profile_step: int | None
) -> tuple[list[float], list[str]]:
    """AdamW(lr 1e-3), fp32 master weights, bf16 autocast; next-token loss on a fresh batch
    per step: tokens [steps, batch, seq + 1]."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses: list[float] = []
    kernels: list[str] = []
    batch = iter(tokens)

    def one_step() -> torch.Tensor:
        step_tokens = next(batch)
        inputs, targets = step_tokens[:, :-1], step_tokens[:, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        return loss.detach()

    box: list[torch.Tensor] = []
    for step in range(steps):
        if step == profile_step:
            kernels = _cuda_kernels(lambda: box.append(one_step()))
            loss = box.pop()
        else:
            loss = one_step()
        losses.append(float(loss))
    return losses, kernels


def test_training_steps_follow_fla_loss_curve(capsys):
    dev = torch.device("cuda")
    # The layer test's B and T: the kernel configurations fla and kernel-fun autotune (some
    # are keyed on the batch or the row count) are then the ones its amp run tuned.
    vocab, n_layers, batch, seq = 4096, 2, B, T
    torch.manual_seed(0)
    init = _stack(vocab, n_layers).to(dev)
    tokens = _learnable_tokens(vocab, (TRAIN_STEPS, batch, seq + 1), dev, seed=2)

    fla_losses, fla_kernels = _train(copy.deepcopy(init), tokens, TRAIN_STEPS, TRAIN_STEPS // 2)
    fla_again, _ = _train(copy.deepcopy(init), tokens, TRAIN_STEPS, None)
    with _patched_fla(), _kda_chain_calls() as chain_calls:
        our_losses, kernels = _train(copy.deepcopy(init), tokens, TRAIN_STEPS, TRAIN_STEPS // 2)
    assert chain_calls["fwd"] == chain_calls["bwd"] == n_layers * TRAIN_STEPS, chain_calls

    _witness(fla_kernels, False, 3 * n_layers)
    witness = _witness(kernels, True, 3 * n_layers)
    dev_rel = [abs(a - b) / abs(a) for a, b in zip(fla_losses, our_losses)]
    noise = max(abs(a - b) / abs(a) for a, b in zip(fla_losses, fla_again))
    assert all(math.isfinite(v) for v in fla_losses + our_losses)
    assert sum(fla_losses[-5:]) < sum(fla_losses[:5]), f"the stack did not train: {fla_losses}"
    worst = max(range(TRAIN_STEPS), key=lambda i: dev_rel[i])
    assert dev_rel[worst] <= LOSS_REL_TOL, (
        f"step {worst}: fla {fla_losses[worst]:.5f} vs ours {our_losses[worst]:.5f}\n"
        f"fla : {fla_losses}\nours: {our_losses}"
    )
    line = (
        f"KDA x{n_layers} training, {TRAIN_STEPS} AdamW steps (B{batch} T{seq}, amp bf16): loss "
        f"{fla_losses[0]:.4f} -> fla {fla_losses[-1]:.4f} / ours {our_losses[-1]:.4f}; max "
        f"|dloss|/loss ours vs fla {dev_rel[worst]:.1e} (step {worst}), fla vs fla {noise:.1e}; "
        f"patched step ran cconv_fwd/bwd {witness['cconv_fwd']}/{witness['cconv_bwd']}, "
        f"fla conv 0; kda chain fwd/bwd {chain_calls['fwd']}/{chain_calls['bwd']}"
    )
    with capsys.disabled():
        print("\n" + line)
