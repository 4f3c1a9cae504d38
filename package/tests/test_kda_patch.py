"""CPU checks of patch_fla / unpatch_fla / patched_fla for family kda, alone and with cconv,
against the installed fla, and of the kda rows of the compat table.

The guarantees of _patch.py (atomic, idempotent, exact, loud) are checked for kda here; the
cconv ones are in test_patch.py. A real KimiDeltaAttention, called while patched, goes
through kernel_fun.kda and returns bit for bit what fla returns: fla's Triton kernels cannot
run on a CPU, so fla's ChunkKDAFunction and the layer's gated RMSNorm are swapped for torch
stand-ins (the same in both runs); the routing is what is under test.
"""

from __future__ import annotations

import logging
import sys
import types

import pytest
import torch
import torch.nn.functional as F

fla_chunk = pytest.importorskip("fla.ops.kda.chunk")

import fla  # noqa: E402
import fla.layers.kda as fla_layer  # noqa: E402
import fla.modules.causal_conv1d.ops as conv_ops  # noqa: E402
import fla.ops.kda  # noqa: E402
import fla.ops.kda.chunk_intra as fla_intra  # noqa: E402
import kernel_fun  # noqa: E402
import kernel_fun.cconv  # noqa: E402
import kernel_fun.kda  # noqa: E402
from kernel_fun._common import compat, support  # noqa: E402
from kernel_fun._patch import (  # noqa: E402
    PatchError,
    is_patched,
    patch_fla,
    patched_fla,
    patched_sites,
    unpatch_fla,
)

ORIGINAL = fla.ops.kda.chunk_kda
REPLACEMENT = kernel_fun.kda.chunk_kda
CONV_ORIGINAL = conv_ops.causal_conv1d
REQUIRED = (
    "fla.ops.kda.chunk.chunk_kda",
    "fla.ops.kda.chunk_kda",
    "fla.layers.kda.chunk_kda",
)


def _holders(obj) -> set[str]:
    out = set()
    for name, mod in list(sys.modules.items()):
        if not (name == "fla" or name.startswith("fla.")) or not isinstance(mod, types.ModuleType):
            continue
        for attr, value in list(vars(mod).items()):
            if value is obj:
                out.add(f"{mod.__name__}.{attr}")
    return out


@pytest.fixture(autouse=True)
def _clean_state():
    assert not is_patched("kda") and not is_patched("cconv")
    before = _holders(ORIGINAL)
    assert set(REQUIRED) <= before, "fla 0.6.0 layout expected by these tests"
    yield before
    unpatch_fla()
    assert _holders(REPLACEMENT) == set()
    assert _holders(ORIGINAL) == before


def test_patch_kda_alone_swaps_every_holder_and_leaves_cconv(_clean_state):
    result = patch_fla("kda")
    assert set(result) == {"kda"} and set(result["kda"]) == _clean_state
    assert _holders(REPLACEMENT) == _clean_state and _holders(ORIGINAL) == set()
    # the object KimiDeltaAttention.forward reads when it runs
    assert fla_layer.KimiDeltaAttention.forward.__globals__["chunk_kda"] is REPLACEMENT
    assert conv_ops.causal_conv1d is CONV_ORIGINAL and not is_patched("cconv")
    assert is_patched("kda") and set(patched_sites("kda")) == _clean_state
    # the fallback still reaches fla's own function, not the replacement
    assert compat.fla_chunk_kda() is ORIGINAL
    restored = unpatch_fla("kda")
    assert set(restored["kda"]) == _clean_state
    assert fla_layer.chunk_kda is ORIGINAL and fla.ops.kda.chunk_kda is ORIGINAL


def test_patch_without_arguments_patches_both_families(_clean_state):
    result = patch_fla()
    assert set(result) == {"cconv", "kda"}
    assert fla_layer.chunk_kda is REPLACEMENT
    assert conv_ops.causal_conv1d is kernel_fun.cconv.causal_conv1d
    unpatch_fla("cconv")
    assert is_patched("kda") and conv_ops.causal_conv1d is CONV_ORIGINAL
    unpatch_fla()
    assert fla_layer.chunk_kda is ORIGINAL


def test_patch_twice_is_a_noop(_clean_state):
    first = patch_fla("kda")
    again = patch_fla(["kda", "kda"])
    assert again == first
    assert _holders(REPLACEMENT) == _clean_state
    assert unpatch_fla("kda")["kda"]
    assert unpatch_fla("kda") == {}


def test_context_manager_restores_on_exception_and_nests(_clean_state):
    with pytest.raises(RuntimeError, match="inside"):
        with patched_fla("kda"):
            assert fla_layer.chunk_kda is REPLACEMENT
            raise RuntimeError("inside")
    assert fla_layer.chunk_kda is ORIGINAL
    patch_fla("kda")
    with patched_fla():
        pass
    assert fla_layer.chunk_kda is REPLACEMENT and not is_patched("cconv")


def _other(*args, **kwargs):
    raise AssertionError("never called")


def _forward_without_kda(self, hidden_states, **kwargs):
    return hidden_states, None, None


@pytest.mark.parametrize(
    "break_fla, needle",
    [
        (lambda mp: mp.delattr(fla.ops.kda, "chunk_kda"), "fla.ops.kda.chunk_kda is missing"),
        (lambda mp: mp.delattr(fla_layer, "chunk_kda"), "fla.layers.kda.chunk_kda is missing"),
        (
            lambda mp: mp.setattr(fla.ops.kda, "chunk_kda", _other),
            "fla.ops.kda.chunk_kda is not the function KimiDeltaAttention calls",
        ),
        (
            lambda mp: mp.setattr(fla_layer.KimiDeltaAttention, "forward", _forward_without_kda),
            "does not look `chunk_kda` up",
        ),
        (
            lambda mp: mp.delattr(fla_layer, "KimiDeltaAttention"),
            "KimiDeltaAttention is missing",
        ),
    ],
    ids=["public-missing", "home-missing", "public-differs", "forward-changed", "no-layer"],
)
def test_refusal_patches_nothing_of_any_family(_clean_state, monkeypatch, break_fla, needle):
    break_fla(monkeypatch)
    holders = _holders(ORIGINAL)
    with pytest.raises(PatchError) as info:
        patch_fla()  # both families: the kda refusal must roll back cconv too
    assert needle in str(info.value) and f"fla {fla.__version__}" in str(info.value)
    assert "kernel_fun.kda.chunk_kda directly" in str(info.value)
    assert not is_patched("kda") and not is_patched("cconv")
    assert _holders(ORIGINAL) == holders
    assert conv_ops.causal_conv1d is CONV_ORIGINAL


class _ReadOnlyModule(types.ModuleType):
    def __setattr__(self, name, value):
        raise AttributeError(f"{self.__name__} is read-only")


def test_failure_while_replacing_rolls_back(_clean_state, monkeypatch):
    probe = _ReadOnlyModule("fla.zz_read_only_kda")
    vars(probe)["chunk_kda"] = ORIGINAL
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    with pytest.raises(PatchError, match=r"setting fla\.zz_read_only_kda\.chunk_kda failed"):
        patch_fla()
    assert not is_patched("kda") and not is_patched("cconv")
    assert _holders(REPLACEMENT) == set()
    assert conv_ops.causal_conv1d is CONV_ORIGINAL


def test_modules_imported_while_patched_are_restored(_clean_state, monkeypatch):
    patch_fla("kda")
    late = types.ModuleType("fla.zz_kda_imported_while_patched")
    late.chunk_kda = fla.ops.kda.chunk_kda
    monkeypatch.setitem(sys.modules, late.__name__, late)
    restored = unpatch_fla("kda")
    assert "fla.zz_kda_imported_while_patched.chunk_kda" in restored["kda"]
    assert late.chunk_kda is ORIGINAL


def test_patch_is_logged_at_info(_clean_state, caplog):
    with caplog.at_level(logging.INFO, logger="kernel_fun._patch"):
        patch_fla("kda")
        unpatch_fla("kda")
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "kernel_fun._patch")
    assert f"patched fla {fla.__version__} chunk_kda -> kernel_fun.kda.ops.chunk_kda" in text
    for name in REQUIRED:
        assert name in text
    assert "unpatched kda" in text


# ------------------------------------------------------------------------------------------
# a real KimiDeltaAttention, while patched
# ------------------------------------------------------------------------------------------


def _torch_chunk_kda_function(q, k, v, g, beta, A_log, dt_bias, scale, h0, output_final_state,
                              l2norm, gate_in, beta_sigmoid, neg, *rest):  # fmt: skip
    """Stands in for fla's ChunkKDAFunction.apply (Triton, GPU only): a linear-attention
    recurrence with the same activations, in torch. Used identically in both runs."""
    HV, K = g.shape[2], g.shape[3]
    q, k = F.normalize(q.float(), dim=-1), F.normalize(k.float(), dim=-1)
    gate = -A_log.exp().view(HV, 1) * F.softplus(g.float() + dt_bias.view(HV, K))
    b = torch.sigmoid(beta.float())
    G = HV // q.shape[2]
    q, k = q.repeat_interleave(G, 2), k.repeat_interleave(G, 2)
    S = q.new_zeros(q.shape[0], HV, K, v.shape[-1])
    outs = []
    for t in range(q.shape[1]):
        S = (
            S * gate[:, t].exp()[..., None]
            + (b[:, t, :, None] * k[:, t])[..., None] * v[:, t, :, None].float()
        )
        outs.append(scale * (q[:, t, ..., None] * S).sum(-2))
    return torch.stack(outs, 1).to(v.dtype), None


def _torch_norm(self, x, g, residual=None, prenorm=False):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
    return y * torch.sigmoid(g)


def _run(layer, x):
    calls: set[str] = set()

    def profiler(frame, event, arg):
        if event == "call":
            calls.add(f"{frame.f_globals.get('__name__', '')}.{frame.f_code.co_name}")

    layer.zero_grad(set_to_none=True)
    xg = x.detach().clone().requires_grad_(True)
    sys.setprofile(profiler)
    try:
        y = layer(xg)[0]
    finally:
        sys.setprofile(None)
    y.backward(torch.linspace(-1, 1, y.numel()).reshape(y.shape))
    return y.detach(), xg.grad, layer.A_log.grad.clone(), calls


def test_kimi_delta_attention_goes_through_kernel_fun_and_matches_fla(monkeypatch):
    monkeypatch.setattr(
        fla_chunk, "ChunkKDAFunction", types.SimpleNamespace(apply=_torch_chunk_kda_function)
    )
    torch.manual_seed(0)
    layer = fla_layer.KimiDeltaAttention(
        hidden_size=32, num_heads=2, head_dim=16, use_short_conv=False, mode="chunk"
    )
    monkeypatch.setattr(type(layer.o_norm), "forward", _torch_norm)
    x = torch.randn(2, 7, 32)
    y0, dx0, dA0, calls0 = _run(layer, x)
    assert "kernel_fun.kda.ops.chunk_kda" not in calls0
    assert "fla.ops.kda.chunk.chunk_kda" in calls0
    with patched_fla("kda"):
        y1, dx1, dA1, calls1 = _run(layer, x)
    # through kernel_fun (a CPU fp32 call: fla's own function, verbatim, behind it)
    assert "kernel_fun.kda.ops.chunk_kda" in calls1
    assert "fla.ops.kda.chunk.chunk_kda" in calls1
    assert torch.equal(y0, y1) and torch.equal(dx0, dx1) and torch.equal(dA0, dA1)
    assert y0.abs().sum() > 0 and dA0.abs().sum() > 0


# ------------------------------------------------------------------------------------------
# the kda rows of the compat table
# ------------------------------------------------------------------------------------------


@pytest.fixture
def _fresh_compat(monkeypatch):
    monkeypatch.delenv("KERNEL_FUN_FALLBACK", raising=False)
    compat._reset_for_tests()
    support._reset_for_tests()
    yield
    compat._reset_for_tests()
    support._reset_for_tests()


KDA_CHAIN = (
    "kda_gate_chunk_cumsum", "recompute_w_u_fwd", "chunk_gated_delta_rule_fwd_h",
    "chunk_gated_delta_rule_bwd_dhu",
    "chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64",
    "prepare_chunk_indices", "prepare_chunk_offsets",
    "fused_beta_sigmoid_bwd", "l2norm_fwd",
    "fused_beta_sigmoid", "chunk_kda_fwd_intra", "chunk_gla_fwd_o_gk",
    "chunk_kda_fwd_kernel_inter_solve_fused", "l2norm_fwd_kernel", "l2norm_bwd_kernel",
    "kda_gate_chunk_cumsum_vector_kernel", "recompute_w_u_fwd_kda_kernel",
    "chunk_kda_bwd_kernel_dAv", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
)  # fmt: skip


def test_every_fla_name_the_vendored_chain_imports_has_a_compat_row():
    import ast
    from pathlib import Path

    import kernel_fun.kda as kda_pkg

    folder = Path(kda_pkg.__file__).parent / "_kernels"
    if not folder.is_dir():
        pytest.skip("this build has no vendored kda kernels")
    imported = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fla":
                imported |= {(node.module, a.name) for a in node.names}
    assert imported, "the vendored chain calls no fla stage: the scan is broken"
    rows = {(m, s.name) for s in compat.FLA_SYMBOLS if s.family == "kda" for m in s.modules}
    assert imported <= rows, sorted(imported - rows)
    # and every chain row is a name the chain imports: a row it no longer calls would only
    # turn a harmless change in fla into drift
    chain_rows = {s.name for s in compat.FLA_SYMBOLS if s.family == "kda" and s.key in KDA_CHAIN}
    assert chain_rows == {name for _, name in imported}, chain_rows ^ {n for _, n in imported}


def test_kda_rows_resolve_against_the_installed_fla(_fresh_compat):
    probe = compat.probe_fla("kda")
    assert probe.problems == []
    keys = {s.key for s in compat.FLA_SYMBOLS if s.family == "kda"}
    assert set(KDA_CHAIN) | {"chunk_kda", "kda.chunk_kda", "KimiDeltaAttention"} <= keys
    assert set(probe.resolved) == keys
    assert compat.check_fla("kda") is True
    assert compat.fla_symbol("chunk_kda") is fla_chunk.chunk_kda
    assert compat.fla_symbol("chunk_kda_fwd_intra") is fla_intra.chunk_kda_fwd_intra
    # every keyword a row lists is a named parameter of fla's function
    for sym in compat.FLA_SYMBOLS:
        if sym.family == "kda" and sym.keywords:
            params = compat._parameters(compat.fla_symbol(sym.key))
            assert set(sym.keywords) <= {p.name for p in params}, sym.key


@pytest.mark.parametrize("key", KDA_CHAIN)
def test_a_moved_chain_symbol_is_drift_for_kda_only(_fresh_compat, monkeypatch, key):
    sym = next(s for s in compat.FLA_SYMBOLS if s.key == key)
    for path in sym.modules:
        mod = sys.modules.get(path) or __import__(path, fromlist=["_"])
        if hasattr(mod, sym.name):
            monkeypatch.delattr(mod, sym.name)
    with pytest.raises(compat.FlaDriftError, match=sym.name):
        compat.check_fla("kda")
    assert compat.check_fla("cconv") is True  # another family is not stopped by it


def test_a_renamed_keyword_is_drift(_fresh_compat, monkeypatch):
    row = next(s for s in compat.FLA_SYMBOLS if s.key == "chunk_gated_delta_rule_bwd_dhu")

    def renamed(q, k, w, gk, initial_state, dht, do, dv, scale, cu_seqlens, chunk_size,
                chunk_indices, state_v_first, **kwargs):  # fmt: skip
        raise AssertionError("never called")

    monkeypatch.setattr(sys.modules[row.modules[0]], row.name, renamed)
    with pytest.raises(compat.FlaDriftError, match=r"no longer accepts \['h0'\]"):
        compat.check_fla("kda")
    monkeypatch.setenv("KERNEL_FUN_FALLBACK", "1")
    assert compat.check_fla("kda") is False
