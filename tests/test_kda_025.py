"""kda/025 (saved-gate-cumsum) on Triton's CPU interpreter: its forward keeps the gate cumsum
and its backward takes it from there, so a forward+backward runs the gate stage once where
kda/024's runs it twice, and computes kda/024's outputs bit for bit.

The gate stage's calls are counted by passing each chain a ``Stages`` whose ``gate_cumsum``
counts them; the entry points (``kda_fwd`` / ``kda_bwd``, the family's contract) are compared
with kda/024's. K above kda/019's ``fwd.MAX_K`` runs fla's forward in both chains, which keeps
no gate cumsum of ours: there kda/025's backward computes it as kda/024's does. fp32 inputs
(the interpreter's bf16 products are wrong, tests/test_kda_wy.py). Runs in a subprocess
(`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import dataclasses, importlib, json
    import torch
    import ladder  # the idea import finder
    import fla.ops.kda  # noqa: F401
    from tests.interpreted import fla_on_the_interpreter, kda_chain_inputs, without_cuda_device

    fla_on_the_interpreter()
    without_cuda_device()

    k24 = importlib.import_module("ladder.kernels.kda.ideas.i024.kernel")
    k25 = importlib.import_module("ladder.kernels.kda.ideas.i025.kernel")
    cases = [
        # name, B, H, HV, lengths, K, h0 and final state, lower bound (safe gate)
        ("dense", 2, 1, 1, [100, 100], 32, False, None),
        ("gva", 1, 1, 2, [70], 32, False, None),
        ("varlen-state", 1, 1, 1, [1, 40, 2, 87], 32, True, None),
        ("lower-bound", 1, 1, 1, [130], 32, True, -5.0),
        ("k-above-max", 1, 1, 1, [40], 192, False, None),
    ]
    V = 32
    out = {}
    for name, B, H, HV, lens, K, st, lb in cases:
        args, do, dht = kda_chain_inputs(B, H, HV, lens, K, V, st, lb)
        res, gate_calls, saved = {}, {}, {}
        for idea, m in (("024", k24), ("025", k25)):
            o, ht, ctx = m.kda_fwd(*args)
            res[idea] = [o, ht, *m.kda_bwd(ctx, do, dht)]
            saved[idea] = bool(getattr(ctx, "gc_saved", False))
            calls = []
            def counted(*a, _calls=calls, **kw):
                _calls.append(1)
                return k24.STAGES.gate_cumsum(*a, **kw)
            stg = dataclasses.replace(m.STAGES, gate_cumsum=counted)
            _, _, ctx = m.kda_fwd_chain(*args, stg)
            fwd_calls = len(calls)
            m.kda_bwd_chain(ctx, do, dht, stg)
            gate_calls[idea] = [fwd_calls, len(calls) - fwd_calls]
        same = [a is None and b is None or (a is not None and b is not None and bool(torch.equal(a, b)))
                for a, b in zip(res["024"], res["025"])]
        out[name] = {"equal": all(same), "gate_calls": gate_calls, "gc_saved": saved,
                     "n_outputs": len(same)}
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_025_runs_the_gate_stage_once_and_computes_024s_chain() -> None:
    out = run_interpreted(SCRIPT)
    assert set(out) == {"dense", "gva", "varlen-state", "lower-bound", "k-above-max"}
    for case, r in out.items():
        assert r["n_outputs"] == 10, (case, r)  # o, final state and the eight gradients
        assert r["equal"], case  # the same kernels on the same operands, bit for bit
        if case == "k-above-max":  # fla's forward: nothing of ours to keep
            assert r["gc_saved"] == {"024": False, "025": False}, r
            assert r["gate_calls"] == {"024": [0, 1], "025": [0, 1]}, r
        else:
            assert r["gc_saved"] == {"024": False, "025": True}, (case, r)
            assert r["gate_calls"] == {"024": [1, 1], "025": [1, 0]}, (case, r)


def test_025_refuses_a_forward_whose_g_cumsum_slot_is_taken(monkeypatch) -> None:
    """kda/025 writes the gate cumsum into the slot kda/024's forward leaves empty; were that
    slot ever filled, it raises instead of dropping what is there."""
    import dataclasses
    import types

    from ladder.kernels.kda.ideas.i024 import kernel as k24
    from ladder.kernels.kda.ideas.i025 import kernel as k25

    class Ctx(types.SimpleNamespace):
        def save_for_backward(self, *tensors):
            self.saved_tensors = tensors

    def fake_chain(*args):
        st = args[-1]
        st.gate_cumsum("g")
        ctx = Ctx()
        ctx.save_for_backward(*(["taken" if i == k25.G_CUMSUM_SLOT else None for i in range(23)]))
        return "o", None, ctx

    monkeypatch.setattr(k24, "kda_fwd_chain", fake_chain)
    stages = dataclasses.replace(k24.STAGES, gate_cumsum=lambda *a, **kw: "gc")
    with pytest.raises(RuntimeError, match="g_cumsum slot"):
        k25.kda_fwd_chain(*([None] * 14), stages)


def test_025s_cases_are_024s() -> None:
    from ladder.kernels.kda.ideas.i024 import kernel as k24
    from ladder.kernels.kda.ideas.i025 import kernel as k25

    assert k25.CASES == k24.CASES
