"""kda/006's state-gradient wrapper (`dhu.bwd_dhu`: fla's kernel launched at a fixed BV 64
configuration) against fla 0.6.0's own wrapper, `chunk_gated_delta_rule_bwd_dhu`, on Triton's
CPU interpreter. fla's autotuner is cut to one configuration (BV 32, fla's pick at prod on
the H200), so it launches without benchmarking; everything else of fla's wrapper (its
buffers, argument order, heuristics, chunk offsets, grid) is fla's. Cases: a dense batch
with a ragged last chunk, GVA with a packed batch (length-1 sequences, an initial state and
a final-state gradient), and K 48 (masked key blocks). fla's kernel runs there after
`tests.interpreted.fla_on_the_interpreter()`.

The interpreter test runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.interpreted import run_interpreted

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    r"""
    import json
    import torch
    import triton
    import ladder  # the idea import finder
    from ladder.kernels.kda.ideas.i006 import dhu
    from fla.ops.common import chunk_delta_h as fla_h
    from fla.ops.utils import prepare_chunk_indices

    from tests.interpreted import fla_on_the_interpreter

    fla_on_the_interpreter(trim=False)  # its own single configuration below

    tuner = fla_h.chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64
    while not hasattr(tuner, "configs"):
        tuner = tuner.fn
    tuner.configs = [triton.Config({"BV": 32}, num_warps=4, num_stages=3)]
    assert dhu.BV == 64

    out = {}
    cases = [
        # name, B, T, H, HV, K, V, cu_seqlens, h0, dht
        ("dense-ragged", 2, 100, 1, 1, 128, 128, None, False, False),
        ("gva-varlen-state", 1, 150, 1, 2, 64, 64, [0, 1, 65, 67, 130, 150], True, True),
        ("k48-dense-state", 1, 70, 1, 1, 48, 64, None, True, True),
    ]
    for name, B, T, H, HV, K, V, cu, has_h0, has_dht in cases:
        torch.manual_seed(0)
        N = B if cu is None else len(cu) - 1
        qg = torch.randn(B, T, HV, K) * 0.3
        kg = torch.randn(B, T, HV, K) * 0.3
        w = torch.randn(B, T, HV, K) * 0.3
        gk = -0.1 * torch.rand(B, T, HV, K)
        do = torch.randn(B, T, HV, V)
        dv = torch.randn(B, T, HV, V)
        h0 = torch.randn(N, HV, V, K) if has_h0 else None
        dht = torch.randn(N, HV, V, K) if has_dht else None
        cut = torch.tensor(cu) if cu is not None else None
        ci = prepare_chunk_indices(cut, 64) if cu is not None else None
        want = fla_h.chunk_gated_delta_rule_bwd_dhu(
            q=qg, k=kg, w=w, gk=gk, h0=h0, dht=dht, do=do, dv=dv, scale=K ** -0.5,
            cu_seqlens=cut, chunk_size=64, chunk_indices=ci, state_v_first=True,
        )
        got = dhu.bwd_dhu(qg, kg, w, do, dv, gk, h0, dht, K ** -0.5, cu_seqlens=cut,
                          chunk_indices=ci)
        errs = {}
        for nm, a, b in zip(("dh", "dh0", "dv2"), got, want):
            if b is None:
                assert a is None, (name, nm)
                continue
            assert a.shape == b.shape and a.dtype == b.dtype, (name, nm, a.shape, b.shape)
            assert bool(torch.isfinite(a).all()) and float(b.norm()) > 0, (name, nm)
            errs[nm] = float((a.double() - b.double()).norm() / b.double().norm())
        out[name] = errs
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_dhu_wrapper_matches_flas_own_in_the_interpreter() -> None:
    errs = run_interpreted(SCRIPT)
    assert set(errs) == {"dense-ragged", "gva-varlen-state", "k48-dense-state"}
    assert set(errs["gva-varlen-state"]) == {"dh", "dh0", "dv2"}
    for case, per in errs.items():
        for name, err in per.items():
            # the same kernel in fp32 on the same inputs: only the V tiling differs
            assert err < 1e-6, (case, name, err)


@pytest.mark.slow
def test_the_fixed_launch_fits_an_h200_sm_up_to_its_max_k() -> None:
    """fla's kernel at kda/006's launch (KDA_DHU_* defaults), compiled for sm90 on the CPU
    with the chain's flags: its shared memory fits the H200's 227 KiB per block at K <=
    dhu.MAX_K, and not at K 192, which is why wider K goes to fla's autotuned wrapper (a
    direct launch that does not fit fails with OutOfResources on the GPU)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sys.path.insert(0, str(REPO))
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64
    from ladder.kernels.kda.ideas.i006 import dhu

    import ladder  # noqa: F401  (the idea import finder)

    fn = dhu._jit(chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64)
    pointers = ("q", "k", "w", "g", "gk", "dht", "dh0", "do", "dh", "dv", "dv2",
                "cu_seqlens", "chunk_offsets")  # fmt: skip
    types = {n: "*bf16" for n in pointers} | {"gk": "*fp32", "dht": "*fp32", "dh0": "*fp32",
             "g": "*fp32", "cu_seqlens": "*i64", "chunk_offsets": "*i64", "scale": "fp32",
             "T": "i32"}  # fmt: skip

    def shared(K: int) -> int:
        consts = dict(H=16, HV=16, K=K, V=256, BT=64, BV=dhu.BV, USE_G=False, USE_GK=True,
                      USE_INITIAL_STATE=True, USE_FINAL_STATE_GRADIENT=True,
                      STATE_V_FIRST=True, IS_VARLEN=False)  # fmt: skip
        sig = {n: "constexpr" if n in consts else types[n] for n in fn.arg_names}
        attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in pointers}
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
        try:
            k = triton.compile(
                src, target=GPUTarget("cuda", 90, 32),
                options={"num_warps": dhu.NUM_WARPS, "num_stages": dhu.NUM_STAGES},
            )  # fmt: skip
        except FileNotFoundError as exc:
            pytest.skip(f"this Triton has no sm90 tools: {exc}")
        return k.metadata.shared

    limit = 227 * 1024
    assert shared(dhu.MAX_K) <= limit
    assert shared(192) > limit
