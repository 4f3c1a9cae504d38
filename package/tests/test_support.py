"""kernel_fun._common.support: switches read per call, floors, logging, the capture gate."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from kernel_fun._common import support

LOGGER = "kernel_fun"


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for name in (
        "KERNEL_FUN_DISABLE",
        "KERNEL_FUN_CCONV_DISABLE",
        "KERNEL_FUN_KDA_DISABLE",
        "KERNEL_FUN_DEBUG",
        "KERNEL_FUN_FALLBACK",
        "KERNEL_FUN_ALLOW_ARCH",
    ):
        monkeypatch.delenv(name, raising=False)
    support._reset_for_tests()
    yield
    support._reset_for_tests()


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING
    ]


# ---------------------------------------------------------------- switches, read per call


def test_disable_switches_are_read_on_every_call(monkeypatch):
    assert not support.disabled("cconv")
    monkeypatch.setenv("KERNEL_FUN_CCONV_DISABLE", "1")
    assert support.disabled("cconv")
    assert not support.disabled("kda")  # a family switch touches only its family
    monkeypatch.setenv("KERNEL_FUN_CCONV_DISABLE", "0")
    assert not support.disabled("cconv")
    monkeypatch.setenv("KERNEL_FUN_DISABLE", "1")
    assert support.disabled("cconv") and support.disabled("kda")
    monkeypatch.delenv("KERNEL_FUN_DISABLE")
    assert not support.disabled("kda")


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "on", " On "])
def test_switch_on_values(monkeypatch, value):
    monkeypatch.setenv("KERNEL_FUN_DEBUG", value)
    assert support.debug()


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "OFF", ""])
def test_switch_off_values(monkeypatch, value, caplog):
    monkeypatch.setenv("KERNEL_FUN_DEBUG", value)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert not support.debug()
    assert _warnings(caplog) == []


def test_unrecognised_switch_value_is_off_and_warned_about_once(monkeypatch, caplog):
    monkeypatch.setenv("KERNEL_FUN_FALLBACK", "2")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert not support.fallback_on_drift()
        assert not support.fallback_on_drift()
    (message,) = _warnings(caplog)
    assert "KERNEL_FUN_FALLBACK='2'" in message


def test_debug_and_fallback_follow_the_environment_between_calls(monkeypatch):
    assert not support.debug() and not support.fallback_on_drift()
    monkeypatch.setenv("KERNEL_FUN_DEBUG", "1")
    monkeypatch.setenv("KERNEL_FUN_FALLBACK", "1")
    assert support.debug() and support.fallback_on_drift()
    monkeypatch.setenv("KERNEL_FUN_DEBUG", "0")
    monkeypatch.delenv("KERNEL_FUN_FALLBACK")
    assert not support.debug() and not support.fallback_on_drift()


@pytest.mark.parametrize("family", ["", "c-conv", "cconv ", "a.b"])
def test_family_must_be_an_identifier(family):
    with pytest.raises(ValueError, match="family"):
        support.disabled(family)


# ---------------------------------------------------------------- logging


def test_log_once_logs_each_message_once_per_level(caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        support.log_once("a")
        support.log_once("a")
        support.log_once("b", logging.WARNING)
        support.log_once("a", logging.WARNING)  # same text raised to a higher level: once more
        support.log_once("a", logging.WARNING)
    seen = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert seen == [(logging.INFO, "a"), (logging.WARNING, "b"), (logging.WARNING, "a")]


def test_log_versions_once(caplog):
    import kernel_fun

    with caplog.at_level(logging.INFO, logger=LOGGER):
        support.log_versions_once()
        support.log_versions_once()
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.INFO
    assert str(kernel_fun.versions()) in record.getMessage()


def test_report_fallback_level_follows_debug(monkeypatch, caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        support.report_fallback("cconv", "W=5 is not supported")
        support.report_fallback("cconv", "W=5 is not supported")
        monkeypatch.setenv("KERNEL_FUN_DEBUG", "1")
        support.report_fallback("cconv", "W=5 is not supported")
        support.report_fallback("cconv", "W=5 is not supported")
    levels = [r.levelno for r in caplog.records if r.name == LOGGER]
    assert levels == [logging.INFO, logging.WARNING]
    assert all("cconv" in r.getMessage() and "W=5" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- architecture


def test_arch_at_least_compares_the_major_and_is_cached(monkeypatch):
    calls = []

    def capability(index):
        calls.append(index)
        return {0: (9, 0), 1: (8, 6)}[index]

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    assert support.arch_at_least(0, 9)
    assert not support.arch_at_least(0, 10)
    assert not support.arch_at_least(1, 9)
    assert support.arch_at_least(1, 8)
    assert support.arch_at_least(0, 9)
    assert sorted(calls) == [0, 1]  # one driver query per device


def _fake_cuda_tensor(index=0):
    return SimpleNamespace(is_cuda=True, device=torch.device("cuda", index))


def test_triton_gate_order_disabled_then_device_then_arch(monkeypatch):
    cpu = torch.zeros(2)
    assert "not a CUDA device" in support.triton_unsupported_reason(cpu, "cconv")
    monkeypatch.setenv("KERNEL_FUN_CCONV_DISABLE", "1")
    assert "KERNEL_FUN_CCONV_DISABLE" in support.triton_unsupported_reason(cpu, "cconv")
    monkeypatch.delenv("KERNEL_FUN_CCONV_DISABLE")

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (8, 0))
    reason = support.triton_unsupported_reason(_fake_cuda_tensor(), "cconv")
    assert "sm80" in reason and "sm90" in reason


def test_triton_gate_passes_on_hopper_and_honours_the_allow_list(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (9, 0))
    assert support.triton_unsupported_reason(_fake_cuda_tensor(), "cconv") is None
    reason = support.triton_unsupported_reason(
        _fake_cuda_tensor(), "cconv", archs=frozenset({(10, 0)})
    )
    assert "sm90" in reason and "sm100" in reason


@pytest.mark.parametrize("arch", [(10, 0), (10, 3), (12, 0), (8, 9)])
def test_untested_architectures_go_to_fla_unless_opted_in(monkeypatch, arch):
    """Newer is not enough: only architectures the GPU tests passed on run our kernels, and
    KERNEL_FUN_ALLOW_ARCH=1 (read per call) opts the others in."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: arch)
    reason = support.triton_unsupported_reason(_fake_cuda_tensor(), "cconv")
    assert f"sm{arch[0]}{arch[1]}" in reason and "KERNEL_FUN_ALLOW_ARCH=1" in reason
    monkeypatch.setenv("KERNEL_FUN_ALLOW_ARCH", "1")
    assert support.triton_unsupported_reason(_fake_cuda_tensor(), "cconv") is None
    monkeypatch.setenv("KERNEL_FUN_ALLOW_ARCH", "0")
    assert support.triton_unsupported_reason(_fake_cuda_tensor(), "cconv") is not None


def test_the_allow_list_holds_only_architectures_the_tests_ran_on():
    """The recorded list is Hopper's sm90 (the H200 GPU tests); a new entry needs a GPU run."""
    assert frozenset({(9, 0)}) == support.TESTED_ARCHS


def test_triton_gate_uses_the_tensors_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: [(9, 0), (7, 5)][i])
    assert support.triton_unsupported_reason(_fake_cuda_tensor(0), "cconv") is None
    assert "sm75" in support.triton_unsupported_reason(_fake_cuda_tensor(1), "cconv")


# ---------------------------------------------------------------- CUDA-graph capture gate


def test_capturing_is_false_without_an_initialised_cuda_context():
    if torch.cuda.is_initialized():
        pytest.skip("CUDA already initialised in this process; the GPU test covers it")
    assert support.capturing() is False


@pytest.fixture
def capture(monkeypatch):
    """A switchable stand-in for the capture probe: capture.on = True while 'capturing'."""
    state = SimpleNamespace(on=False)
    monkeypatch.setattr(support, "capturing", lambda: state.on)
    return state


SIG = ("cconv", (16, 8192, 2048), 4, "bfloat16", "float32", "cuda:0")
OTHER = ("cconv", (16, 4096, 2048), 4, "bfloat16", "float32", "cuda:0")


def test_outside_capture_every_call_is_allowed(capture):
    assert support.capture_unsupported_reason(SIG, needs_grad=True) is None


def test_cold_shape_is_refused_under_capture(capture):
    capture.on = True
    reason = support.capture_unsupported_reason(SIG, needs_grad=False)
    assert reason is not None and "never ran eagerly" in reason


def test_forward_warm_suffices_without_grad_but_not_with_it(capture):
    support.mark_warm(SIG, "fwd")
    capture.on = True
    assert support.capture_unsupported_reason(SIG, needs_grad=False) is None
    reason = support.capture_unsupported_reason(SIG, needs_grad=True)
    assert reason is not None and "backward" in reason
    capture.on = False
    support.mark_warm(SIG, "bwd")
    capture.on = True
    assert support.capture_unsupported_reason(SIG, needs_grad=True) is None
    assert support.capture_unsupported_reason(OTHER, needs_grad=False) is not None


def test_marks_made_during_capture_do_not_count(capture):
    capture.on = True
    support.mark_warm(SIG, "fwd")
    support.mark_warm(SIG, "bwd")
    assert support.capture_unsupported_reason(SIG, needs_grad=False) is not None
    capture.on = False
    support.mark_warm(SIG, "fwd")
    capture.on = True
    support.mark_warm(SIG, "bwd")
    assert support.capture_unsupported_reason(SIG, needs_grad=False) is None
    assert support.capture_unsupported_reason(SIG, needs_grad=True) is not None


def test_bwd_warm_alone_does_not_admit_a_forward(capture):
    support.mark_warm(SIG, "bwd")
    capture.on = True
    assert support.capture_unsupported_reason(SIG, needs_grad=True) is not None


def test_the_stream_plays_no_part(capture, monkeypatch):
    # Warm on one stream, capture on another (the make_graphed_callables pattern): the gate
    # must give the same answer whatever torch reports as the current stream.
    streams = iter([SimpleNamespace(cuda_stream=0x1000), SimpleNamespace(cuda_stream=0x2000)])
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: next(streams))
    support.mark_warm(SIG, "fwd")
    support.mark_warm(SIG, "bwd")
    capture.on = True
    assert support.capture_unsupported_reason(SIG, needs_grad=True) is None
    assert support.capture_unsupported_reason(SIG, needs_grad=False) is None


def test_mark_warm_rejects_an_unknown_phase(capture):
    with pytest.raises(ValueError, match="phase"):
        support.mark_warm(SIG, "forward")


def test_reset_forgets_warm_signatures(capture):
    support.mark_warm(SIG, "fwd")
    support._reset_for_tests()
    capture.on = True
    assert support.capture_unsupported_reason(SIG, needs_grad=False) is not None


@pytest.mark.gpu
def test_capture_gate_under_a_real_cuda_graph():
    support._reset_for_tests()
    x = torch.zeros(8, device="cuda")
    sig = ("probe", tuple(x.shape), str(x.dtype), str(x.device))
    assert support.capturing() is False
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    reasons = {}
    with torch.cuda.stream(side):
        x.add_(1)  # eager work on the side stream, as before any capture
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            reasons["capturing"] = support.capturing()
            reasons["cold"] = support.capture_unsupported_reason(sig, needs_grad=False)
            support.mark_warm(sig, "fwd")  # made during capture: must not count
            reasons["after_mark"] = support.capture_unsupported_reason(sig, needs_grad=False)
            x.add_(1)
    assert reasons["capturing"] is True
    assert reasons["cold"] is not None and reasons["after_mark"] is not None
    support.mark_warm(sig, "fwd")  # eager, on the default stream
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(g2):
        reasons["warm"] = support.capture_unsupported_reason(sig, needs_grad=False)
        x.add_(1)
    assert reasons["warm"] is None


def test_import_vendored_tells_missing_from_broken(tmp_path, monkeypatch, caplog):
    """A vendored module the build lacks is skipped for the next name; one that exists and
    fails to import is reported (logged once) instead of being taken for missing."""
    import logging
    import sys

    pkg = tmp_path / "vendtest_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text("VALUE = 7\n")
    (pkg / "broken.py").write_text("from vendtest_pkg.good import NOT_THERE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("vendtest_pkg", "vendtest_pkg.good", "vendtest_pkg.broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    mod, err = support.import_vendored("fam", ("vendtest_pkg.absent", "vendtest_pkg.good"))
    assert err is None and mod.VALUE == 7
    assert support.import_vendored("fam", ("vendtest_pkg.absent", "no_such_pkg.mod")) == (
        None,
        None,
    )
    with caplog.at_level(logging.ERROR, logger="kernel_fun"):
        for _ in range(2):
            mod, err = support.import_vendored("fam", ("vendtest_pkg.broken", "vendtest_pkg.good"))
            assert mod is None and "NOT_THERE" in err and err.startswith("ImportError")
    assert (
        sum("vendtest_pkg.broken failed to import" in r.getMessage() for r in caplog.records) == 1
    )


def test_env_reads_what_os_environ_get_reads(monkeypatch):
    """support._env (the switches' reader) agrees with os.environ.get through sets, changes
    and deletions, and falls back to it for a mapping without CPython's storage."""
    import os

    from kernel_fun._common import support as sup

    name = "KERNEL_FUN_TEST_ENV_SWITCH"
    monkeypatch.delenv(name, raising=False)
    assert sup._env(name) is None is os.environ.get(name)
    for value in ("1", "off", "", "yes "):
        monkeypatch.setenv(name, value)
        assert sup._env(name) == os.environ.get(name) == value
    monkeypatch.delenv(name)
    assert sup._env(name) is None
    monkeypatch.setattr(os, "environ", {name: "on"})
    assert sup._env(name) == "on" and sup.disabled("cconv") is False
    monkeypatch.setitem(os.environ, "KERNEL_FUN_CCONV_DISABLE", "1")
    assert sup.disabled("cconv") is True


def test_triton_kernels_of_names_the_kernels_a_package_defines(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    pkg = tmp_path / "kf_fake_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import triton\n\n\n@triton.jit\ndef top_kernel(x):\n    pass\n"
    )
    (pkg / "sub").mkdir()
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "deep.py").write_text(
        "import triton\n\n\n@triton.jit\ndef deep_kernel(x):\n    pass\n"
    )
    (pkg / "a.py").write_text(
        "import triton\n\n\n"
        "@triton.jit\ndef foo_kernel(x):\n    pass\n\n\n"
        "@triton.jit\ndef _helper(x):\n    pass\n\n\n"
        "@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=[])\n"
        "@triton.jit\ndef tuned_kernel(x):\n    pass\n"
    )
    (pkg / "b.py").write_text(
        "import triton\n\nfrom .a import foo_kernel  # imported: a's, not b's\n\n\n"
        "@triton.jit\ndef bar_kernel(x):\n    pass\n\n\nNOT_A_KERNEL_kernel = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert support.triton_kernels_of("kf_fake_kernels") == (
        "bar_kernel",
        "deep_kernel",
        "foo_kernel",
        "top_kernel",
        "tuned_kernel",
    )
    assert support.triton_kernels_of("kf_fake_kernels.sub") == ("deep_kernel",)
    with pytest.raises(ModuleNotFoundError):
        support.triton_kernels_of("kf_fake_kernels_absent")


def test_triton_kernels_of_fla_style_names_and_bad_packages(tmp_path, monkeypatch):
    """fla's naming (`chunk_kda_fwd_kernel_h_o`) counts, a name that only contains the letters
    does not; a package's __main__ is not run; an object whose attribute lookup raises is
    skipped; a failing submodule is named; a non-str argument is a TypeError."""
    pytest.importorskip("triton")
    pkg = tmp_path / "kf_fake_kernels2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "import triton\n\n\n"
        "@triton.jit\ndef chunk_fwd_kernel_h_o(x):\n    pass\n\n\n"
        "@triton.jit\ndef kernelish(x):\n    pass\n\n\n"
        "class Boom:\n    def __getattr__(self, name):\n        raise RuntimeError('boom')\n\n\n"
        "BOOM = Boom()\n"
    )
    (pkg / "__main__.py").write_text("raise SystemExit('__main__ ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert support.triton_kernels_of("kf_fake_kernels2") == ("chunk_fwd_kernel_h_o",)
    (pkg / "bad.py").write_text("import kf_no_such_module_xyz\n")
    with pytest.raises(ImportError, match=r"importing kf_fake_kernels2\.bad failed: .*xyz"):
        support.triton_kernels_of("kf_fake_kernels2")
    for bad in (None, 3, b"kf_fake_kernels2", support):
        with pytest.raises(TypeError, match="dotted name"):
            support.triton_kernels_of(bad)


def test_brief_names_arguments_without_their_contents():
    import torch

    assert support.brief(None) == "None" and support.brief(True) == "True"
    assert support.brief(0.5) == "0.5" and support.brief("silu") == "'silu'"
    assert support.brief(10**100).endswith("...") and len(support.brief(10**100)) == 40
    big = torch.arange(100_000)
    assert support.brief(big) == "a Tensor of shape (100000,) and dtype torch.int64"
    assert support.brief([big]) == "a list" and support.brief(object()) == "a object"


def test_distinct_messages_are_capped(monkeypatch, caplog):
    monkeypatch.setattr(support, "_LOG_CAP", 5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for i in range(20):
            support.log_once(f"reason {i}")
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert messages[:5] == [f"reason {i}" for i in range(5)]
    assert len(messages) == 6 and "5 distinct messages logged" in messages[5]
    assert len(support._logged) == 6
    support.log_once("reason 0")  # still deduplicated
    assert len([r for r in caplog.records if r.name == LOGGER]) == 6
