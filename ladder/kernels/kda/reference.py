"""The kda oracle: KDA's token recurrence in float64, forward and backward by hand.

With the layer's flags (q and k L2-normalised, the gate and beta activated inside the op,
state_v_first), for every sequence and value head:

    q_t <- q_t / sqrt(|q_t|^2 + 1e-6),  k_t likewise              (fla's l2norm, eps 1e-6)
    beta_t = sigmoid(b_t)            (2 * sigmoid(b_t) with allow_neg_eigval)
    gate_t = -exp(A_log) * softplus(g_t + dt_bias)                 (softplus form)
           = lower_bound * sigmoid(exp(A_log) * (g_t + dt_bias))   (lower-bound form)
    S_t = (I - beta_t k_t k_t^T) diag(exp(gate_t)) S_{t-1} + beta_t k_t v_t^T   [K, V]
    o_t = scale * S_t^T q_t

GVA: value head hv reads q/k head hv // (HV // H). A packed batch (cu_seqlens) is run as a
padded batch of its sequences: padding steps have k = 0, beta = 0 and gate = 0, so they leave
the state unchanged and the final state is the state after each sequence's last token.

The activations go through torch autograd in float64; the recurrence's backward is the
adjoint recurrence written out (dS flows from t to t-1), with the forward recomputed from
checkpoints every CHECKPOINT steps, so memory stays at a few states per step. Nothing here
shares code or rounding with fla: it is the definition, evaluated in float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["CHECKPOINT", "activate", "recurrence_bwd", "recurrence_fwd"]

CHECKPOINT = 64


def activate(q, k, g, beta, A_log, dt_bias, *, lower_bound, allow_neg_eigval):
    """float64 (q_hat, k_hat, gate, beta_act) from the raw inputs, differentiable.

    q, k: [..., H, K]; g: [..., HV, K]; beta: [..., HV]; A_log: [HV] or None (lower-bound form
    only); dt_bias: [HV * K] or None.
    """
    q, k, g, beta = (t.to(torch.float64) for t in (q, k, g, beta))
    qh = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    kh = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    HV, K = g.shape[-2], g.shape[-1]
    x = g + dt_bias.to(torch.float64).view(HV, K) if dt_bias is not None else g
    if lower_bound is None:
        gate = -A_log.to(torch.float64).exp().view(HV, 1) * F.softplus(x)
    else:
        if A_log is not None:
            x = A_log.to(torch.float64).exp().view(HV, 1) * x
        gate = lower_bound * torch.sigmoid(x)
    b = torch.sigmoid(beta) * (2.0 if allow_neg_eigval else 1.0)
    return qh, kh, gate, b


def _step(S, k, v, a, b):
    """One recurrence step: (S', u, S_t) from S_{t-1}; a = exp(gate)."""
    Sp = a.unsqueeze(-1) * S
    u = v - torch.einsum("nhk,nhkv->nhv", k, Sp)
    St = Sp + (b.unsqueeze(-1) * k).unsqueeze(-1) * u.unsqueeze(-2)
    return Sp, u, St


def recurrence_fwd(q, k, v, gate, b, scale, S0):
    """o [N, L, HV, V] and (S_L, checkpoints) for q, k, gate [N, L, HV, K], v [N, L, HV, V],
    b [N, L, HV], S0 [N, HV, K, V], all float64 (q, k already expanded to HV heads)."""
    N, L = q.shape[:2]
    S = S0.clone()
    o = torch.empty(v.shape, dtype=torch.float64, device=v.device)
    a = gate.exp()
    ckpts = []
    for t in range(L):
        if t % CHECKPOINT == 0:
            ckpts.append(S)
        _, _, S = _step(S, k[:, t], v[:, t], a[:, t], b[:, t])
        o[:, t] = scale * torch.einsum("nhk,nhkv->nhv", q[:, t], S)
    return o, S, ckpts


def recurrence_bwd(q, k, v, gate, b, scale, ckpts, do, dST):
    """Gradients (dq, dk, dv, dgate, db, dS0) of the recurrence, for upstream do
    [N, L, HV, V] and dST [N, HV, K, V] (the final state's gradient)."""
    N, L = q.shape[:2]
    a = gate.exp()
    dq, dk = torch.zeros_like(q), torch.zeros_like(k)
    dv, dgate, db = torch.zeros_like(v), torch.zeros_like(gate), torch.zeros_like(b)
    dS = dST.clone()
    for c in reversed(range(len(ckpts))):
        t0, t1 = c * CHECKPOINT, min(L, (c + 1) * CHECKPOINT)
        states = [ckpts[c]]
        for t in range(t0, t1 - 1):
            states.append(_step(states[-1], k[:, t], v[:, t], a[:, t], b[:, t])[2])
        for t in reversed(range(t0, t1)):
            S_prev = states[t - t0]
            kt, bt = k[:, t], b[:, t]
            Sp, u, St = _step(S_prev, kt, v[:, t], a[:, t], bt)
            dS = dS + scale * q[:, t].unsqueeze(-1) * do[:, t].unsqueeze(-2)
            dq[:, t] = scale * torch.einsum("nhkv,nhv->nhk", St, do[:, t])
            du = bt.unsqueeze(-1) * torch.einsum("nhkv,nhk->nhv", dS, kt)
            dSu = torch.einsum("nhkv,nhv->nhk", dS, u)
            dk_t = bt.unsqueeze(-1) * dSu
            db[:, t] = (kt * dSu).sum(-1)
            dSp = dS - kt.unsqueeze(-1) * du.unsqueeze(-2)
            dv[:, t] = du
            dk_t = dk_t - torch.einsum("nhkv,nhv->nhk", Sp, du)
            dk[:, t] = dk_t
            dgate[:, t] = (dSp * Sp).sum(-1)
            dS = a[:, t].unsqueeze(-1) * dSp
    return dq, dk, dv, dgate, db, dS
