"""kda idea 027 on the GPU: its forward (the w/u products formed inside the state walk, kb and
kg written by the diagonal kernel) computes, in bf16 on tensor cores, what kda/025's forward
computes, bit for bit: o, the final state and every saved tensor the backward reads (Aqk on
each chunk's lower triangle, the only part any kernel writes), and so the same gradients.

The arithmetic is fla's w/u kernel's (the same operands, [64, 64] by [64, n] bf16 products
with fp32 accumulation, the same roundings) followed by kda/019's walk, so a difference in
any bit is a defect (an operand formed differently, a rounding skipped), not rounding noise.
Cases: dense at K 128 V 256 with a ragged last chunk, a packed batch with GVA and states in
and out, a gate of tens of nat per token (most diagonal rows on kda/012's exact loop), beta
near its bound 2 (allow_neg_eigval), dense GVA at K 64, and the bounded gate (where the
forward is kda/025's)."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)
from ladder.kernels.kda import family

pytestmark = pytest.mark.gpu

AQK_SLOT = 11  # fla's saved-tensor order: ..., A_log, dt_bias, Aqk, Akk, ...

CASES = [
    family.Shape("dense", 2, 2000, 2, 2, 128, 256),
    family.Shape("varlen-gva-state", 1, 3000, 2, 4, 128, 128, case="varlen",
                 lengths=(1, 17, 50, 64 * 9 + 5, 1351, 1000), state=True),
    family.Shape("deep-gate", 2, 1000, 2, 2, 128, 256, case="state", state=True, g_mean=3.0,
                 beta_mean=6.0),
    family.Shape("neg-eigval", 2, 1000, 2, 2, 128, 256, allow_neg_eigval=True, beta_mean=6.0),
    # one 64-wide block of K (the walk's second block masked off), dense GVA
    family.Shape("gva-k64", 2, 700, 2, 4, 64, 128, case="gva"),
    # the bounded gate: kda/025's forward (fla's intra stage) under kda/027's entry point
    family.Shape("lower-bound", 2, 1000, 2, 2, 128, 256, case="lower_bound", lower_bound=-5.0),
]  # fmt: skip


@pytest.fixture(scope="module")
def chains():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.kda.ideas.i025 import kernel as k25
    from ladder.kernels.kda.ideas.i027 import kernel as k27

    return k25, k27


def _lower(a: torch.Tensor, lengths) -> torch.Tensor:
    """Aqk [B, T, HV, 64] on each chunk's lower triangle (row within its chunk i, columns
    j <= i), flattened."""
    local = torch.cat([torch.arange(n) % 64 for n in lengths]).to(a.device)
    local = local.repeat(a.shape[0] * a.shape[1] // local.numel())
    keep = torch.arange(64, device=a.device)[None, :] <= local[:, None]
    flat = a.reshape(-1, a.shape[2], 64)
    return flat[keep[:, None, :].expand(-1, a.shape[2], -1)]


@pytest.mark.parametrize("shape", CASES, ids=[s.name for s in CASES])
def test_027_forward_and_gradients_are_025s_bit_for_bit(chains, shape):
    k25, k27 = chains
    inputs = family.make_inputs(shape, torch.device("cuda"), seed=20261207)
    q, k, v, g, beta, A_log, dt_bias, h0, cu, do, dht, lower_bound, neg = inputs
    args = (q, k, v, g, beta, A_log, dt_bias, q.shape[-1] ** -0.5, h0, h0 is not None, cu,
            lower_bound, lower_bound is not None, neg)  # fmt: skip
    lengths = shape.lengths or [shape.T] * shape.B
    res, saved = {}, {}
    for name, m in (("025", k25), ("027", k27)):
        o, ht, ctx = m.kda_fwd(*args)
        saved[name] = list(ctx.saved_tensors)
        res[name] = (o, ht, *m.kda_bwd(ctx, do, dht))
    assert torch.isfinite(res["027"][0]).all()
    for i, (a, b) in enumerate(zip(saved["027"], saved["025"])):
        if a is None or b is None:
            assert a is None and b is None, i
            continue
        if i == AQK_SLOT:
            a, b = _lower(a, lengths), _lower(b, lengths)
        assert torch.equal(a, b), (shape.name, "saved", i)
    names = ("o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0")
    for name, a, b in zip(names, res["027"], res["025"]):
        if b is None:
            assert a is None, name
            continue
        assert torch.equal(a, b), (shape.name, name, float((a.float() - b.float()).abs().max()))
