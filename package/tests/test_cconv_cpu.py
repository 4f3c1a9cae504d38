"""CPU checks of the cconv dispatch: the whitelist, the reasons, the per-call switches and the
verbatim fallback. The kernels themselves are checked on the GPU (test_cconv_gpu.py)."""

from __future__ import annotations

import inspect

import pytest
import torch

fla_ops = pytest.importorskip("fla.modules.causal_conv1d.ops")

from kernel_fun.cconv import (  # noqa: E402
    causal_conv1d,
    is_supported,
    ops,  # noqa: E402
)


def _inputs(B=2, T=8, D=16, W=4, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, D, generator=g).to(dtype)
    w = torch.randn(D, W, generator=g)
    return x, w


def test_every_fla_parameter_is_classified():
    """A parameter fla adds later fails here until it is classified in FLA_PARAMETERS."""
    fla_params = set(inspect.signature(fla_ops.causal_conv1d).parameters)
    assert fla_params == set(ops.FLA_PARAMETERS), (
        f"unclassified: {sorted(fla_params - set(ops.FLA_PARAMETERS))}, "
        f"stale: {sorted(set(ops.FLA_PARAMETERS) - fla_params)}"
    )


def test_signature_matches_fla_exactly():
    ours = inspect.signature(causal_conv1d).parameters
    theirs = inspect.signature(fla_ops.causal_conv1d).parameters
    assert list(ours) == list(theirs)
    for name, p in theirs.items():
        assert ours[name].kind == p.kind, name
        assert ours[name].default == p.default, name
    # is_supported takes exactly the same arguments
    assert list(inspect.signature(is_supported).parameters) == list(theirs)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"cp_context": object()}, "cp_context"),
        ({"activation": "gelu"}, "activation"),
        ({"backend": "cuda"}, "backend"),
        ({"backend": "mix"}, "backend"),
        ({"seq_idx": torch.zeros(2, 8)}, "seq_idx"),
        ({"some_future_flag": 1}, "some_future_flag"),
        ({"output_final_state": torch.tensor([True, False])}, "output_final_state"),
        ({"output_final_state": 1}, "output_final_state"),
        ({"activation": ["silu"]}, "activation"),
        ({"backend": torch.tensor([1, 2])}, "backend"),
    ],
)
def test_each_unsupported_flag_has_its_reason(kwargs, needle):
    """Flags refused before the device is looked at (the case flags of the supported box are
    checked in test_cconv_box_cpu.py, with the device gate passed)."""
    x, w = _inputs()
    args = {"activation": "silu", **kwargs}
    ok, reason = is_supported(x, w, **args)
    assert not ok
    assert needle in reason


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: (torch.randn(2, 8, 16).double(), torch.randn(16, 4)), "dtype"),  # fp64 x
        (lambda: (torch.randn(8, 16).bfloat16(), torch.randn(16, 4)), "[B, T, D]"),
        (lambda: (torch.randn(2, 8, 16).bfloat16(), torch.randn(16, 5)), "W=5"),
        (lambda: (torch.randn(2, 8, 16).bfloat16(), torch.randn(12, 4)), "[D, W]"),
        (lambda: (torch.randn(2, 8, 16).bfloat16(), torch.randn(16)), "[D, W]"),
        (lambda: (torch.randn(2, 8, 16).bfloat16(), torch.ones(16, 4, dtype=torch.int32)), "float"),
        (lambda: (torch.randn(2, 8, 16).bfloat16(), torch.randn(16, 4)), "CUDA"),
    ],
)
def test_shape_dtype_device_reasons(make, needle):
    x, w = make()
    ok, reason = is_supported(x, w, activation="silu")
    assert not ok
    assert needle in reason, reason


def test_switches_are_read_per_call(monkeypatch):
    x, w = _inputs()
    monkeypatch.delenv("KERNEL_FUN_DISABLE", raising=False)
    monkeypatch.delenv("KERNEL_FUN_CCONV_DISABLE", raising=False)
    _, reason = is_supported(x, w, activation="silu")
    assert "disabled" not in reason
    monkeypatch.setenv("KERNEL_FUN_CCONV_DISABLE", "1")
    _, reason = is_supported(x, w, activation="silu")
    assert "disabled" in reason
    monkeypatch.delenv("KERNEL_FUN_CCONV_DISABLE")
    monkeypatch.setenv("KERNEL_FUN_DISABLE", "1")
    _, reason = is_supported(x, w, activation="silu")
    assert "disabled" in reason
    monkeypatch.setenv("KERNEL_FUN_DISABLE", "0")
    _, reason = is_supported(x, w, activation="silu")
    assert "disabled" not in reason


def _outcome(fn, *args, **kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as e:  # the exact error fla raises is part of the contract
        return ("raised", type(e), str(e))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"activation": "silu"},
        {"activation": "silu", "bias": torch.zeros(16)},
        {"activation": None},
        {"activation": "silu", "backend": "bogus"},
    ],
)
def test_cpu_call_goes_to_fla_verbatim(kwargs):
    """On a CPU tensor the call is fla's: the same result or the same error, bit for bit."""
    x, w = _inputs()
    ours = _outcome(causal_conv1d, x, w, **kwargs)
    theirs = _outcome(fla_ops.causal_conv1d, x, w, **kwargs)
    assert ours[0] == theirs[0]
    if ours[0] == "raised":
        assert ours[1:] == theirs[1:]
    else:
        (y1, s1), (y2, s2) = ours[1], theirs[1]
        assert torch.equal(y1, y2)
        assert (s1 is None) == (s2 is None)


def test_fallback_forwards_every_argument(monkeypatch):
    """The fallback passes each argument through by name, unchanged, extra keywords included."""
    seen = {}

    def fake_fla(**kw):
        seen.update(kw)
        return "y", "state"

    monkeypatch.setattr(ops.compat, "fla_causal_conv1d", lambda: fake_fla)
    x, w = _inputs()
    bias = torch.zeros(16)
    out = causal_conv1d(
        x, w, bias=bias, activation="swish", backend="mix", output_final_state=True, seq_idx=7
    )
    assert out == ("y", "state")
    assert seen["x"] is x and seen["weight"] is w and seen["bias"] is bias
    assert seen["activation"] == "swish" and seen["backend"] == "mix"
    assert seen["output_final_state"] is True and seen["seq_idx"] == 7
    assert set(seen) == set(ops.FLA_PARAMETERS) - {"kwargs"} | {"seq_idx"}


def test_every_fla_update_parameter_is_classified():
    """causal_conv1d_update mirrors fla's signature: names, order, kinds and defaults."""
    from kernel_fun.cconv import causal_conv1d_update

    theirs = inspect.signature(fla_ops.causal_conv1d_update).parameters
    ours = inspect.signature(causal_conv1d_update).parameters
    assert list(theirs) == list(ours) == list(ops.FLA_UPDATE_PARAMETERS)
    for name, p in theirs.items():
        assert ours[name].kind == p.kind and ours[name].default == p.default, name


def test_update_cpu_call_goes_to_fla_verbatim(monkeypatch):
    """On CPU tensors the decode step is fla's call with every argument by name."""
    from kernel_fun.cconv import causal_conv1d_update

    seen = {}

    def fake_fla(**kw):
        seen.update(kw)
        return "y", kw["cache"]

    monkeypatch.setattr(
        ops.compat, "fla_original", lambda key: {"causal_conv1d_update": fake_fla}[key]
    )
    x, cache, w = torch.randn(3, 16), torch.randn(3, 16, 4), torch.randn(16, 4)
    out = causal_conv1d_update(x, cache, None, w, None, "silu")
    assert out == ("y", cache)
    assert seen == {"x": x, "cache": cache, "residual": None, "weight": w, "bias": None,
                    "activation": "silu"}  # fmt: skip


def test_warmup_without_gpu_does_nothing():
    from kernel_fun.cconv import warmup

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; warmup is checked in test_cconv_gpu.py")
    assert warmup(64) == 0


def test_gate_never_raises(monkeypatch):
    """Whatever the gate trips over, the call is classified as fla's, not an error."""

    def boom(*a, **k):
        raise RuntimeError("probe failed")

    monkeypatch.setattr(ops.support, "triton_unsupported_reason", boom)
    x, w = _inputs()
    ok, reason = is_supported(x, w, activation="silu")
    assert not ok and "cannot classify" in reason and "probe failed" in reason


def test_kernel_names_split_this_builds_kernels_by_direction():
    """What the GPU tests' and tools' launch witnesses count: this build's own kernels, a
    forward and a backward one at least, none of them a name of fla's conv kernels."""
    from kernel_fun._common import support
    from kernel_fun.cconv.ops import kernel_names

    names = kernel_names()
    assert names["fwd"] and names["bwd"], names
    every = names["fwd"] + names["bwd"] + names["other"]
    assert len(set(every)) == len(every), names
    assert all("fwd" in n for n in names["fwd"]) and all("bwd" in n for n in names["bwd"])
    fla = support.triton_kernels_of("fla.modules.causal_conv1d")  # every kernel fla's conv has
    assert "causal_conv1d_fwd_kernel" in fla and "compute_dh0_kernel" in fla, fla
    assert not set(every) & set(fla), names
    assert all(n.endswith("_kernel") for n in every)


def test_kernel_names_refuses_a_build_without_a_backward_kernel(monkeypatch):
    from kernel_fun._common import support

    monkeypatch.setattr(support, "triton_kernels_of", lambda package: ("a_fwd_kernel",))
    with pytest.raises(RuntimeError, match="no backward kernel"):
        ops.kernel_names()


def test_kernel_names_refuses_fla_names_and_a_build_without_kernels(monkeypatch):
    """A vendored kernel under one of fla's conv kernel names would count fla's launches as
    ours; a build without vendored kernels says how to vendor them."""
    from kernel_fun._common import support

    real = support.triton_kernels_of

    def clash(package):
        if package.startswith("kernel_fun."):
            return ("causal_conv1d_fwd_kernel", "cconv_bwd_kernel")
        return real(package)

    monkeypatch.setattr(support, "triton_kernels_of", clash)
    with pytest.raises(RuntimeError, match=r"\['causal_conv1d_fwd_kernel'\] have the names of fla"):
        ops.kernel_names()

    def unvendored(package):
        if package.startswith("kernel_fun."):
            raise ModuleNotFoundError(f"No module named '{package}'", name=package)
        return real(package)

    monkeypatch.setattr(support, "triton_kernels_of", unvendored)
    with pytest.raises(RuntimeError, match="vendors no cconv kernels.*make vendor FAMILY=cconv"):
        ops.kernel_names()


def test_conv_launches_counts_names_exactly_and_refuses_a_bare_name():
    from kernel_fun._testing import conv_launches

    names = ops.kernel_names()
    fwd, bwd = names["fwd"][0], names["bwd"][0]
    launched = [fwd, bwd, bwd, "causal_conv1d_fwd_kernel", "compute_dh0_kernel", "x" + fwd]
    assert conv_launches(launched) == {
        "cconv_fwd": 1,
        "cconv_bwd": 2,
        "causal_conv1d_fwd_kernel": 1,
        "causal_conv1d_bwd_kernel": 0,
    }
    for bad in (fwd, fwd.encode(), [fwd, None], [fwd.encode()]):
        with pytest.raises(TypeError, match="conv_launches takes"):
            conv_launches(bad)
