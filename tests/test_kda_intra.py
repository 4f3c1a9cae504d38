"""The kda ideas' backward intra-chunk stages (001, 002, 003, 013, 014, 018) on Triton's CPU
interpreter, against the stage's definition evaluated in float64 with torch (pairwise exp2
over each chunk, no factorisation), and against each other.

Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

# the stage's definition in float64, per chunk of 64 of each sequence, every (i, j) pair with
# j <= i: imported by the scripts below
DEFINITION = textwrap.dedent(
    r"""
    def definition(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, bounds, G):
        # float64, per chunk of 64 of each sequence, every (i, j) pair with j <= i.
        B, T, H, K = q.shape
        HV = g.shape[2]
        f = lambda t: t.to(torch.float64).reshape(B * T, *t.shape[2:])
        q, k = f(q).repeat_interleave(G, 1), f(k).repeat_interleave(G, 1)
        g, beta, dAqk, dAkk = f(g), f(beta), f(dAqk), f(dAkk)
        dq, dk, db, dg = (f(t).clone() for t in (dq, dk, db, dg))
        for s, e in bounds:
            for c in range(s, e, 64):
                r = slice(c, min(c + 64, e))
                n = r.stop - r.start
                gc, qc, kc, bc = g[r], q[r], k[r], beta[r]
                aq, ak = dAqk[r, :, :n], dAkk[r, :, :n]            # [i, HV, j]
                low = torch.tril(torch.ones(n, n, dtype=torch.bool))
                x = gc[:, None] - gc[None, :]                        # [i, j, HV, K]
                # any gate: the pairs j > i (whose exp2 may be inf) are selected away
                E = torch.where(low[:, :, None, None], torch.exp2(x), 0.0)
                aqm = torch.where(low[:, :, None], aq.permute(0, 2, 1), 0.0)[..., None]
                akm = torch.where(low[:, :, None], ak.permute(0, 2, 1), 0.0)[..., None]
                Pq = (aqm * kc[None] * E).sum(1)
                Pk = (akm * kc[None] * E).sum(1)
                dkt = ((aqm * qc[:, None] + akm * (bc[..., None] * kc)[:, None]) * E).sum(0)
                db[r] += (Pk * kc).sum(-1)
                dg[r] += qc * Pq + (bc[..., None] * Pk - dkt) * kc
                dq[r] += Pq
                dk[r] += bc[..., None] * Pk + dkt
        return [t.reshape(B, T, *t.shape[1:]) for t in (dq, dk, db, dg)]

    """
)

SCRIPT = textwrap.dedent(
    r"""
    import torch, json, sys
    import ladder  # installs the idea import finder
    from ladder.kernels.kda.ideas.IDEA import intra
    from fla.ops.utils import prepare_chunk_indices

    DEFINITION
    out = {}
    cases = [
        # name, B, T, H, HV, cu_seqlens, gate depth (log2 units per token), K
        ("dense-deep", 2, 100, 2, 2, None, 12.0, 32),
        ("gva-varlen", 1, 150, 1, 2, [0, 1, 65, 67, 130, 150], 0.5, 32),
        # tens of log2 units per token: every diagonal tile past kda/003's anchored range
        ("dense-deeper", 1, 80, 1, 1, None, 40.0, 32),
        # the same, with a ragged last tile (T = 75) and K in two slices, the second masked
        ("ragged-deeper-k48", 1, 75, 1, 1, None, 40.0, 48),
        ("ragged-k48", 2, 75, 1, 1, None, 1.0, 48),
    ]
    for name, B, T, H, HV, cu, depth, K in cases:
        torch.manual_seed(0)
        q = torch.randn(B, T, H, K).to(torch.bfloat16)
        k = torch.randn(B, T, H, K).to(torch.bfloat16)
        # log2-space cumulative gate per chunk of each sequence: steps of -depth on average
        # (hundreds below zero over 16 tokens for the deep case)
        step = -depth * torch.rand(B, T, HV, K)
        bounds = [(b * T, b * T + T) for b in range(B)] if cu is None else list(zip(cu[:-1], cu[1:]))
        flat = step.reshape(B * T, HV, K)
        g = torch.empty_like(flat)
        for s, e in bounds:
            for c in range(s, e, 64):
                r = slice(c, min(c + 64, e))
                g[r] = flat[r].cumsum(0)
        g = g.reshape(B, T, HV, K)
        beta = torch.rand(B, T, HV).to(torch.bfloat16)
        dAqk = torch.randn(B, T, HV, 64).tril_(0) * 0.1
        dAkk = torch.randn(B, T, HV, 64) * 0.1
        for s, e in bounds:  # strictly lower within each chunk, as the WY stage leaves it
            for c in range(s, e, 64):
                n = min(c + 64, e) - c
                blk = dAkk.view(B * T, HV, 64)[c : c + n, :, :n]
                blk.mul_(torch.tril(torch.ones(n, n), -1)[:, None, :])
                qblk = dAqk.view(B * T, HV, 64)[c : c + n, :, :n]
                qblk.mul_(torch.tril(torch.ones(n, n))[:, None, :])
                dAqk.view(B * T, HV, 64)[c : c + n, :, n:] = 0
                dAkk.view(B * T, HV, 64)[c : c + n, :, n:] = 0
        dq, dk, dg = (torch.randn(B, T, HV, K) for _ in range(3))
        db = torch.randn(B, T, HV)
        cut = torch.tensor(cu) if cu is not None else None
        ci = prepare_chunk_indices(cut, 64) if cu is not None else None
        got = intra.kda_bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=cut,
                                  chunk_indices=ci)
        want = definition(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, bounds, HV // H)
        errs = {}
        for nm, a, b in zip(("dq", "dk", "db", "dg"), got, want):
            assert bool(torch.isfinite(a).all()), (name, nm)
            errs[nm] = float((a.double() - b).norm() / b.norm())
        out[name] = errs
    print(json.dumps(out))
    """
).replace("DEFINITION\n", DEFINITION)


@pytest.mark.slow
@pytest.mark.parametrize("idea", ["i001", "i002", "i003", "i013", "i018"])
def test_intra_stage_matches_its_definition_in_the_interpreter(idea: str) -> None:
    script = SCRIPT.replace("ladder.kernels.kda.ideas.IDEA", f"ladder.kernels.kda.ideas.{idea}")
    errs = run_interpreted(script)
    for case, per in errs.items():
        for name, err in per.items():
            # the interpreter evaluates every product in fp32 (no tf32 rounding), so the stage
            # meets its float64 definition to fp32 accuracy
            assert err < 1e-5, (case, name, err)


SAME_AS_003 = textwrap.dedent(
    r"""
    import torch, json
    import ladder  # installs the idea import finder
    from ladder.kernels.kda.ideas.i003 import intra as i3
    from ladder.kernels.kda.ideas.i013 import intra as i13
    from ladder.kernels.kda.ideas.i014 import intra as i14
    from fla.ops.utils import prepare_chunk_indices

    out = {}
    # name, B, T, H, HV, cu_seqlens, gate depth (log2 units per token), K
    cases = [
        ("dense", 2, 128, 1, 1, None, 0.5, 32),
        ("deep-varlen-gva", 1, 150, 1, 2, [0, 1, 17, 67, 130, 150], 12.0, 48),
        ("deeper-ragged", 1, 75, 1, 1, None, 40.0, 32),
    ]
    for name, B, T, H, HV, cu, depth, K in cases:
        torch.manual_seed(1)
        q = torch.randn(B, T, H, K).to(torch.bfloat16)
        k = torch.randn(B, T, H, K).to(torch.bfloat16)
        g = (-depth * torch.rand(B, T, HV, K)).cumsum(1)  # any non-increasing gate will do
        beta = torch.rand(B, T, HV).to(torch.bfloat16)
        dAqk, dAkk = torch.randn(B, T, HV, 64) * 0.1, torch.randn(B, T, HV, 64) * 0.1
        dq, dk, dg = (torch.randn(B, T, HV, K) for _ in range(3))
        db = torch.randn(B, T, HV)
        cut = torch.tensor(cu) if cu is not None else None
        ci = prepare_chunk_indices(cut, 64) if cu is not None else None
        args = (q, k, g, beta, dAqk, dAkk, dq, dk, db, dg)
        a = i3.kda_bwd_intra(*args, cu_seqlens=cut, chunk_indices=ci)
        b = i13.kda_bwd_intra(*args, cu_seqlens=cut, chunk_indices=ci)
        c = i14.kda_bwd_intra(*args, cu_seqlens=cut, chunk_indices=ci)
        out[name] = [bool(torch.equal(x, y)) for x, y in zip(a, b)]
        out[name] += [bool(torch.equal(x, y)) for x, y in zip(a, c)]
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_intra_013_and_014_are_003_bit_for_bit_in_the_interpreter() -> None:
    # kda/013 sums each sub-chunk's terms in kda/003's order, and kda/014 launches kda/003's
    # kernel (its register cap at the default, 128), so on the interpreter (fp32 products,
    # one order of operations) their four outputs each equal kda/003's exactly
    out = run_interpreted(SAME_AS_003)
    assert out == {name: [True] * 8 for name in out} and len(out) == 3, out


SEGMENTS_018 = textwrap.dedent(
    r"""
    import torch, json
    import ladder  # installs the idea import finder
    from ladder.kernels.kda.ideas.i003 import intra as i3
    from ladder.kernels.kda.ideas.i018 import intra as i18
    from fla.ops.utils import prepare_chunk_indices

    DEFINITION
    def draw(B, T, H, HV, K, g):
        torch.manual_seed(1)
        q = torch.randn(B, T, H, K).to(torch.bfloat16)
        k = torch.randn(B, T, H, K).to(torch.bfloat16)
        beta = torch.rand(B, T, HV).to(torch.bfloat16)
        # the stage reads dA only on and below each chunk's diagonal (the definition too)
        dAqk, dAkk = torch.randn(B, T, HV, 64) * 0.1, torch.randn(B, T, HV, 64) * 0.1
        # incoming gradients 0, so the outputs are the stage's own terms (added to O(1)
        # inputs, their last-bit differences would round away)
        dq, dk, dg = (torch.zeros(B, T, HV, K) for _ in range(3))
        return q, k, g, beta, dAqk, dAkk, dq, dk, torch.zeros(B, T, HV), dg

    out = {}
    # name, B, T, H, HV, cu_seqlens, gate depth (log2 units per token), K
    cases = [
        ("shallow", 2, 64, 1, 1, None, 0.5, 32),
        ("deep-varlen-gva", 1, 150, 1, 2, [0, 1, 17, 67, 130, 150], 24.0, 48),
        # about 10 log2 units a token (20 in the steepest column): 16-row ranges past
        # DIAG_RANGE, segments of about 4 rows (single-row segments can round as the exact
        # loops do)
        ("deeper", 1, 64, 1, 1, None, 20.0, 32),
    ]
    for name, B, T, H, HV, cu, depth, K in cases:
        torch.manual_seed(0)
        g = (-depth * torch.rand(B, T, HV, K)).cumsum(1)
        args = draw(B, T, H, HV, K, g)
        cut = torch.tensor(cu) if cu is not None else None
        ci = prepare_chunk_indices(cut, 64) if cu is not None else None
        a = i3.kda_bwd_intra(*args, cu_seqlens=cut, chunk_indices=ci)
        b = i18.kda_bwd_intra(*args, cu_seqlens=cut, chunk_indices=ci)
        # no tile within DIAG_RANGE and no row within range of its own anchor: every tile
        # queued, and every row of it on the exact loops
        i18.DIAG_RANGE = i18.SEG = -1.0
        c = i18.kda_bwd_intra(*args, cu_seqlens=cut, chunk_indices=ci)
        i18.DIAG_RANGE, i18.SEG = 128.0, 64.0
        bounds = [(b * T, b * T + T) for b in range(B)] if cu is None else list(zip(cu, cu[1:]))
        want = definition(*args, bounds, HV // H)
        out[name] = {
            "same_as_003": [bool(torch.equal(x, y)) for x, y in zip(a, b)],
            "same_as_exact_mode": [bool(torch.equal(x, y)) for x, y in zip(b, c)],
            "exact_mode_err": [float((x.double() - y).norm() / y.norm()) for x, y in zip(c, want)],
        }

    # a cliff in channel 0: a fall of 100 log2 units at row 1 and a climb back at row 2, with
    # channel 1 falling 10 a token (150 over the tile: past DIAG_RANGE, so segments). A
    # segment anchored at row 1 would need row 2's factor 2^100, past the clip at 2^SEG, and
    # one anchored at row 2 column 1's: the rows from 2 on must take the exact loops
    T, K = 16, 32
    g = -0.5 * torch.rand(1, T, 1, K).cumsum(1)
    g[0, :, 0, 0] = torch.tensor([0.0, -100.0] + [-float(i) for i in range(14)])
    g[0, :, 0, 1] = -10.0 * torch.arange(T)
    args = draw(1, T, 1, 1, K, g)
    want = definition(*args, [(0, T)], 1)
    res = {}
    for nm, mod in (("003", i3), ("018", i18)):
        got = mod.kda_bwd_intra(*args)
        res[nm] = [float((x.double() - y).norm() / y.norm()) for x, y in zip(got, want)]
    out["cliff"] = res
    print(json.dumps(out))
    """
).replace("DEFINITION\n", DEFINITION)


@pytest.mark.slow
def test_intra_018_takes_deep_tiles_by_segments_and_rising_ones_exactly() -> None:
    out = run_interpreted(SEGMENTS_018)
    cliff = out.pop("cliff")
    for nm, errs in cliff.items():
        # entries near 2^100 in dq, dk and dg: fp32 accuracy against the float64 definition
        assert all(e < 1e-5 for e in errs), (nm, errs)  # NaN fails too
    assert set(out) == {"shallow", "deep-varlen-gva", "deeper"}, out
    for name, res in out.items():
        # every tile on the exact loops meets the definition to fp32 accuracy
        assert all(e < 1e-5 for e in res["exact_mode_err"]), (name, res)
    # shallow tiles take kda/003's midpoint products, nothing is queued: kda/003's outputs
    # bit for bit; deep ones take the second launch's segments, so dq, dk and dg differ in
    # their rounding from kda/003's in-kernel exact loops and from the exact mode's (the
    # definition test above holds them to fp32 accuracy)
    assert out["shallow"]["same_as_003"] == [True] * 4, out["shallow"]
    for name in ("deep-varlen-gva", "deeper"):
        for key in ("same_as_003", "same_as_exact_mode"):
            same = out[name][key]
            assert same[0] is False and same[1] is False and same[3] is False, (name, key, same)
