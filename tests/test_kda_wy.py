"""The fused WY / dq / dk / dg backward stage of kda/004 and kda/005 on Triton's CPU interpreter, against the
stage's definition evaluated in float64 with torch, and against fla 0.6.0's own kernel for
that stage run the same way (ours may be no further from the definition than fla's). The
inputs are fp32 here (the interpreter's bf16 products are wrong; see the script).

Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import importlib, json, os, sys
    import torch
    import ladder  # installs the idea import finder
    wy = importlib.import_module(f"ladder.kernels.kda.ideas.i{sys.argv[1]}.wy")
    import triton
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd_kernel_wy_dqkg_fused

    def fla_stage(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, cu, ci):
        # fla's kernel under its autotuner, launched at one of its own configurations
        kern = chunk_kda_bwd_kernel_wy_dqkg_fused
        from triton.runtime.interpreter import InterpretedFunction
        while not isinstance(kern, (triton.runtime.jit.JITFunction, InterpretedFunction)):
            kern = kern.fn
        B, T, H, K = k.shape
        HV, V = v.shape[2], v.shape[3]
        NT = -(-T // 64) if cu is None else len(ci)
        dq, dk, dg = (g.new_empty(B, T, HV, K) for _ in range(3))
        dv2, db, dA = torch.empty_like(v), torch.empty_like(beta, dtype=torch.float), torch.empty_like(A, dtype=torch.float)
        kern[(NT, B * HV)](q, k, v, v_new, g, beta, A, h, do, dh, dq, dk, dv, dv2, dg, db, dA, cu, ci,
                           scale, T, H=H, HV=HV, K=K, V=V, BT=64, BK=64, BV=64, STATE_V_FIRST=True,
                           IS_VARLEN=cu is not None, USE_GRAPH=False)
        return dq, dk, dv2, db, dg, dA
    from fla.ops.utils import prepare_chunk_indices

    def definition(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, bounds, G):
        # float64, per chunk of 64 of each sequence and per value head
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        f = lambda t: t.to(torch.float64).reshape(B * T, *t.shape[2:])
        q, k = f(q).repeat_interleave(G, 1), f(k).repeat_interleave(G, 1)
        v, v_new, g, beta, A, do, dv = map(f, (v, v_new, g, beta, A, do, dv))
        h, dh = (t.double().reshape(-1, *t.shape[-3:]) for t in (h, dh))  # [chunks, HV, V, K]
        dq, dk, dg = (torch.zeros(B * T, HV, K, dtype=torch.float64) for _ in range(3))
        dv2 = torch.zeros(B * T, HV, V, dtype=torch.float64)
        db = torch.zeros(B * T, HV, dtype=torch.float64)
        dA = torch.zeros(B * T, HV, 64, dtype=torch.float64)
        c_idx = 0
        for s, e in bounds:
            for c in range(s, e, 64):
                r = slice(c, min(c + 64, e))
                n = r.stop - r.start
                for j in range(HV):
                    hc, dhc = h[c_idx, j], dh[c_idx, j]          # [V, K]
                    gc, gn = g[r, j], g[r.stop - 1, j]
                    At = A[r, j, :n].T                           # fla loads A transposed
                    ge = torch.exp2(gc)
                    kg = k[r, j] * ge
                    dq[r, j] = scale * ge * (do[r, j] @ hc)
                    dk0 = torch.exp2(gn - gc) * (v_new[r, j] @ dhc)
                    dw = -(dv[r, j] @ hc)
                    dkgb = At @ dw
                    bj = beta[r, j]
                    dk[r, j] = dk0 + bj[:, None] * ge * dkgb
                    dg[r, j] = q[r, j] * dq[r, j] - k[r, j] * dk0 + bj[:, None] * kg * dkgb
                    dg[r.stop - 1, j] += torch.exp2(gn) * (hc * dhc).sum(0) + (k[r, j] * dk0).sum(0)
                    dvb = At @ dv[r, j]
                    dv2[r, j] = bj[:, None] * dvb
                    db[r, j] = (dvb * v[r, j]).sum(1) + (dkgb * kg).sum(1)
                    strict = torch.tril(torch.ones(n, n, dtype=torch.bool), -1)
                    M = torch.where(strict, (dv[r, j] @ v[r, j].T + dw @ kg.T) * bj[None, :], 0.0)
                    dA[r, j, :n] = torch.where(strict, -(At @ M @ At), 0.0)
                c_idx += 1
        return [t.reshape(B, T, *t.shape[1:]) for t in (dq, dk, dv2, db, dg, dA)]

    out = {}
    cases = [
        # name, B, T, H, HV, V, cu_seqlens, K: dense with a ragged last chunk, GVA with a
        # packed batch (length-1 and 2 sequences), K not a multiple of the slice, V in one block
        ("dense-ragged", 2, 100, 1, 1, 128, None, 128),
        ("gva-varlen", 1, 150, 1, 2, 64, [0, 1, 65, 67, 130, 150], 128),
        ("k48-v32", 1, 70, 1, 1, 32, None, 48),
    ]
    for name, B, T, H, HV, V, cu, K in cases:
        torch.manual_seed(0)
        # fp32 where the stage takes bf16: Triton 3.6's interpreter computes bf16 x bf16
        # tl.dot wrongly (a 16 x 16 check is off by 1e9 relative), so the products here run
        # in fp32 and the stage meets its definition to fp32 accuracy; the bf16 path is
        # checked against fla on the GPU
        bf = torch.float32
        q = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1).to(bf)
        k = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1).to(bf)
        v, v_new, do, dv = (torch.randn(B, T, HV, V).to(bf) for _ in range(4))
        bounds = [(b * T, b * T + T) for b in range(B)] if cu is None else list(zip(cu[:-1], cu[1:]))
        NC = sum(-(-(e - s) // 64) for s, e in bounds)
        flat = (-0.7 * torch.rand(B * T, HV, K))
        g = torch.empty_like(flat)
        A = torch.zeros(B * T, HV, 64)
        for s, e in bounds:
            for c in range(s, e, 64):
                r = slice(c, min(c + 64, e))
                n = r.stop - r.start
                g[r] = flat[r].cumsum(0)
                A[r, :, :n] = (torch.randn(n, HV, n) * 0.3).permute(1, 0, 2).tril().permute(1, 0, 2) + \
                    torch.eye(n)[:, None, :]
        g, A = g.reshape(B, T, HV, K), A.reshape(B, T, HV, 64).to(bf)
        beta = torch.rand(B, T, HV).to(bf)
        h = (torch.randn(NC, HV, V, K) * 0.5).to(bf)
        dh = (torch.randn(NC, HV, V, K) * 0.5).to(bf)
        scale = K ** -0.5
        cut = torch.tensor(cu) if cu is not None else None
        ci = prepare_chunk_indices(cut, 64) if cu is not None else None
        if cu is None:  # as fla's chain returns them: [B, NT, HV, V, K]
            h, dh = (t.view(B, -1, *t.shape[1:]) for t in (h, dh))
        args = (q, k, v, v_new, g, beta, A, h, do, dh, dv, scale)
        got = wy.kda_bwd_wy(*args, cu_seqlens=cut, chunk_indices=ci)
        fla = fla_stage(*args, cut, ci)
        want = definition(*args, bounds, HV // H)
        errs = {}
        for nm, a, b, w in zip(("dq", "dk", "dv2", "db", "dg", "dA"), got, fla, want):
            assert a.shape == b.shape and a.dtype == b.dtype, (name, nm, a.shape, b.shape, a.dtype, b.dtype)
            assert bool(torch.isfinite(a).all()), (name, nm)
            errs[nm] = [float((a.double() - w).norm() / w.norm()), float((b.double() - w).norm() / w.norm())]
        out[name] = errs
    print(json.dumps(out))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("idea", ["004", "005"])
def test_wy_stage_matches_its_definition_and_fla_in_the_interpreter(idea: str) -> None:
    errs = run_interpreted(SCRIPT, idea)
    for case, per in errs.items():
        for name, (ours, fla) in per.items():
            # fp32 throughout (see the script): fp32 accuracy, and no further from the
            # definition than fla's kernel on the same inputs (up to fp32 rounding)
            assert ours < 1e-5, (case, name, ours, fla)
            assert ours <= 2 * fla + 1e-6, (case, name, ours, fla)
