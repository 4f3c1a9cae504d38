"""The kda family contract: the float64 oracle against an independent autograd recurrence
and fla's naive recurrence, and the inputs the shapes describe."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from ladder.kernels.kda import family
from ladder.kernels.kda import reference as ref


def _autograd_oracle(q, k, v, g, beta, A_log, dt_bias, h0, cu, do, dht, lower_bound, neg):
    """The same op written the plain way: activations and a per-token loop in float64,
    every gradient by torch autograd (no hand-written adjoint). Full heads, no slicing."""
    leaves = [t.detach().to(torch.float64).requires_grad_(True) for t in (q, k, v, g, beta)]
    A = A_log.detach().to(torch.float64).requires_grad_(True)
    h0l = None if h0 is None else h0.detach().to(torch.float64).requires_grad_(True)
    bias = dt_bias.detach().to(torch.float64).requires_grad_(True)
    qq, kk, vv, gg, bb = leaves
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // H
    qn = qq / torch.sqrt((qq * qq).sum(-1, keepdim=True) + 1e-6)
    kn = kk / torch.sqrt((kk * kk).sum(-1, keepdim=True) + 1e-6)
    x = gg + bias.view(HV, K)
    if lower_bound is None:
        gate = -A.exp().view(HV, 1) * F.softplus(x)
    else:
        gate = lower_bound * torch.sigmoid(A.exp().view(HV, 1) * x)
    beta_a = torch.sigmoid(bb) * (2.0 if neg else 1.0)
    qn, kn = qn.repeat_interleave(G, 2), kn.repeat_interleave(G, 2)
    bounds = [(b * T, b * T + T) for b in range(B)]
    if cu is not None:
        c = cu.tolist()
        bounds = [(c[i], c[i + 1]) for i in range(len(c) - 1)]
    flat = [t.reshape(B * T, *t.shape[2:]) for t in (qn, kn, vv, gate, beta_a)]
    outs, finals = [None] * (B * T), []
    for n, (s, e) in enumerate(bounds):
        S = torch.zeros(HV, K, V, dtype=torch.float64)
        if h0l is not None:
            S = S + h0l[n].transpose(-1, -2)
        for t in range(s, e):
            qt, kt, vt, at, bt = (f[t] for f in flat)
            S = at.exp().unsqueeze(-1) * S
            u = vt - torch.einsum("hk,hkv->hv", kt, S)
            S = S + bt.view(HV, 1, 1) * kt.unsqueeze(-1) * u.unsqueeze(-2)
            outs[t] = K**-0.5 * torch.einsum("hk,hkv->hv", qt, S)
        finals.append(S)
    o = torch.stack(outs).reshape(B, T, HV, V)
    loss = (o * do.to(torch.float64)).sum()
    ht = torch.stack(finals).transpose(-1, -2)
    if dht is not None:
        loss = loss + (ht * dht.to(torch.float64)).sum()
    wrt = [*leaves, A, bias] + ([h0l] if h0l is not None else [])
    grads = torch.autograd.grad(loss, wrt)
    dh0 = grads[7] if h0l is not None else None
    return o.detach(), ht.detach(), grads[:7], dh0


CASES = [
    family.Shape("dense", 2, 70, 2, 2, 8, 6),
    family.Shape("gva", 1, 33, 2, 4, 8, 4, case="gva"),
    family.Shape("varlen", 1, 75, 2, 2, 8, 4, case="varlen", lengths=(1, 66, 2, 6)),
    family.Shape("state", 2, 19, 1, 1, 4, 4, case="state", state=True, g_mean=3.0, beta_mean=5.0),
    family.Shape("lb", 1, 40, 2, 2, 8, 4, case="lower_bound", lower_bound=-5.0),
    family.Shape("neg", 1, 40, 2, 2, 8, 4, case="neg_eigval", allow_neg_eigval=True),
]


@pytest.mark.parametrize("shape", CASES, ids=lambda s: s.name)
def test_oracle_matches_autograd_recurrence(shape: family.Shape) -> None:
    inputs = family.make_inputs(dataclasses.replace(shape, dtype="float64"), "cpu", seed=11)
    got = family.reference(*inputs)
    o, ht, grads, dh0 = _autograd_oracle(*inputs)
    dq, dk, dv, dg, db, dA, dbias = grads
    H, HV, K = shape.H, shape.HV, shape.K
    qh, vh = family._ref_slice(H, HV // H)
    vk = [h * K + i for h in vh for i in range(K)]
    want = [o[:, :, vh], ht[:, vh], dq[:, :, qh], dk[:, :, qh], dv[:, :, vh], dg[:, :, vh],
            db[:, :, vh], dA[vh], dbias[vk], dh0[:, vh] if dh0 is not None else None]  # fmt: skip
    for name, a, b in zip(family.TOLERANCES, got, want, strict=True):
        if name in ("ht", "dh0") and not shape.state:
            assert a.numel() == 0
            continue
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11, msg=f"{shape.name}: {name}")


def test_oracle_forward_matches_fla_naive_recurrence() -> None:
    from fla.ops.kda.naive import naive_recurrent_kda

    shape = family.Shape("n", 2, 50, 2, 4, 8, 8, dtype="float64")
    q, k, v, g, beta, A_log, dt_bias, *_ = family.make_inputs(shape, "cpu", seed=5)
    qa, ka, gate, b = ref.activate(q, k, g, beta, A_log, dt_bias, lower_bound=None,
                                   allow_neg_eigval=False)  # fmt: skip
    want, _ = naive_recurrent_kda(qa, ka, v, gate, b, scale=shape.K**-0.5)
    inputs = family.make_inputs(shape, "cpu", seed=5)
    got = family.reference(*inputs)[0]
    _, vh = family._ref_slice(shape.H, shape.HV // shape.H)
    # fla computes its naive recurrence in float32.
    torch.testing.assert_close(got, want[:, :, vh].to(torch.float64), rtol=1e-4, atol=1e-6)


def test_deep_gate_shape_reaches_below_minus_80_per_16_tokens() -> None:
    (shape,) = [s for s in family.SHAPES["sweep"] if s.name == "deep-gate"]
    small = dataclasses.replace(shape, B=1, T=64)
    q, k, v, g, beta, A_log, dt_bias, *_ = family.make_inputs(small, "cpu", seed=0)
    _, _, gate, b = ref.activate(q, k, g, beta, A_log, dt_bias, lower_bound=None,
                                 allow_neg_eigval=False)  # fmt: skip
    per16 = gate[0, :16].sum(0)  # [HV, K]
    assert float(per16.min()) < -80.0
    assert float(b.median()) > 0.99 and float(b.min()) > 0.9  # beta near its bound 1


def test_shapes_are_well_formed() -> None:
    (prod,) = family.SHAPES["prod"]
    assert (prod.B, prod.T, prod.H, prod.K, prod.V) == (16, 8192, 16, 128, 256)
    for s in family.SHAPES["sweep"] + family.SHAPES["small"]:
        assert s.case in family.CASES
        if s.lengths is not None:
            assert s.B == 1 and sum(s.lengths) == s.T and min(s.lengths) >= 1
    (vl,) = [s for s in family.SHAPES["sweep"] if s.case == "varlen"]
    assert min(vl.lengths) == 1 and max(vl.lengths) == 8192 and vl.T == 131072


def test_make_inputs_fresh_and_never_zero() -> None:
    s = family.SHAPES["small"][0]
    a = family.make_inputs(s, "cpu", seed=1)
    b = family.make_inputs(s, "cpu", seed=2)
    assert not torch.equal(a[0], b[0])
    for t in a[:7]:
        assert t is not None and bool((t != 0).any())


def test_min_bytes_counts_inputs_and_outputs() -> None:
    s = family.Shape("m", 1, 64, 1, 1, 16, 32)
    # fwd: q, k (64*16 each), v (64*32), g (64*16), beta (64), o (64*32); bf16
    assert family.min_bytes(s, "fwd") == 2 * (2 * 64 * 16 + 64 * (32 + 16 + 1) + 64 * 32)
    assert family.min_bytes(s, "bwd") == 2 * family.min_bytes(s, "fwd")
    with pytest.raises(ValueError):
        family.min_bytes(s, "both")
