"""kda idea 014 on the GPU: its backward intra-chunk stage under a register cap computes what
kda/003's uncapped launch computes, bit for bit, on tensor cores, for the cap it is promoted
at (128) and a tighter one (96, which spills more), on dense, packed and grouped-value calls
and with gates deep enough to send diagonal tiles to kda/003's exact loop.

The cap changes only the compiler's register allocation (spills go to local memory), never
the arithmetic or its order, so any difference is a defect."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)

pytestmark = pytest.mark.gpu

# name, B, T, H, HV, cu_seqlens, gate depth (log2 units per token on average), K
CASES = [
    ("dense-k128", 2, 4096, 2, 2, None, 0.3, 128),
    # hundreds of log2 units per 16 tokens: most diagonal tiles take the exact loop
    ("deep-k128", 1, 2048, 2, 2, None, 12.0, 128),
    ("varlen-gva", 1, 3000, 2, 4, [0, 1, 17, 67, 64 * 9 + 5, 2000, 3000], 1.0, 128),
    ("ragged-k96", 2, 1000, 1, 1, None, 2.0, 96),
]


@pytest.fixture(scope="module")
def stages():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.kda.ideas.i003 import intra as i3
    from ladder.kernels.kda.ideas.i014 import intra as i14

    return i3, i14


def _inputs(B, T, H, HV, cu, depth, K):
    """The stage's inputs as the chain hands them over: a chunk-local cumulative gate (log2
    units, every 64 tokens of each sequence from zero), dA strictly lower (dAkk) and lower
    (dAqk) within each chunk and zero past its end."""
    from fla.ops.utils import prepare_chunk_indices

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(20261204)

    def randn(*shape):
        return torch.randn(*shape, device=dev, generator=gen)

    q, k = randn(B, T, H, K).to(torch.bfloat16), randn(B, T, H, K).to(torch.bfloat16)
    step = -depth * torch.rand(B * T, HV, K, device=dev, generator=gen)
    bounds = [(b * T, b * T + T) for b in range(B)] if cu is None else list(zip(cu[:-1], cu[1:]))
    g = torch.empty_like(step)
    dAqk, dAkk = randn(B * T, HV, 64) * 0.1, randn(B * T, HV, 64) * 0.1
    for s, e in bounds:
        for c in range(s, e, 64):
            n = min(c + 64, e) - c
            g[c : c + n] = step[c : c + n].cumsum(0)
            tri = torch.ones(n, n, device=dev)
            dAqk[c : c + n, :, :n] *= torch.tril(tri)[:, None, :]
            dAkk[c : c + n, :, :n] *= torch.tril(tri, -1)[:, None, :]
            dAqk[c : c + n, :, n:] = 0
            dAkk[c : c + n, :, n:] = 0
    g, dAqk, dAkk = (t.reshape(B, T, HV, -1) for t in (g, dAqk, dAkk))
    beta = torch.rand(B, T, HV, device=dev, generator=gen).to(torch.bfloat16)
    dq, dk, dg = (randn(B, T, HV, K) for _ in range(3))
    db = randn(B, T, HV)
    cut = None if cu is None else torch.tensor(cu, device=dev, dtype=torch.int32)
    ci = None if cu is None else prepare_chunk_indices(cut, 64)
    return (q, k, g, beta, dAqk, dAkk, dq, dk, db, dg), {"cu_seqlens": cut, "chunk_indices": ci}


@pytest.mark.parametrize("cap", [128, 96])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_capped_stage_equals_003_bit_for_bit(stages, monkeypatch, case, cap):
    i3, i14 = stages
    args, kw = _inputs(*case[1:])
    want = i3.kda_bwd_intra(*args, **kw)
    monkeypatch.setattr(i14, "MAXNREG", cap)
    got = i14.kda_bwd_intra(*args, **kw)
    torch.cuda.synchronize()
    for name, a, b in zip(("dq", "dk", "db", "dg"), got, want):
        assert a.shape == b.shape and a.dtype == b.dtype, (case[0], name)
        assert bool(torch.isfinite(b).all()), (case[0], name)  # the reference is a real one
        assert torch.equal(a, b), (case[0], cap, name, float((a - b).abs().max()))
    # the stage did work: its outputs are not its inputs passed through
    assert not torch.equal(got[0], args[6]) and not torch.equal(got[3], args[9])
