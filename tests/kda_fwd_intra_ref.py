"""Shared pieces of the interpreter tests of the kda forward's intra-chunk stage
(tests/test_kda_fwd_intra.py, tests/test_kda_fwd_diag.py), imported by their scripts: the
stage's definition evaluated in float64 per chunk (Aqk, A with torch.linalg.inv for
(I + A)^-1, w, u, kg), independent of any kernel; the inputs; the error measure."""

from __future__ import annotations

import torch
from fla.ops.utils.index import prepare_chunk_indices


def reference(q, k, v, g, beta, scale, bounds):
    """(w, u, kg, Aqk, Akk) in float64 from the definition; bounds: [(batch row, (start,
    end))] of every sequence."""
    B, T, H, K = k.shape
    HV = v.shape[2]
    G = HV // H
    f64 = torch.float64
    Aqk = torch.zeros(B, T, HV, 64, dtype=f64)
    Akk = torch.zeros(B, T, HV, 64, dtype=f64)
    w = torch.zeros(B, T, HV, K, dtype=f64)
    u = torch.zeros(B, T, HV, v.shape[3], dtype=f64)
    kg = torch.zeros(B, T, HV, K, dtype=f64)
    for b, (s, e) in bounds:
        for c0 in range(s, e, 64):
            c1 = min(c0 + 64, e)
            n = c1 - c0
            low = torch.tril(torch.ones(n, n, dtype=torch.bool))
            for hv in range(HV):
                qq, kk = q[b, c0:c1, hv // G].double(), k[b, c0:c1, hv // G].double()
                gg, bb = g[b, c0:c1, hv].double(), beta[b, c0:c1, hv].double()
                E = torch.exp2(gg[:, None, :] - gg[None, :, :])
                E = torch.where(low[:, :, None], E, torch.zeros_like(E))
                aq = torch.einsum("ik,jk,ijk->ij", qq, kk, E) * scale
                a = torch.tril(torch.einsum("ik,jk,ijk->ij", kk, kk, E) * bb[:, None], -1)
                inv = torch.linalg.inv(torch.eye(n, dtype=f64) + a)
                Aqk[b, c0:c1, hv, :n] = aq
                Akk[b, c0:c1, hv, :n] = inv
                w[b, c0:c1, hv] = inv @ (kk * bb[:, None] * torch.exp2(gg))
                u[b, c0:c1, hv] = inv @ (v[b, c0:c1, hv].double() * bb[:, None])
                kg[b, c0:c1, hv] = kk * torch.exp2(gg[-1][None, :] - gg)
    return w, u, kg, Aqk, Akk


def inputs(B, H, HV, K, V, lens, per_token, rise=0.0):
    """fp32 inputs of the stage (seed 0) and their sequence bounds; lens: one length per
    sequence (B == 1 and several: a packed batch)."""
    # per_token: the gate's mean depth per token (log2 units), drawn U(0, 2 per_token); rise:
    # a step up of U(0, rise) added to every token's step (rise > 0: a gate that can rise)
    torch.manual_seed(0)
    packed = B == 1 and len(lens) > 1
    T = sum(lens) if packed else lens[0]
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1)
    v = torch.randn(B, T, HV, V)
    beta = torch.rand(B, T, HV) * 2  # up to the neg-eigval bound
    steps = -torch.rand(B, T, HV, K) * 2 * per_token
    if rise:
        steps = steps + torch.rand(B, T, HV, K) * rise
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist()) if packed else None
    seqs = [(int(cu[i]), int(cu[i + 1])) for i in range(len(lens))] if packed else [(0, T)]
    g = torch.zeros_like(steps)
    for s, e in seqs:
        for c0 in range(s, e, 64):
            g[:, c0 : min(c0 + 64, e)] = steps[:, c0 : min(c0 + 64, e)].cumsum(1)
    bounds = [(0, se) for se in seqs] if packed else [(b, (0, T)) for b in range(B)]
    ci = prepare_chunk_indices(cu, 64) if packed else None
    return q, k, v, g, beta, K**-0.5, cu, ci, bounds


def lower_mask(like, bounds):
    """True on and below each chunk's diagonal of an [B, T, HV, 64] score matrix."""
    m = torch.zeros_like(like, dtype=torch.bool)
    for b, (s, e) in bounds:
        for c0 in range(s, e, 64):
            for i in range(c0, min(c0 + 64, e)):
                m[b, i, :, : i - c0 + 1] = True
    return m


def errors(outs, ref, bounds):
    """{name: relative L2 error} of (w, u, kg, Aqk, Akk) against the reference, and for Aqk
    and Akk the largest entry above the diagonal (name + "_above")."""
    res = {}
    for name, a, r in zip(("w", "u", "kg", "Aqk", "Akk"), outs, ref):
        if name in ("Aqk", "Akk"):
            m = lower_mask(r, bounds)
            # fla leaves the entries above the diagonal unwritten (any bits, NaN too):
            # selected away, not multiplied by 0
            res[name + "_above"] = float(torch.where(m, 0.0, a.double()).abs().max())
            a, r = torch.where(m, a.double(), 0.0), torch.where(m, r, 0.0)
        ok = bool(torch.isfinite(a).all())
        res[name] = float((a.double() - r).norm() / r.norm()) if ok else float("nan")
    return res
