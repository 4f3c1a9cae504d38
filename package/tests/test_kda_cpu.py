"""CPU checks of the kda dispatch: the whitelist against fla's live signature, each reason,
the verbatim fallback (a recording stand-in for fla's chunk_kda), fla's own argument errors,
the per-call switches, fla's backend dispatch, and our autograd path through a pure-torch
stand-in for the vendored chain. The vendored kernels are checked on the GPU
(test_kda_gpu.py).

The gate's device check (CUDA, sm90) is the one thing replaced here, by `in_box`, so that a
CPU call inside the box reaches the dispatch; everything after it is the real code.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F

fla_chunk = pytest.importorskip("fla.ops.kda.chunk")

import fla.backends  # noqa: E402
import fla.ops.kda  # noqa: E402
from kernel_fun._common import compat, support  # noqa: E402
from kernel_fun.kda import chunk_kda, is_supported, ops, warmup  # noqa: E402

LAYER_FLAGS = dict(
    use_qk_l2norm_in_kernel=True,
    use_gate_in_kernel=True,
    use_beta_sigmoid_in_kernel=True,
    state_v_first=True,
)


# ------------------------------------------------------------------------------------------
# a pure-torch stand-in for kernel_fun.kda._kernels (the family's entry points)
# ------------------------------------------------------------------------------------------


def _activate(q, k, g, beta, A_log, dt_bias, lower_bound, neg):
    """The layer's in-kernel activations: L2-normalised q, k; the log-space gate; beta."""
    HV, K = g.shape[2], g.shape[3]
    q, k = F.normalize(q, dim=-1, eps=1e-6), F.normalize(k, dim=-1, eps=1e-6)
    x = g + dt_bias.view(HV, K)
    if lower_bound is None:
        gate = -A_log.exp().view(HV, 1) * F.softplus(x)
    else:
        gate = lower_bound * torch.sigmoid(A_log.exp().view(HV, 1) * x)
    return q, k, gate, torch.sigmoid(beta) * (2.0 if neg else 1.0)


def naive_kda(q, k, v, g, beta, A_log, dt_bias, scale, h0, cu, lower_bound, neg):
    """float32 recurrence: o [B, T, HV, V], final states [N, HV, V, K] (V-first layout)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    qa, ka, gate, b = _activate(q, k, g, beta, A_log, dt_bias, lower_bound, neg)
    qa, ka = qa.repeat_interleave(HV // H, 2), ka.repeat_interleave(HV // H, 2)
    bounds = [(i * T, (i + 1) * T) for i in range(B)]
    if cu is not None:
        c = cu.tolist()
        bounds = list(zip(c[:-1], c[1:]))
    flat = [t.reshape(B * T, *t.shape[2:]) for t in (qa, ka, v, gate, b)]
    outs, finals = [], []
    for n, (s, e) in enumerate(bounds):
        S = torch.zeros(HV, K, V) if h0 is None else h0[n].transpose(-1, -2)
        for t in range(s, e):
            qt, kt, vt, gt, bt = (x[t] for x in flat)
            S = S * gt.exp()[..., None]
            S = S + (bt[:, None] * kt)[..., None] * (vt - (kt[..., None] * S).sum(-2))[:, None]
            outs.append(scale * (qt[..., None] * S).sum(-2))
        finals.append(S.transpose(-1, -2))
    return torch.stack(outs).reshape(B, T, HV, V), torch.stack(finals)


class _StandInChain(types.ModuleType):
    """kda_fwd / kda_bwd with the family's signatures; records every call."""

    def __init__(self):
        super().__init__("kernel_fun.kda._kernels")
        self.calls: list[tuple[str, dict]] = []

    def kda_fwd(self, q, k, v, g, beta, A_log, dt_bias, scale, initial_state,
                output_final_state, cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
        self.calls.append(("fwd", dict(scale=scale, safe_gate=safe_gate, device=q.device)))
        inputs = (q, k, v, g, beta, A_log, dt_bias, initial_state)
        with torch.enable_grad():
            leaves = [None if t is None else t.detach().float().requires_grad_() for t in inputs]
            o, ht = naive_kda(*leaves[:7], scale, leaves[7], cu_seqlens, lower_bound,
                              allow_neg_eigval)  # fmt: skip
        # as fla's forward does on the chain's stand-in ctx: the tensors the backward needs,
        # saved with save_for_backward (the package hands them to autograd)
        ctx = types.SimpleNamespace(inputs=inputs, leaves=leaves, o=o, ht=ht,
                                    saved_tensors=inputs)  # fmt: skip
        return o.detach().to(q.dtype), ht.detach() if output_final_state else None, ctx

    def kda_bwd(self, ctx, do, dht):
        self.calls.append(("bwd", {}))
        assert ctx.saved_tensors is not None, "the saved tensors were not handed back"
        assert all(a is None if b is None else a.data_ptr() == b.data_ptr()
                   for a, b in zip(ctx.saved_tensors, ctx.inputs, strict=True))  # fmt: skip
        outs, grads = [ctx.o], [do.float()]
        if dht is not None:
            outs.append(ctx.ht)
            grads.append(dht)
        wrt = [x for x in ctx.leaves if x is not None]
        got = iter(torch.autograd.grad(outs, wrt, grads, allow_unused=True, retain_graph=True))
        res = []
        for t, leaf in zip(ctx.inputs, ctx.leaves, strict=True):
            d = None if leaf is None else next(got)
            res.append(None if d is None else d.to(t.dtype))
        return tuple(res)


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for name in ("KERNEL_FUN_DISABLE", "KERNEL_FUN_KDA_DISABLE", "KERNEL_FUN_DEBUG",
                 "KERNEL_FUN_FALLBACK"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    compat._reset_for_tests()
    support._reset_for_tests()
    yield
    compat._reset_for_tests()
    support._reset_for_tests()


@pytest.fixture
def chain(monkeypatch):
    """The stand-in chain installed as the vendored package (`kernel_fun.kda._kernels`)."""
    mod = _StandInChain()
    monkeypatch.setitem(sys.modules, "kernel_fun.kda._kernels", mod)
    monkeypatch.setattr(ops, "_kernels_mod", False)  # look it up again
    return mod


def _as_if_on(monkeypatch, capability: tuple[int, int]) -> None:
    """The shared device gate sees a CUDA device 0 of `capability` in place of the CPU
    tensor it is given; everything else of kda's device check runs as written."""
    real = support.triton_unsupported_reason

    def on_gpu(t, family, *args):
        fake = types.SimpleNamespace(is_cuda=True, device=types.SimpleNamespace(index=0))
        return real(fake, family, *args)

    monkeypatch.setattr(support, "triton_unsupported_reason", on_gpu)
    # cached like the real probe (the package's test reset clears it)
    monkeypatch.setattr(support, "_capability", functools.cache(lambda index: capability))


@pytest.fixture
def in_box(monkeypatch, chain):
    """The device check passes on the CPU, as on an H200 (stand-in chain installed), and
    the cases still pending GPU verification are taken: the plumbing is tested on all."""
    _as_if_on(monkeypatch, (9, 0))
    monkeypatch.setattr(ops, "PENDING_CASES", {})
    return chain


def test_the_vendored_chain_is_found_and_has_the_entry_points(monkeypatch):
    """The real build: ops finds the vendored package and its entry points (a build whose
    _kernels folder is absent has none). Importing it needs triton, not a GPU."""
    import importlib.util

    monkeypatch.setattr(ops, "_kernels_mod", False)
    if importlib.util.find_spec("kernel_fun.kda._kernels") is None:
        assert ops._kernels() is None
        return
    chain = ops._kernels()
    assert chain is not None
    assert callable(chain.kda_fwd) and callable(chain.kda_bwd)
    import inspect

    fam = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "scale", "initial_state",
           "output_final_state", "cu_seqlens", "lower_bound", "safe_gate", "allow_neg_eigval")  # fmt: skip
    assert tuple(inspect.signature(chain.kda_fwd).parameters) == fam
    assert tuple(inspect.signature(chain.kda_bwd).parameters) == ("ctx", "do", "dht")


def test_a_vendored_chain_that_fails_to_import_sends_calls_to_fla_with_the_error(
    monkeypatch, fla_rec, caplog
):
    """A broken install (the vendored package exists, an import inside it fails): looked up
    once, logged once, and every call goes to fla with the import error as the reason."""
    import importlib

    real = importlib.import_module
    attempts = []

    def broken(name, *a, **kw):
        if name == "kernel_fun.kda._kernels":
            attempts.append(name)
            raise ImportError("cannot import name 'x' from 'kernel_fun.kda._kernels.chain9'")
        return real(name, *a, **kw)

    monkeypatch.setattr(importlib, "import_module", broken)
    monkeypatch.setattr(ops, "_kernels_mod", False)
    monkeypatch.setattr(ops, "_kernels_error", None)
    _as_if_on(monkeypatch, (9, 0))
    tensors, kw = _inputs()
    with caplog.at_level(logging.ERROR, logger="kernel_fun"):
        for _ in range(2):
            ok, reason = is_supported(*tensors, **kw)
            assert not ok and "failed to import" in reason and "chain9" in reason, reason
        chunk_kda(*tensors, **kw)
    assert attempts == ["kernel_fun.kda._kernels"]  # looked up once
    assert len(fla_rec.calls) == 1
    assert sum("failed to import" in r.getMessage() for r in caplog.records) == 1


def test_pending_cases_go_to_fla_with_the_reason(monkeypatch, chain, fla_rec):
    _as_if_on(monkeypatch, (9, 0))
    tensors, kw = _inputs(HV=2)  # H == HV: a dense call, in the box
    assert is_supported(*tensors, **kw) == (True, "supported")
    gva, kw_gva = _inputs()  # HV = 2H: passed its GPU tests, in the box
    assert is_supported(*gva, **kw_gva) == (True, "supported")
    assert is_supported(*tensors, **{**kw, "safe_gate": True, "lower_bound": -5.0})[0]
    cu = torch.tensor([0, 1, 10])
    packed = [t.reshape(1, 10, *t.shape[2:]) for t in tensors]
    assert is_supported(*packed, **{**kw, "cu_seqlens": cu}) == (True, "supported")
    N, HV, V, K = 2, packed[2].shape[2], packed[2].shape[3], packed[0].shape[3]
    h0 = torch.zeros(N, HV, V, K)
    states = ({"output_final_state": True}, {"initial_state": h0})
    for extra in states:  # passed its GPU tests: in the box
        assert is_supported(*packed, **{**kw, "cu_seqlens": cu, **extra})[0]
    assert set(ops.PENDING_CASES) <= {"varlen", "varlen_state", "varlen_int32", "gva",
                                      "lower_bound"}  # fmt: skip
    # int32 offsets (what fla's layer builds from an attention_mask): passed their GPU tests
    for extra in ({}, *states):
        assert is_supported(*packed, **{**kw, "cu_seqlens": cu.to(torch.int32), **extra})[0]
    monkeypatch.setattr(ops, "PENDING_CASES", {"varlen_int32": "int32 cu_seqlens"})
    ok, reason = is_supported(*packed, **{**kw, "cu_seqlens": cu.to(torch.int32)})
    assert not ok and "int32 cu_seqlens" in reason and "GPU tests" in reason, reason
    assert is_supported(*packed, **{**kw, "cu_seqlens": cu})[0]  # int64: not this case
    for bad in (cu.to(torch.int16), cu.float(), cu[None]):
        ok, reason = is_supported(*packed, **{**kw, "cu_seqlens": bad})
        assert not ok and reason == "cu_seqlens must be a 1-D int32 or int64 tensor", reason
    monkeypatch.setattr(ops, "PENDING_CASES", {"varlen_state": "packed sequences with a state"})
    for extra in states:
        ok, reason = is_supported(*packed, **{**kw, "cu_seqlens": cu, **extra})
        assert not ok and "packed sequences" in reason and "GPU tests" in reason, reason
    assert is_supported(*packed, **{**kw, "cu_seqlens": cu})[0]  # no state: not this case
    # every case name the gate knows is honoured when pending
    monkeypatch.setattr(ops, "PENDING_CASES", {"gva": "grouped value heads (HV > H)"})
    ok, reason = is_supported(*gva, **kw_gva)
    assert not ok and "grouped value heads" in reason
    # a pending call reaches fla with the caller's arguments, untouched
    out = chunk_kda(*gva, **kw_gva)
    assert out is fla_rec.result and len(fla_rec.calls) == 1


def test_the_device_gate_takes_sm90_only_unless_allowed(monkeypatch):
    q = torch.zeros(1, 1, 1, 8)
    _as_if_on(monkeypatch, (9, 0))
    assert ops._device_reason(q) is None
    for cap, name in (((10, 0), "sm100"), ((12, 0), "sm120"), ((8, 0), "sm80")):
        _as_if_on(monkeypatch, cap)
        reason = ops._device_reason(q)
        assert reason is not None and name in reason, (cap, reason)
    monkeypatch.setenv("KERNEL_FUN_ALLOW_ARCH", "1")
    _as_if_on(monkeypatch, (10, 0))
    assert ops._device_reason(q) is None


class _Recorder:
    """Stands in for fla's chunk_kda: records each call's arguments, returns a sentinel."""

    def __init__(self):
        self.calls: list[tuple[tuple, dict]] = []
        self.result = (object(), object())

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


@pytest.fixture
def fla_rec(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(compat, "fla_chunk_kda", lambda: rec)
    return rec


def _inputs(B=2, T=5, H=2, HV=4, K=8, V=4, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rnd(*s, dt=dtype):
        return torch.randn(*s, generator=gen).to(dt)

    q, k, v = rnd(B, T, H, K), rnd(B, T, H, K), rnd(B, T, HV, V)
    g, beta = rnd(B, T, HV, K), rnd(B, T, HV)
    A_log = torch.empty(HV).uniform_(1, 16, generator=gen).log()
    dt_bias = rnd(HV * K, dt=torch.float32) * 0.1 - 3.0
    return (q, k, v, g, beta), dict(A_log=A_log, dt_bias=dt_bias, **LAYER_FLAGS)


# ------------------------------------------------------------------------------------------
# the signature and the whitelist
# ------------------------------------------------------------------------------------------


def test_every_fla_parameter_is_classified():
    """A parameter fla adds later fails here until it is classified in FLA_PARAMETERS."""
    fla_params = set(inspect.signature(fla.ops.kda.chunk_kda).parameters)
    assert fla_params == set(ops.FLA_PARAMETERS), (
        f"unclassified: {sorted(fla_params - set(ops.FLA_PARAMETERS))}, "
        f"stale: {sorted(set(ops.FLA_PARAMETERS) - fla_params)}"
    )


def test_signature_matches_fla_exactly():
    ours = inspect.signature(chunk_kda).parameters
    theirs = inspect.signature(fla.ops.kda.chunk_kda).parameters
    assert list(ours) == list(theirs)
    for name, p in theirs.items():
        assert ours[name].kind == p.kind, name
        assert ours[name].default == p.default, name
    assert list(inspect.signature(is_supported).parameters) == list(theirs)
    assert tuple(list(theirs)[:-1]) == compat.CHUNK_KDA_PARAMS


def test_the_layer_call_is_inside_the_box(in_box):
    tensors, kw = _inputs()
    assert is_supported(*tensors, **kw) == (True, "supported")
    h0 = torch.randn(3, 4, 4, 8)
    cu = torch.tensor([0, 1, 4, 10])
    packed = [t.reshape(1, 10, *t.shape[2:]) for t in tensors]
    for extra in (
        dict(initial_state=h0, output_final_state=True, cu_seqlens=cu),
        dict(cu_seqlens=cu),
        dict(safe_gate=True, lower_bound=-5.0),
        dict(safe_gate=True, lower_bound=-0.5, allow_neg_eigval=True),
        dict(chunk_size=64, scale=0.3),
    ):
        assert is_supported(*packed, **{**kw, **extra}) == (True, "supported"), extra


def _out_of_box_cases():
    h0 = torch.zeros(2, 4, 4, 8)
    return [
        ({"use_qk_l2norm_in_kernel": False}, "use_qk_l2norm_in_kernel"),
        ({"use_gate_in_kernel": False}, "use_gate_in_kernel"),
        ({"use_beta_sigmoid_in_kernel": False}, "use_beta_sigmoid_in_kernel"),
        ({"state_v_first": False}, "state_v_first"),
        ({"disable_recompute": True}, "disable_recompute"),
        ({"return_intermediate_states": True}, "return_intermediate_states"),
        ({"cp_context": object()}, "cp_context"),
        ({"use_graph": True}, "use_graph"),
        ({"max_num_seqs": 4}, "max_num_seqs"),
        ({"chunk_size": 32}, "chunk_size"),
        ({"chunk_size": 64.0}, "chunk_size"),
        ({"transpose_state_layout": True, "state_v_first": False}, "transpose_state_layout"),
        ({"some_new_flag": 1}, "some_new_flag"),
        ({"output_final_state": 1}, "output_final_state"),
        ({"allow_neg_eigval": None}, "allow_neg_eigval"),
        ({"scale": torch.tensor(0.5)}, "scale"),
        ({"scale": float("nan")}, "scale"),
        ({"safe_gate": True}, "lower_bound"),
        ({"safe_gate": True, "lower_bound": -6.0}, "lower_bound"),
        ({"safe_gate": True, "lower_bound": 0.0}, "lower_bound"),
        ({"lower_bound": -3.0}, "lower_bound without safe_gate"),
        ({"A_log": None}, "A_log"),
        ({"dt_bias": None}, "dt_bias"),
        ({"A_log": torch.zeros(4, dtype=torch.bfloat16)}, "A_log"),
        ({"dt_bias": torch.zeros(31)}, "dt_bias"),
        ({"initial_state": h0.to(torch.bfloat16)}, "initial_state"),
        ({"initial_state": torch.zeros(2, 4, 8, 4)}, "initial_state"),
        ({"cu_seqlens": torch.tensor([0, 5])}, "B == 1"),
        ({"cu_seqlens_cpu": torch.tensor([0, 5])}, "cu_seqlens_cpu"),
    ]


def test_a_packed_call_with_cu_seqlens_cpu_goes_to_fla(in_box, fla_rec):
    """fla chunks by cu_seqlens_cpu when given, the chain by cu_seqlens: a copy that differs
    (or merely might) must not run the chain, even when it is exact."""
    tensors, kw = _inputs()
    packed = [t.reshape(1, 10, *t.shape[2:]) for t in tensors]
    cu = torch.tensor([0, 1, 4, 10])
    for cpu in (cu.clone(), torch.tensor([0, 3, 10]), torch.tensor([0.0, 10.0])):
        call = {**kw, "cu_seqlens": cu, "cu_seqlens_cpu": cpu}
        ok, reason = is_supported(*packed, **call)
        assert not ok and "cu_seqlens_cpu" in reason, reason
        assert chunk_kda(*packed, **call) is fla_rec.result
    assert in_box.calls == []


@pytest.mark.parametrize("extra, needle", _out_of_box_cases())
def test_each_out_of_box_case_goes_to_fla_with_the_same_arguments(in_box, fla_rec, extra, needle):
    tensors, kw = _inputs()
    call = {**kw, **extra}
    ok, reason = is_supported(*tensors, **call)
    assert not ok and needle in reason, reason
    out = chunk_kda(*tensors, **call)
    assert out is fla_rec.result
    ((args, got),) = fla_rec.calls
    assert args == ()
    want = dict(zip(("q", "k", "v", "g", "beta"), tensors, strict=True))
    want.update({n: p.default for n, p in inspect.signature(chunk_kda).parameters.items()
                 if p.default is not inspect.Parameter.empty})  # fmt: skip
    want.update(call)
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name] is value, name  # the very objects, never copies or conversions
    assert in_box.calls == []


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda t: (t[0].half(), t[1].half(), t[2].half(), t[3].half(), t[4].half()), "float16"),
        (lambda t: (t[0].float(), *t[1:]), "q dtype"),
        (lambda t: (t[0], t[1][:, :, :1], *t[2:]), "k shape"),
        (lambda t: (t[0], t[1], t[2][:, :, :3], t[3][:, :, :3], t[4][:, :, :3]), "multiple of H"),
        (lambda t: (*t[:3], t[3][..., :4], t[4]), "g "),
        (lambda t: (*t[:4], t[4][..., None]), "beta"),
        (lambda t: tuple(x[:, :0] for x in t), "empty"),
        (lambda t: ([1.0], *t[1:]), "not a tensor"),
    ],
    ids=["fp16", "q-fp32", "k-shape", "gva-ratio", "g-shape", "beta-shape", "empty", "list"],
)
def test_shape_and_dtype_reasons(in_box, fla_rec, change, needle):
    tensors, kw = _inputs()
    changed = change(tensors)
    ok, reason = is_supported(*changed, **kw)
    assert not ok and needle in reason, reason
    assert chunk_kda(*changed, **kw) is fla_rec.result


def test_head_size_above_256_goes_to_fla(in_box, fla_rec):
    tensors, kw = _inputs(K=264)
    ok, reason = is_supported(*tensors, **kw)
    assert not ok and "K=264" in reason


def test_value_size_above_512_goes_to_fla(in_box, fla_rec):
    """The WY stage holds a chunk's V in one program and raises beyond 512: such a call must
    go to fla at the gate, not fail in the backward."""
    tensors, kw = _inputs(V=520)
    ok, reason = is_supported(*tensors, **kw)
    assert not ok and "V=520" in reason
    assert chunk_kda(*tensors, **kw) is fla_rec.result
    tensors, kw = _inputs(V=512)
    assert is_supported(*tensors, **kw) == (True, "supported")


def test_cpu_tensors_go_to_fla_with_a_device_reason(fla_rec):
    tensors, kw = _inputs()
    ok, reason = is_supported(*tensors, **kw)
    assert not ok and "not a CUDA device" in reason
    assert chunk_kda(*tensors, **kw) is fla_rec.result


def test_gate_never_raises(in_box):
    tensors, kw = _inputs()

    class Weird:
        def __bool__(self):
            raise RuntimeError("no truth value")

        def __eq__(self, other):
            raise RuntimeError("no equality")

    for extra in ({"chunk_size": Weird()}, {"lower_bound": Weird(), "safe_gate": True},
                  {"cu_seqlens": Weird()}, {"initial_state": Weird()}):  # fmt: skip
        ok, reason = is_supported(*tensors, **{**kw, **extra})
        assert ok is False and reason, extra


# ------------------------------------------------------------------------------------------
# fla's own behaviour on the fallback: its errors, its backend dispatch
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, error",
    [
        ({"safe_gate": True, "lower_bound": -6.0}, ValueError),
        ({"cu_seqlens": torch.tensor([0, 5])}, ValueError),
        ({"chunk_size": 48}, ValueError),
        ({"A_log": None}, ValueError),
        ({"transpose_state_layout": True}, ValueError),  # with state_v_first=True
    ],
    ids=["lower-bound-range", "varlen-batch", "chunk-size", "no-A_log", "both-layouts"],
)
def test_argument_errors_are_fla_s_own(in_box, extra, error):
    tensors, kw = _inputs()
    call = {**kw, **extra}
    with pytest.raises(error) as theirs:
        fla.ops.kda.chunk_kda(*tensors, **call)
    with pytest.raises(error) as ours:
        chunk_kda(*tensors, **call)
    assert str(ours.value) == str(theirs.value)


class _FakeBackend(fla.backends.BaseBackend):
    backend_type = "kf_fake"
    priority = 0
    calls = 0

    def chunk_kda_verifier(self, q, *args, **kwargs):
        return (q.shape[1] == 5, "only T == 5")

    def chunk_kda(self, *args, **kwargs):
        type(self).calls += 1
        return ("from the fake backend", None)


def test_a_call_fla_hands_to_another_backend_goes_to_fla(in_box, monkeypatch):
    registry = fla.backends._function_registries[inspect.unwrap(fla.ops.kda.chunk_kda)]
    monkeypatch.setitem(registry._backends, "kf_fake", _FakeBackend())
    tensors, kw = _inputs()
    ok, reason = is_supported(*tensors, **kw)
    assert not ok and "'kf_fake' backend" in reason
    assert chunk_kda(*tensors, **kw) == ("from the fake backend", None)
    assert in_box.calls == []
    tensors, kw = _inputs(T=6)  # the fake backend declines: ours again
    assert is_supported(*tensors, **kw) == (True, "supported")


# ------------------------------------------------------------------------------------------
# switches, read per call
# ------------------------------------------------------------------------------------------


def test_switches_are_read_per_call(in_box, fla_rec, monkeypatch, caplog):
    tensors, kw = _inputs()
    assert is_supported(*tensors, **kw)[0]
    for name in ("KERNEL_FUN_DISABLE", "KERNEL_FUN_KDA_DISABLE"):
        monkeypatch.setenv(name, "1")
        ok, reason = is_supported(*tensors, **kw)
        assert not ok and "KERNEL_FUN_KDA_DISABLE" in reason
        assert chunk_kda(*tensors, **kw) is fla_rec.result
        monkeypatch.setenv(name, "0")
        assert is_supported(*tensors, **kw)[0]
    monkeypatch.setenv("KERNEL_FUN_DEBUG", "1")
    with caplog.at_level(logging.INFO, logger="kernel_fun"):
        chunk_kda(*tensors, **{**kw, "use_graph": True})
    assert any(r.levelno == logging.WARNING and "use_graph" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def _drop_keyword(fn, name):
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != name]

    def moved(*args, **kwargs):
        raise AssertionError("never called")

    moved.__signature__ = inspect.Signature(params)
    return moved


def test_drift_sends_calls_to_fla_and_warmup_raises(in_box, fla_rec, monkeypatch, caplog):
    import fla.ops.kda.gate as gate

    monkeypatch.setattr(
        gate, "kda_gate_chunk_cumsum", _drop_keyword(gate.kda_gate_chunk_cumsum, "dt_bias")
    )
    tensors, kw = _inputs()
    with caplog.at_level(logging.INFO, logger="kernel_fun"):
        assert chunk_kda(*tensors, **kw) is fla_rec.result
    assert any("kda_gate_chunk_cumsum" in r.getMessage() and r.levelno == logging.ERROR
               for r in caplog.records)  # fmt: skip
    with pytest.raises(compat.FlaDriftError, match="kda_gate_chunk_cumsum"):
        warmup(2, 4, 8, 4)
    monkeypatch.setenv("KERNEL_FUN_FALLBACK", "1")
    assert warmup(2, 4, 8, 4) == 0
    assert chunk_kda(*tensors, **kw) is fla_rec.result
    assert in_box.calls == []


def test_warmup_without_a_gpu_does_nothing():
    assert warmup(2, 4, 8, 4) == 0


# ------------------------------------------------------------------------------------------
# our path, through the stand-in chain
# ------------------------------------------------------------------------------------------


def _leaves(tensors, kw, h0=None):
    ts = [t.detach().clone().requires_grad_() for t in tensors]
    kw = {**kw, "A_log": kw["A_log"].clone().requires_grad_(),
          "dt_bias": kw["dt_bias"].clone().requires_grad_()}  # fmt: skip
    if h0 is not None:
        kw["initial_state"] = h0.clone().requires_grad_()
    return ts, kw


@pytest.mark.parametrize("case", ["dense", "varlen-state", "varlen-state-int32", "lower-bound-neg"])
def test_our_path_runs_the_chain_and_its_gradients(in_box, fla_rec, case):
    tensors, kw = _inputs()
    h0, cu, extra = None, None, {}
    if case.startswith("varlen-state"):
        tensors = tuple(t.reshape(1, 10, *t.shape[2:]) for t in tensors)
        cu = torch.tensor([0, 1, 4, 10], dtype=torch.int32 if case.endswith("int32") else None)
        h0 = torch.randn(3, 4, 4, 8)
        extra = dict(cu_seqlens=cu, output_final_state=True)
    elif case == "lower-bound-neg":
        extra = dict(safe_gate=True, lower_bound=-2.0, allow_neg_eigval=True)
    ts, kwl = _leaves(tensors, kw, h0)
    o, ht = chunk_kda(*ts, **kwl, **extra)
    assert fla_rec.calls == [] and [c[0] for c in in_box.calls] == ["fwd"]
    assert in_box.calls[0][1]["scale"] == pytest.approx(8**-0.5)
    assert o.dtype == torch.bfloat16 and o.shape == tensors[2].shape
    assert (ht is None) == (not case.startswith("varlen-state"))

    # the same recurrence, evaluated directly with autograd on float32 copies
    rs, kwr = _leaves([t.float() for t in tensors], kw, h0)
    o_ref, ht_ref = naive_kda(
        *rs, kwr["A_log"], kwr["dt_bias"], 8**-0.5, kwr.get("initial_state"), cu,
        extra.get("lower_bound"), extra.get("allow_neg_eigval", False),
    )  # fmt: skip
    torch.testing.assert_close(o.float(), o_ref.to(torch.bfloat16).float(), atol=1e-2, rtol=1e-2)
    assert o_ref.abs().max() > 1e-3  # not a vacuous comparison
    do = torch.randn(o.shape)
    outs, refs, grads = [o], [o_ref], [do.to(o.dtype)]
    if ht is not None:
        assert ht.dtype == torch.float32 and ht.shape == h0.shape
        torch.testing.assert_close(ht, ht_ref, atol=1e-4, rtol=1e-4)
        dht = torch.randn(ht.shape)
        outs, refs, grads = outs + [ht], refs + [ht_ref], grads + [dht]
    torch.autograd.backward(outs, grads)
    torch.autograd.backward(refs, [g.float() for g in grads])
    assert [c[0] for c in in_box.calls] == ["fwd", "bwd"]
    mine = [*ts, kwl["A_log"], kwl["dt_bias"]] + ([kwl["initial_state"]] if h0 is not None else [])
    ref = [*rs, kwr["A_log"], kwr["dt_bias"]] + ([kwr["initial_state"]] if h0 is not None else [])
    for name, a, b in zip(
        ("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"), mine, ref
    ):
        assert a.grad is not None and a.grad.dtype == a.dtype, name
        assert b.grad.abs().max() > 0, name
        err = (a.grad.float() - b.grad).norm() / b.grad.norm()
        assert err < 2e-2, (name, float(err))


def test_saved_tensors_are_autograd_s_as_in_fla(in_box):
    """What the chain's forward saves is under autograd's bookkeeping, as with fla's
    Function: hooks see it, an input changed in place before backward raises, and a second
    backward without retain_graph raises."""
    tensors, kw = _inputs()
    ts, kwl = _leaves(tensors, kw)
    packed = []

    def pack(t):
        packed.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        o, _ = chunk_kda(*ts, **kwl)
    assert any(t.data_ptr() == ts[2].data_ptr() for t in packed), "v not saved through autograd"
    o.float().sum().backward()

    ts, kwl = _leaves(tensors, kw)
    o, _ = chunk_kda(*ts, **kwl)  # (no hooks: autograd checks versions only without them)
    with torch.no_grad():
        ts[2].add_(1.0)  # v changed in place after the forward saved it
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        o.float().sum().backward()

    ts, kwl = _leaves(tensors, kw)
    o, _ = chunk_kda(*ts, **kwl)
    o.float().sum().backward(retain_graph=True)
    o.float().sum().backward()  # retained: runs again
    assert [c[0] for c in in_box.calls[-3:]] == ["fwd", "bwd", "bwd"]
    o, _ = chunk_kda(*ts, **kwl)
    o.float().sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        o.float().sum().backward()


def test_unneeded_final_state_gradient_and_no_grad_calls(in_box):
    tensors, kw = _inputs()
    with torch.no_grad():
        o, ht = chunk_kda(*tensors, **kw)
    assert ht is None and not o.requires_grad
    ts, kwl = _leaves(tensors, kw)
    h0 = torch.randn(2, 4, 4, 8)
    o, ht = chunk_kda(*ts, **kwl, initial_state=h0, output_final_state=True)
    o.float().sum().backward()  # ht unused: its gradient is zeros, the chain still runs
    assert all(t.grad is not None for t in ts)


# ------------------------------------------------------------------------------------------
# warmup lengths cover every autotune bucket fla keys on the length
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("B, H, T_max", [(1, 1, 300), (1, 16, 70000), (16, 16, 8192),
                                         (3, 5, 20000), (5000, 32, 7)])  # fmt: skip
def test_warm_lengths_visit_every_l2norm_bucket(B, H, T_max):
    def nb(T):  # fla 0.6.0's l2norm key: cdiv(rows, 2048 * 32), rows = B * T * H
        return math.ceil(B * T * H / (2048 * 32))

    lengths = ops.warm_lengths(B, H, T_max)
    assert lengths == sorted(set(lengths)) and all(1 <= T <= T_max for T in lengths)
    assert {nb(T) for T in lengths} == {nb(T) for T in range(1, T_max + 1)}
    assert len(lengths) <= len({nb(T) for T in range(1, T_max + 1)}) + 2


def test_warm_lengths_refuse_nonsense():
    with pytest.raises(ValueError, match="T_max"):
        ops.warm_lengths(1, 16, 0)


def test_is_supported_says_what_the_call_does_under_fla_drift(in_box, fla_rec, monkeypatch):
    tensors, kw = _inputs()
    monkeypatch.setattr(compat, "engage", lambda family: False)
    ok, reason = is_supported(*tensors, **kw)
    assert not ok and "fla drift" in reason
    chunk_kda(*tensors, **kw)
    assert len(fla_rec.calls) == 1


def test_fallback_reasons_hold_no_argument_contents(in_box, fla_rec, caplog):
    """A reason names an odd argument by its type (a tensor by shape and dtype), never by its
    contents, so calls whose arguments change do not each log a new line, and nothing is
    printed from the GPU."""
    tensors, kw = _inputs()

    class Context:  # an object holding a tensor, as fla's context-parallel context does
        def __init__(self, n):
            self.cu_seqlens = torch.arange(0, 8 + 1000 * n, 7 + n)

        def __repr__(self):
            return f"Context(cu_seqlens={self.cu_seqlens!r})"

    reasons = set()
    with caplog.at_level(logging.INFO, logger="kernel_fun"):
        for n in range(3):
            for extra in (dict(cp_context=Context(n)), dict(scale=torch.full((n + 1,), 0.5))):
                ok, reason = is_supported(*tensors, **{**kw, **extra})
                assert not ok and "tensor(" not in reason and len(reason) < 160, reason
                reasons.add(reason)
                chunk_kda(*tensors, **{**kw, **extra})
    assert reasons == {
        "cp_context=a Context is not supported (only None)",
        "scale=a Tensor of shape (1,) and dtype torch.float32 is not supported (None or a "
        "finite number)",
        "scale=a Tensor of shape (2,) and dtype torch.float32 is not supported (None or a "
        "finite number)",
        "scale=a Tensor of shape (3,) and dtype torch.float32 is not supported (None or a "
        "finite number)",
    }
    assert len(fla_rec.calls) == 6
    assert not any("tensor(" in r.getMessage() for r in caplog.records)
