"""CPU checks of kernel_fun.patch_fla / unpatch_fla / patched_fla against the installed fla.

What is checked: every fla attribute holding fla's causal_conv1d is swapped and put back by
identity; patching is idempotent and atomic (a refusal or a failure half way leaves fla as it
was); the context manager restores on an exception and nests; unknown families are refused;
and a real ShortConvolution, called while patched, goes through kernel_fun.cconv and returns
bit for bit what fla returns. fla's Triton kernels cannot run on a CPU, so in that last test
fla's autograd Function is swapped for a torch depthwise conv (the same one in both runs);
the routing, not the kernel, is what is under test there. The kernels are checked on the GPU
(test_kda_layer_gpu.py).
"""

from __future__ import annotations

import logging
import sys
import types

import pytest
import torch
import torch.nn.functional as F

fla_ops = pytest.importorskip("fla.modules.causal_conv1d.ops")

import fla  # noqa: E402
import fla.modules  # noqa: E402
import fla.modules.causal_conv1d  # noqa: E402
import kernel_fun  # noqa: E402
import kernel_fun.cconv  # noqa: E402
from kernel_fun import _patch  # noqa: E402
from kernel_fun._patch import (  # noqa: E402
    PatchError,
    is_patched,
    patch_fla,
    patched_fla,
    patched_sites,
    unpatch_fla,
)

ORIGINAL = fla_ops.causal_conv1d
REPLACEMENT = kernel_fun.cconv.causal_conv1d
UPDATE_ORIGINAL = fla_ops.causal_conv1d_update
UPDATE_REPLACEMENT = kernel_fun.cconv.causal_conv1d_update
# The places fla 0.6.0 resolves causal_conv1d through; the patch must cover at least these.
REQUIRED = (
    "fla.modules.causal_conv1d.ops.causal_conv1d",
    "fla.modules.causal_conv1d.causal_conv1d",
    "fla.modules.convolution.causal_conv1d",
)


def _holders(obj) -> set[str]:
    """ "module.attr" for every attribute of an imported fla module that is `obj` itself."""
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
    """Every test starts and ends unpatched, with fla's own function everywhere."""
    assert ORIGINAL is not REPLACEMENT
    assert not is_patched("cconv")
    before = _holders(ORIGINAL)
    assert set(REQUIRED) <= before, "fla 0.6.0 layout expected by these tests"
    update_before = _holders(UPDATE_ORIGINAL)
    assert "fla.modules.causal_conv1d.ops.causal_conv1d_update" in update_before
    yield before
    unpatch_fla()
    assert _holders(REPLACEMENT) == set()
    assert _holders(UPDATE_REPLACEMENT) == set()
    assert _holders(UPDATE_ORIGINAL) == update_before


def _all_sites(before) -> set[str]:
    """The sites family cconv swaps: fla's causal_conv1d's and causal_conv1d_update's."""
    return before | _holders(UPDATE_ORIGINAL) | _holders(UPDATE_REPLACEMENT)


def test_patch_swaps_every_holder_and_unpatch_restores_identity(_clean_state):
    before = _clean_state
    every = _all_sites(before)
    result = patch_fla()
    assert set(result["cconv"]) == every
    assert set(REQUIRED) <= set(result["cconv"])
    assert _holders(REPLACEMENT) == before  # every former holder now holds ours ...
    assert _holders(ORIGINAL) == set()  # ... and no fla attribute still holds fla's
    assert fla_ops.causal_conv1d is REPLACEMENT
    assert fla.modules.convolution.causal_conv1d is REPLACEMENT
    # ShortConvolution.forward reads this very dict when it runs
    assert fla_ops.ShortConvolution.forward.__globals__["causal_conv1d"] is REPLACEMENT
    assert is_patched("cconv") and set(patched_sites("cconv")) == every
    # ShortConvolution.step reads the decode step from the same dict
    assert fla_ops.ShortConvolution.step.__globals__["causal_conv1d_update"] is UPDATE_REPLACEMENT
    assert _holders(UPDATE_ORIGINAL) == set()

    restored = unpatch_fla()
    assert set(restored["cconv"]) == every
    assert fla_ops.causal_conv1d_update is UPDATE_ORIGINAL
    assert _holders(ORIGINAL) == before
    assert fla_ops.causal_conv1d is ORIGINAL
    assert fla_ops.ShortConvolution.forward.__globals__["causal_conv1d"] is ORIGINAL
    assert not is_patched("cconv") and patched_sites("cconv") == ()


def test_patch_twice_is_a_noop(_clean_state):
    first = patch_fla("cconv")
    state = {name: id(v) for name, v in _state().items()}
    second = patch_fla(["cconv", "cconv"])
    assert second == first
    assert {name: id(v) for name, v in _state().items()} == state
    unpatch_fla("cconv")
    assert _holders(ORIGINAL) == _clean_state
    assert unpatch_fla("cconv") == {}  # unpatching an unpatched family does nothing


def _state() -> dict[str, object]:
    """Every fla attribute currently holding either function."""
    out = {}
    for obj in (ORIGINAL, REPLACEMENT):
        for name in _holders(obj):
            mod, _, attr = name.rpartition(".")
            out[name] = getattr(sys.modules[mod], attr)
    return out


def test_context_manager_restores_on_exception(_clean_state):
    with pytest.raises(RuntimeError, match="inside the block"):
        with patched_fla() as sites:
            assert set(sites["cconv"]) == _all_sites(_clean_state)
            assert fla_ops.causal_conv1d is REPLACEMENT
            raise RuntimeError("inside the block")
    assert not is_patched("cconv")
    assert _holders(ORIGINAL) == _clean_state


def test_context_manager_nests_and_keeps_an_outer_patch(_clean_state):
    patch_fla()
    with patched_fla():
        assert fla_ops.causal_conv1d is REPLACEMENT
    assert is_patched("cconv") and fla_ops.causal_conv1d is REPLACEMENT
    with patched_fla("cconv"):
        with patched_fla():
            pass
        assert fla_ops.causal_conv1d is REPLACEMENT
    unpatch_fla()
    with patched_fla():
        with patched_fla():
            pass
        assert fla_ops.causal_conv1d is REPLACEMENT  # the inner block did not patch it
    assert fla_ops.causal_conv1d is ORIGINAL


def test_an_explicit_patch_inside_a_block_outlives_the_block(_clean_state):
    with patched_fla("cconv"):
        patch_fla("cconv")
    assert is_patched("cconv") and fla_ops.causal_conv1d is REPLACEMENT
    unpatch_fla()
    assert fla_ops.causal_conv1d is ORIGINAL


def test_overlapping_blocks_exit_in_any_order(_clean_state):
    a, b = patched_fla("cconv"), patched_fla("cconv")
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)  # a closes first: b still holds the family
    assert fla_ops.causal_conv1d is REPLACEMENT
    b.__exit__(None, None, None)
    assert fla_ops.causal_conv1d is ORIGINAL and not is_patched("cconv")


def test_blocks_in_two_threads_keep_each_other_patched(_clean_state):
    import threading

    inside, release, seen = threading.Barrier(2), threading.Event(), []

    def worker(first_out: bool):
        with patched_fla("cconv"):
            inside.wait()
            if not first_out:
                release.wait()
            seen.append(fla_ops.causal_conv1d is REPLACEMENT)
        if first_out:
            seen.append(fla_ops.causal_conv1d is REPLACEMENT)  # the other block is open
            release.set()

    threads = [threading.Thread(target=worker, args=(f,)) for f in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [True, True, True]
    assert fla_ops.causal_conv1d is ORIGINAL


def test_an_explicit_unpatch_inside_a_block_unpatches_at_once(_clean_state):
    with patched_fla("cconv"):
        unpatch_fla("cconv")
        assert fla_ops.causal_conv1d is ORIGINAL
    assert fla_ops.causal_conv1d is ORIGINAL and not is_patched("cconv")


@pytest.mark.parametrize(
    "call",
    [
        lambda: patch_fla(("cconv", "gdn-nope")),
        lambda: patch_fla("nope"),
        lambda: unpatch_fla(["nope"]),
        lambda: patched_fla("nope").__enter__(),
        lambda: is_patched("nope"),
    ],
    ids=["patch-list", "patch-str", "unpatch", "context", "is_patched"],
)
def test_unknown_family_is_refused_with_the_known_ones(_clean_state, call):
    with pytest.raises(ValueError, match=r"unknown kernel-fun family .*known families: cconv"):
        call()
    assert not is_patched("cconv")
    assert _holders(ORIGINAL) == _clean_state


@pytest.mark.parametrize(
    "call",
    [
        lambda: patch_fla([]),
        lambda: patch_fla(()),
        lambda: patch_fla(iter([])),
        lambda: unpatch_fla([]),
        lambda: patched_fla(set()).__enter__(),
    ],
    ids=["patch-list", "patch-tuple", "patch-iterator", "unpatch", "context"],
)
def test_an_empty_family_list_is_refused_not_taken_as_nothing_to_do(_clean_state, call):
    with pytest.raises(ValueError, match=r"no family given .*or None for every family"):
        call()
    assert not is_patched("cconv") and not is_patched("kda")
    assert _holders(ORIGINAL) == _clean_state


def _other_function(*args, **kwargs):
    raise AssertionError("never called")


def _forward_without_conv(self, x, **kwargs):
    return x, None


@pytest.mark.parametrize(
    "break_fla, needle",
    [
        (
            lambda mp: mp.delattr(fla.modules.convolution, "causal_conv1d"),
            "fla.modules.convolution.causal_conv1d is missing",
        ),
        (
            lambda mp: mp.delattr(fla_ops, "causal_conv1d"),
            "fla.modules.causal_conv1d.ops.causal_conv1d is missing",
        ),
        (
            lambda mp: mp.setattr(fla.modules.convolution, "causal_conv1d", _other_function),
            "fla.modules.convolution.causal_conv1d is not the function ShortConvolution calls",
        ),
        (
            lambda mp: mp.setattr(fla_ops.ShortConvolution, "forward", _forward_without_conv),
            "ShortConvolution.forward does not look `causal_conv1d` up",
        ),
        (
            lambda mp: mp.delattr(fla.modules, "ShortConvolution"),
            "fla.modules.ShortConvolution is missing",
        ),
    ],
    ids=["public-missing", "home-missing", "public-differs", "forward-changed", "no-layer"],
)
def test_missing_fla_attribute_is_refused_and_nothing_is_patched(
    _clean_state, monkeypatch, break_fla, needle
):
    break_fla(monkeypatch)
    holders = _holders(ORIGINAL)
    with pytest.raises(PatchError) as info:
        patch_fla()
    message = str(info.value)
    assert needle in message
    assert f"fla {fla.__version__}" in message  # names the installed version
    assert not is_patched("cconv")
    assert _holders(ORIGINAL) == holders  # atomic: whatever was there is still there
    assert _holders(REPLACEMENT) == set()


class _ReadOnlyModule(types.ModuleType):
    """A module whose attributes cannot be reassigned (a failure half way through a patch)."""

    def __setattr__(self, name, value):
        raise AttributeError(f"{self.__name__} is read-only")


def test_failure_while_replacing_rolls_back_what_was_replaced(_clean_state, monkeypatch):
    probe = _ReadOnlyModule("fla.zz_read_only_probe")
    vars(probe)["causal_conv1d"] = ORIGINAL
    monkeypatch.setitem(sys.modules, probe.__name__, probe)  # scanned after the real ones
    with pytest.raises(PatchError, match=r"setting fla\.zz_read_only_probe\.causal_conv1d failed"):
        patch_fla()
    assert not is_patched("cconv")
    assert _holders(ORIGINAL) == _clean_state | {"fla.zz_read_only_probe.causal_conv1d"}
    assert _holders(REPLACEMENT) == set()


def test_modules_imported_later_are_covered(_clean_state, monkeypatch):
    patch_fla()
    # an fla module imported while patched binds whatever the public path holds: ours
    late = types.ModuleType("fla.zz_imported_while_patched")
    late.causal_conv1d = fla.modules.convolution.causal_conv1d
    monkeypatch.setitem(sys.modules, late.__name__, late)
    # one that bound fla's function by a path the patch did not cover: picked up by a re-patch
    stale = types.ModuleType("fla.zz_bound_the_original")
    stale.conv = ORIGINAL
    monkeypatch.setitem(sys.modules, stale.__name__, stale)
    again = patch_fla()
    assert "fla.zz_bound_the_original.conv" in again["cconv"]
    assert stale.conv is REPLACEMENT
    restored = unpatch_fla()
    assert {"fla.zz_imported_while_patched.causal_conv1d", "fla.zz_bound_the_original.conv"} <= set(
        restored["cconv"]
    )
    assert late.causal_conv1d is ORIGINAL and stale.conv is ORIGINAL


def test_patch_is_logged_at_info(_clean_state, caplog):
    with caplog.at_level(logging.INFO, logger="kernel_fun._patch"):
        patch_fla()
        unpatch_fla()
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "kernel_fun._patch")
    assert f"patched fla {fla.__version__} causal_conv1d" in text
    assert f"patched fla {fla.__version__} causal_conv1d_update" in text
    for name in REQUIRED:
        assert name in text
    assert "unpatched cconv" in text


def test_public_names_are_this_module():
    assert kernel_fun.patch_fla is _patch.patch_fla
    assert kernel_fun.unpatch_fla is _patch.unpatch_fla
    assert kernel_fun.patched_fla is _patch.patched_fla


# ------------------------------------------------------------------------------------------
# a real ShortConvolution, while patched
# ------------------------------------------------------------------------------------------


def _torch_conv_function(
    x, weight, bias, residual, initial_state, output_final_state, activation, *rest
):
    """Stands in for fla's CausalConv1dFunction.apply (Triton, GPU only): the same
    depthwise causal conv + silu, in torch. Used identically in both runs compared."""
    T, (D, W) = x.shape[1], weight.shape
    y = F.conv1d(x.transpose(1, 2), weight.unsqueeze(1), bias, padding=W - 1, groups=D)
    y = y[..., :T].transpose(1, 2)
    return (F.silu(y) if activation in ("silu", "swish") else y), None


def _run_recording_calls(layer, x):
    """Forward + backward of `layer` on a copy of x; the Python functions the forward entered."""
    calls: set[tuple[str, str]] = set()

    def profiler(frame, event, arg):
        if event == "call":
            calls.add((frame.f_globals.get("__name__", ""), frame.f_code.co_name))

    layer.zero_grad(set_to_none=True)
    xg = x.detach().clone().requires_grad_(True)
    sys.setprofile(profiler)
    try:
        y, state = layer(xg)
    finally:
        sys.setprofile(None)
    y.backward(torch.linspace(-1, 1, y.numel()).reshape(y.shape))
    return y.detach(), xg.grad, layer.weight.grad.detach().clone(), calls


def _entered_kernel_fun(calls) -> bool:
    return any(mod.startswith("kernel_fun.cconv") for mod, _ in calls)


def _entered_fla_conv(calls) -> bool:
    return ("fla.modules.causal_conv1d.ops", "causal_conv1d") in calls


def test_short_convolution_goes_through_kernel_fun_and_matches_fla_bit_for_bit(monkeypatch):
    monkeypatch.setattr(
        fla_ops, "CausalConv1dFunction", types.SimpleNamespace(apply=_torch_conv_function)
    )
    torch.manual_seed(0)
    layer = fla_ops.ShortConvolution(hidden_size=48, kernel_size=4, activation="silu")
    x = torch.randn(2, 37, 48)

    y0, dx0, dw0, calls0 = _run_recording_calls(layer, x)
    assert _entered_fla_conv(calls0) and not _entered_kernel_fun(calls0)

    with patched_fla():
        y1, dx1, dw1, calls1 = _run_recording_calls(layer, x)
    # through kernel_fun, which sends a CPU tensor on to fla's own function, verbatim
    assert _entered_kernel_fun(calls1)
    assert _entered_fla_conv(calls1)
    assert kernel_fun.cconv.is_supported(x, layer.weight.squeeze(1), activation="silu")[0] is False
    assert torch.equal(y1, y0) and torch.equal(dx1, dx0) and torch.equal(dw1, dw0)
    # and the comparison is not vacuous: the output is the conv, not zeros or the input
    assert y0.abs().sum() > 0 and not torch.equal(y0, F.silu(x))

    _, _, _, calls2 = _run_recording_calls(layer, x)  # unpatched again: fla directly
    assert not _entered_kernel_fun(calls2)


def _forward_with_local_import(self, x, **kwargs):
    """fla 0.5.x's ShortConvolution.forward imports causal_conv1d inside the function."""
    from fla.modules.causal_conv1d.ops import causal_conv1d

    return causal_conv1d(x=x, weight=self.weight.squeeze(1), activation=self.activation)


def test_function_local_import_layout_is_routed_too(monkeypatch):
    monkeypatch.setattr(
        fla_ops, "CausalConv1dFunction", types.SimpleNamespace(apply=_torch_conv_function)
    )
    monkeypatch.setattr(fla_ops.ShortConvolution, "forward", _forward_with_local_import)
    torch.manual_seed(1)
    layer = fla_ops.ShortConvolution(hidden_size=16, kernel_size=3, activation="silu")
    x = torch.randn(1, 9, 16)
    y0, _, _, calls0 = _run_recording_calls(layer, x)
    with patched_fla() as sites:
        assert "fla.modules.causal_conv1d.ops.causal_conv1d" in sites["cconv"]
        y1, _, _, calls1 = _run_recording_calls(layer, x)
    assert not _entered_kernel_fun(calls0) and _entered_kernel_fun(calls1)
    assert torch.equal(y0, y1)


@pytest.mark.parametrize("bad", [123, b"cconv", None.__class__])
def test_non_name_families_are_a_type_error(_clean_state, bad):
    with pytest.raises(TypeError, match="families must be a family name"):
        patch_fla(bad)
    assert not is_patched("cconv")


def test_decode_step_of_short_convolution_goes_through_kernel_fun(_clean_state, monkeypatch):
    """While patched, ShortConvolution's one-token step calls kernel_fun's
    causal_conv1d_update, which (here on a CPU) hands the call to fla's original verbatim."""
    from kernel_fun.cconv import ops

    calls = []

    def fla_update(**kw):
        calls.append(kw)
        return kw["x"] * 2, kw["cache"]

    monkeypatch.setattr(
        ops.compat, "fla_original", lambda key: {"causal_conv1d_update": fla_update}[key]
    )  # noqa: E501
    conv = fla_ops.ShortConvolution(16, 4, activation="silu")
    x, cache = torch.randn(2, 1, 16), torch.zeros(2, 16, 4)
    with patched_fla(), torch.no_grad():
        y, state = conv(x, cache=cache, output_final_state=True)
    assert len(calls) == 1 and calls[0]["x"] is x and calls[0]["cache"] is cache
    assert torch.equal(y, x * 2) and state is cache
    assert calls[0]["activation"] == "silu"


def _step_without_update(self, x, residual, cache, output_final_state=False, cu_seqlens=None):
    return x, cache


def test_a_step_that_no_longer_calls_the_update_is_refused(_clean_state, monkeypatch):
    monkeypatch.setattr(fla_ops.ShortConvolution, "step", _step_without_update)
    with pytest.raises(
        PatchError, match="ShortConvolution.step does not look `causal_conv1d_update` up"
    ):  # noqa: E501
        patch_fla()
    assert not is_patched("cconv")
    assert _holders(ORIGINAL) == _clean_state and _holders(REPLACEMENT) == set()


def test_missing_fla_layers_are_refused_with_what_to_install(_clean_state, monkeypatch):
    """fla-core alone has no fla.layers: patching kda says which package brings them, and
    patches nothing; the conv alone still patches."""
    monkeypatch.setitem(sys.modules, "fla.layers.kda", None)  # import -> ModuleNotFoundError
    holders = _holders(ORIGINAL)
    with pytest.raises(PatchError) as info:
        patch_fla()
    message = str(info.value)
    assert "fla.layers.kda does not import" in message
    assert "flash-linear-attention" in message and "`layers` extra" in message
    assert not is_patched("cconv") and _holders(ORIGINAL) == holders
    patch_fla("cconv")
    assert is_patched("cconv")
