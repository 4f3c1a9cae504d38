"""kda idea 028 on the GPU: its backward's recompute (``recompute.recompute``: the row-wise
qg/kb/kg kernel and the walk forming w and u) returns what fla's w/u kernel and fla's state
kernel return at kda/024's fixed launches, bit for bit (w, qg, kg, h, v_new), and the whole
chain's outputs and gradients are kda/025's bit for bit.

The walk uses fla's operands, products and order (h stored before each chunk, the state's
update formed on its own and then added), so a difference in any bit is a defect, not
rounding noise. Cases: tests/test_kda_027_gpu.py's (dense with a ragged chunk, packed with
GVA and states, a gate of tens of nat per token, beta near 2, dense GVA at K 64, the bounded
gate)."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)
from ladder.kernels.kda import family
from tests.test_kda_027_gpu import AQK_SLOT, CASES, _lower

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def mods():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.kda.ideas.i024 import launch
    from ladder.kernels.kda.ideas.i025 import kernel as k25
    from ladder.kernels.kda.ideas.i028 import kernel as k28
    from ladder.kernels.kda.ideas.i028 import recompute

    return launch, k25, k28, recompute


def _args(shape):
    inputs = family.make_inputs(shape, torch.device("cuda"), seed=20261207)
    q, k, v, g, beta, A_log, dt_bias, h0, cu, do, dht, lower_bound, neg = inputs
    args = (q, k, v, g, beta, A_log, dt_bias, q.shape[-1] ** -0.5, h0, h0 is not None, cu,
            lower_bound, lower_bound is not None, neg)  # fmt: skip
    return args, do, dht


@pytest.mark.parametrize("shape", CASES, ids=[s.name for s in CASES])
def test_028_recompute_is_flas_w_u_and_state_kernels_bit_for_bit(mods, shape):
    launch, k25, _k28, recompute = mods
    args, _do, _dht = _args(shape)
    _o, _ht, ctx = k25.kda_fwd(*args)
    (q, _qr, k, _kr, v, gc, _g, _br, beta, _al, _dt, _Aqk, Akk,
     *_u, h0, cu, ci, _co) = ctx.saved_tensors  # fmt: skip
    w0, u0, qg0, kg0 = launch.w_u(k, v, beta, Akk, gc, q=q, cu_seqlens=cu, chunk_indices=ci)
    h_want, vn_want = launch.fwd_h(kg0, w0, u0, gc, h0, cu, ci, 64)
    w, qg, kg, h, v_new = recompute.recompute(q, k, v, gc, beta, Akk, h0, cu, ci)
    for name, a, b in (("w", w, w0), ("qg", qg, qg0), ("kg", kg, kg0), ("h", h, h_want),
                       ("v_new", v_new, vn_want)):  # fmt: skip
        if cu is not None and name in ("w", "qg", "kg"):  # rows past the last sequence: none
            a, b = a[:, : int(cu[-1])], b[:, : int(cu[-1])]
        assert torch.equal(a, b), (shape.name, name, float((a.float() - b.float()).abs().max()))


@pytest.mark.parametrize("shape", CASES, ids=[s.name for s in CASES])
def test_028_outputs_and_gradients_are_025s_bit_for_bit(mods, shape):
    _launch, k25, k28, _recompute = mods
    args, do, dht = _args(shape)
    lengths = shape.lengths or [shape.T] * shape.B
    res, saved = {}, {}
    for name, m in (("025", k25), ("028", k28)):
        o, ht, ctx = m.kda_fwd(*args)
        saved[name] = list(ctx.saved_tensors)
        res[name] = (o, ht, *m.kda_bwd(ctx, do, dht))
    for i, (a, b) in enumerate(zip(saved["028"], saved["025"])):
        if a is None or b is None:
            assert a is None and b is None, i
            continue
        if i == AQK_SLOT:
            a, b = _lower(a, lengths), _lower(b, lengths)
        assert torch.equal(a, b), (shape.name, "saved", i)
    names = ("o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0")
    for name, a, b in zip(names, res["028"], res["025"]):
        if b is None:
            assert a is None, name
            continue
        assert torch.isfinite(a).all(), (shape.name, name)
        assert torch.equal(a, b), (shape.name, name, float((a.float() - b.float()).abs().max()))
