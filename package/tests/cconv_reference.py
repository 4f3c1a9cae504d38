"""An fp64 reference of fla 0.6.0's causal_conv1d and causal_conv1d_update semantics, written
from their definitions (independent of fla and of our kernels), shared by the cconv tests.

Per sequence n (a batch row, or cu_seqlens[n]:cu_seqlens[n+1] of a packed [1, total, D]),
with xs = [initial_state[n].T (W rows, zeros without one); x rows of the sequence]:

    z[t]  = sum_k weight[:, k] * xs[t + 1 + k]  (+ bias)
    y[t]  = act(z[t]) (+ residual[t])            act: silu, or identity for None
    final = xs[L : L + W].T                      the last W rows, [D, W]

Gradients come from torch.autograd on this graph, so dht reaches every slot it touches.
"""

from __future__ import annotations

import torch


def _f64(t):
    return None if t is None else t.detach().to(torch.float64).requires_grad_()


def conv_reference(
    x, w, dy, bias=None, residual=None, h0=None, dht=None, activation="silu", cu_seqlens=None
) -> dict[str, torch.Tensor | None]:
    """{"y", "final", "dx", "dw", "db", "dr", "dh0"} in float64 on the CPU (None where the
    input is absent). x, dy: [B, T, D]; w: [D, W]; h0, dht: [N, D, W]."""
    X, Wt, Bs, R, H = (_f64(t.cpu() if t is not None else None) for t in (x, w, bias, residual, h0))
    B, T, D = x.shape
    W = w.shape[1]
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        cu = [int(v) for v in cu_seqlens.cpu()]
        spans = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    rows = [[] for _ in range(B)]
    finals = []
    for n, (b, s, e) in enumerate(spans):
        pre = H[n].T if H is not None else torch.zeros(W, D, dtype=torch.float64)
        xs = torch.cat([pre, X[b, s:e]], 0)
        L = e - s
        z = sum(Wt[:, k] * xs[1 + k : 1 + k + L] for k in range(W))
        if Bs is not None:
            z = z + Bs
        yv = z * torch.sigmoid(z) if activation in ("silu", "swish") else z
        if R is not None:
            yv = yv + R[b, s:e]
        rows[b].append(yv)
        finals.append(xs[L : L + W].T)
    y = torch.stack([torch.cat(r, 0) for r in rows])
    final = torch.stack(finals)
    loss = (y * dy.cpu().to(torch.float64)).sum()
    if dht is not None:
        loss = loss + (final * dht.cpu().to(torch.float64)).sum()
    leaves = [t for t in (X, Wt, Bs, R, H) if t is not None]
    grads = iter(torch.autograd.grad(loss, leaves))
    out = {"y": y.detach(), "final": final.detach()}
    for name, t in zip(("dx", "dw", "db", "dr", "dh0"), (X, Wt, Bs, R, H)):
        out[name] = next(grads) if t is not None else None
    return out


def update_reference(x, cache, residual, w, bias, activation):
    """(y [N, D], new cache [N, D, W]) of one decode step, float64 on the CPU."""
    N, D, W = cache.shape
    xv = x.detach().cpu().reshape(N, D).to(torch.float64)
    c = torch.cat([cache.detach().cpu().to(torch.float64)[:, :, 1:], xv[:, :, None]], 2)
    z = (c * w.detach().cpu().to(torch.float64)).sum(-1)
    if bias is not None:
        z = z + bias.detach().cpu().to(torch.float64)
    y = z * torch.sigmoid(z) if activation in ("silu", "swish") else z
    if residual is not None:
        y = y + residual.detach().cpu().reshape(N, D).to(torch.float64)
    return y, c


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative L2 error of `a` against the float64 `ref`."""
    a = a.detach().cpu().to(torch.float64)
    return float((a - ref).norm() / ref.norm().clamp_min(1e-300))
