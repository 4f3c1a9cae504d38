"""kernel_fun._common.compat: the fla probe against fla 0.6.0 (installed) and 0.5.2 (fetched),
simulated drift, the fallback switch, and the captured original of fla's causal_conv1d."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from kernel_fun._common import compat, support

SRC = Path(__file__).resolve().parents[1] / "src"
LOGGER = "kernel_fun"


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("KERNEL_FUN_FALLBACK", raising=False)
    compat._reset_for_tests()
    support._reset_for_tests()
    yield
    compat._reset_for_tests()
    support._reset_for_tests()


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING
    ]


# ---------------------------------------------------------------- the installed fla (0.6.0)


def test_probe_passes_against_the_installed_fla():
    import fla

    probe = compat.probe_fla()
    assert probe.version == fla.__version__
    assert probe.problems == []
    assert set(probe.resolved) == {s.key for s in compat.FLA_SYMBOLS}
    assert compat.check_fla() is True


def test_resolved_objects_are_fla_0_6_objects():
    import fla

    if fla.__version__ != "0.6.0":
        pytest.skip(f"installed fla is {fla.__version__}; this test describes 0.6.0's layout")
    import fla.modules.causal_conv1d.ops as ops
    import fla.modules.convolution as convolution

    for key in ("causal_conv1d", "causal_conv1d_fwd", "causal_conv1d_bwd", "ShortConvolution"):
        assert compat.probe_fla().resolved[key] == "fla.modules.causal_conv1d.ops"
    assert compat.fla_symbol("causal_conv1d") is ops.causal_conv1d
    assert compat.fla_symbol("causal_conv1d_fwd") is ops.causal_conv1d_fwd
    assert compat.fla_symbol("CausalConv1dFunction") is ops.CausalConv1dFunction
    # 0.6.0's fla.modules.convolution is an alias module holding the very same objects.
    assert compat.fla_symbol("convolution.causal_conv1d") is ops.causal_conv1d
    assert compat.fla_symbol("convolution.ShortConvolution") is convolution.ShortConvolution


def test_tested_versions_do_not_warn(caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert compat.check_fla() is True
    assert _warnings(caplog) == []


def test_untested_version_warns_once(monkeypatch, caplog):
    monkeypatch.setattr(compat, "_fla_version", lambda: "0.6.3")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert compat.check_fla() is True
        assert compat.check_fla() is True
    (message,) = _warnings(caplog)
    assert "0.6.3" in message and "untested" in message


def test_probe_is_cached(monkeypatch):
    calls = []
    real = compat._probe

    def counting(symbols):
        calls.append(1)
        return real(symbols)

    monkeypatch.setattr(compat, "_probe", counting)
    compat.check_fla()
    compat.check_fla()
    compat.probe_fla()
    assert len(calls) == 1


def test_unknown_symbol_key_is_a_key_error():
    with pytest.raises(KeyError, match="causal_conv2d"):
        compat.fla_symbol("causal_conv2d")


# ---------------------------------------------------------------- simulated drift


def _full_signature(
    x,
    weight=None,
    bias=None,
    residual=None,
    initial_state=None,
    output_final_state=False,
    activation=None,
    backend="triton",
    cu_seqlens=None,
    cu_seqlens_cpu=None,
    chunk_indices=None,
    cp_context=None,
    **kwargs,
):
    return x


def _renamed_keyword(
    x,
    weight=None,
    bias=None,
    residual=None,
    initial_state=None,
    output_final_state=False,
    activation=None,
    backend="triton",
    cu_seqlens=None,
    cu_seqlens_host=None,
    chunk_indices=None,
    cp_context=None,
    **kwargs,
):
    return x


def _reordered(
    x,
    bias=None,
    weight=None,
    residual=None,
    initial_state=None,
    output_final_state=False,
    activation=None,
    backend="triton",
    cu_seqlens=None,
    cu_seqlens_cpu=None,
    chunk_indices=None,
    cp_context=None,
    **kwargs,
):
    return x


@pytest.fixture
def fake_fla(monkeypatch):
    """Install fake fla modules and point the symbol table at them."""

    def install(**modules: dict) -> None:
        for name, attrs in modules.items():
            mod = types.ModuleType(name)
            for attr, value in attrs.items():
                setattr(mod, attr, value)
            monkeypatch.setitem(sys.modules, name, mod)

    return install


def _table(*rows: compat.FlaSymbol, monkeypatch) -> None:
    monkeypatch.setattr(compat, "FLA_SYMBOLS", rows)


def _conv_row(*modules: str) -> compat.FlaSymbol:
    return dataclasses.replace(
        next(s for s in compat.FLA_SYMBOLS if s.key == "causal_conv1d"), modules=modules
    )


def test_first_candidate_module_with_the_symbol_wins(fake_fla, monkeypatch):
    fake_fla(kf_fake_old={"causal_conv1d": _full_signature}, kf_fake_new={})
    _table(_conv_row("kf_fake_missing", "kf_fake_new", "kf_fake_old"), monkeypatch=monkeypatch)
    probe = compat.probe_fla()
    assert probe.problems == []
    assert probe.resolved == {"causal_conv1d": "kf_fake_old"}
    assert compat.fla_symbol("causal_conv1d") is _full_signature


def test_moved_symbol_raises_fla_drift_error_naming_it(fake_fla, monkeypatch):
    fake_fla(kf_fake_ops={"causal_conv1d_v2": _full_signature})
    _table(_conv_row("kf_fake_ops", "kf_fake_missing"), monkeypatch=monkeypatch)
    with pytest.raises(compat.FlaDriftError) as info:
        compat.check_fla()
    message = str(info.value)
    assert "causal_conv1d" in message and "kf_fake_ops" in message
    assert "kf_fake_missing" in message and "KERNEL_FUN_FALLBACK" in message
    with pytest.raises(compat.FlaDriftError):
        compat.fla_symbol("causal_conv1d")


def test_renamed_keyword_raises_even_behind_var_keyword(fake_fla, monkeypatch):
    fake_fla(kf_fake_ops={"causal_conv1d": _renamed_keyword})
    _table(_conv_row("kf_fake_ops"), monkeypatch=monkeypatch)
    with pytest.raises(compat.FlaDriftError, match="cu_seqlens_cpu"):
        compat.check_fla()


def test_reordered_parameters_raise_where_order_matters(fake_fla, monkeypatch):
    fake_fla(kf_fake_ops={"causal_conv1d": _reordered})
    _table(_conv_row("kf_fake_ops"), monkeypatch=monkeypatch)
    with pytest.raises(compat.FlaDriftError, match="reordered"):
        compat.check_fla()


def test_order_is_not_checked_for_keyword_only_use(fake_fla, monkeypatch):
    fake_fla(kf_fake_ops={"causal_conv1d": _reordered})
    row = dataclasses.replace(_conv_row("kf_fake_ops"), ordered=False)
    _table(row, monkeypatch=monkeypatch)
    assert compat.check_fla() is True


def test_every_problem_is_reported_at_once(fake_fla, monkeypatch):
    fake_fla(kf_fake_ops={"causal_conv1d": _renamed_keyword})
    fwd = dataclasses.replace(
        next(s for s in compat.FLA_SYMBOLS if s.key == "causal_conv1d_fwd"),
        modules=("kf_fake_ops",),
    )
    _table(_conv_row("kf_fake_ops"), fwd, monkeypatch=monkeypatch)
    assert len(compat.probe_fla().problems) == 2
    with pytest.raises(compat.FlaDriftError, match="causal_conv1d_fwd"):
        compat.check_fla()


def test_module_that_fails_to_import_is_drift(tmp_path, monkeypatch):
    (tmp_path / "kf_fake_broken.py").write_text('raise RuntimeError("triton version mismatch")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kf_fake_broken", raising=False)
    _table(_conv_row("kf_fake_broken"), monkeypatch=monkeypatch)
    with pytest.raises(compat.FlaDriftError, match="triton version mismatch"):
        compat.check_fla()


def test_a_missing_dependency_of_fla_is_named_not_called_drift(tmp_path, monkeypatch):
    """fla-core 0.6.0 imports `packaging` without declaring it: the error says what to install
    instead of claiming fla moved something."""
    (tmp_path / "kf_fake_needs_dep.py").write_text("import kf_fake_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kf_fake_needs_dep", raising=False)
    _table(_conv_row("kf_fake_needs_dep"), monkeypatch=monkeypatch)
    assert compat.probe_fla().missing_dependencies == ["kf_fake_absent_dependency"]
    with pytest.raises(compat.FlaDriftError) as info:
        compat.check_fla()
    message = str(info.value)
    assert "pip install kf_fake_absent_dependency" in message
    assert "moved" not in message and "KERNEL_FUN_FALLBACK" in message


def test_fallback_switch_turns_drift_into_a_warning_and_false(fake_fla, monkeypatch, caplog):
    fake_fla(kf_fake_ops={"causal_conv1d": _renamed_keyword})
    _table(_conv_row("kf_fake_ops"), monkeypatch=monkeypatch)
    monkeypatch.setenv("KERNEL_FUN_FALLBACK", "1")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert compat.check_fla() is False
        assert compat.check_fla() is False
    (message,) = _warnings(caplog)
    assert "cu_seqlens_cpu" in message and "KERNEL_FUN_FALLBACK" in message
    # The policy is read per call even though the probe is cached.
    monkeypatch.delenv("KERNEL_FUN_FALLBACK")
    with pytest.raises(compat.FlaDriftError):
        compat.check_fla()


# ---------------------------------------------------------------- fla's original function


def _ours(*args, **kwargs):
    return "kernel-fun"


_ours.__module__ = "kernel_fun.cconv.ops"


def test_fla_causal_conv1d_is_fla_s_function():
    import fla.modules.convolution as convolution

    assert compat.fla_causal_conv1d() is convolution.causal_conv1d
    assert compat.fla_causal_conv1d().__module__.startswith("fla.")


def test_original_survives_a_later_patch(monkeypatch):
    original = compat.fla_symbol("causal_conv1d")
    assert compat.fla_causal_conv1d() is original
    module = sys.modules[compat.probe_fla().resolved["causal_conv1d"]]
    monkeypatch.setattr(module, "causal_conv1d", _ours)
    assert compat.fla_symbol("causal_conv1d") is _ours  # the live attribute is patched
    assert compat.fla_causal_conv1d() is original  # the fallback still reaches fla


def test_patched_before_first_use_without_a_record_is_refused(monkeypatch):
    module = sys.modules[compat.probe_fla().resolved["causal_conv1d"]]
    monkeypatch.setattr(module, "causal_conv1d", _ours)
    with pytest.raises(RuntimeError, match="remember_original"):
        compat.fla_causal_conv1d()


def test_remember_original_is_what_the_fallback_calls(monkeypatch):
    original = compat.fla_symbol("causal_conv1d")
    compat.remember_original(original)
    module = sys.modules[compat.probe_fla().resolved["causal_conv1d"]]
    monkeypatch.setattr(module, "causal_conv1d", _ours)
    assert compat.fla_causal_conv1d() is original


def test_first_record_wins(monkeypatch):
    original = compat.fla_symbol("causal_conv1d")
    compat.remember_original(original)
    compat.remember_original(_full_signature)
    assert compat.fla_causal_conv1d() is original


def test_remember_original_refuses_our_own_function_and_unknown_keys():
    with pytest.raises(ValueError, match="kernel-fun's own"):
        compat.remember_original(_ours)
    with pytest.raises(KeyError):
        compat.remember_original(_full_signature, "causal_conv2d")


# ---------------------------------------------------------------- fla-core 0.5.2, for real

# fla-core 0.5.2 is installed into its own folder. flash-linear-attention (layers, models)
# shares the `fla` namespace through pkgutil.extend_path, so the probe process refuses every
# `fla.*` module found outside that folder: the probe then sees fla-core 0.5.2 alone.
# Only the cconv rows are probed: kernel_fun.kda needs fla 0.6.0's kda chain.
_PROBE_0_5_2 = textwrap.dedent(
    """
    import importlib.abc, importlib.machinery, json, os, sys, warnings
    ROOT = os.path.abspath(sys.argv[1])
    sys.path.insert(0, ROOT)

    class OnlyRoot(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != "fla" and not fullname.startswith("fla."):
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None:
                return None
            where = spec.origin or next(iter(spec.submodule_search_locations or []), "")
            if not os.path.abspath(where).startswith(ROOT + os.sep):
                raise ModuleNotFoundError(f"{fullname} is outside {ROOT}", name=fullname)
            return spec

    sys.meta_path.insert(0, OnlyRoot())
    warnings.simplefilter("ignore")
    from kernel_fun._common import compat
    import fla, fla.modules.convolution as convolution
    probe = compat.probe_fla("cconv")
    print(json.dumps({
        "fla_file": fla.__file__,
        "version": probe.version,
        "resolved": probe.resolved,
        "problems": probe.problems,
        "check": compat.check_fla("cconv"),
        "original_is_public": compat.fla_causal_conv1d() is convolution.causal_conv1d,
    }))
    """
)


@pytest.fixture(scope="module")
def fla_0_5_2(request, tmp_path_factory) -> Path:
    """A folder holding fla-core 0.5.2 (no dependencies), fetched once into pytest's cache."""
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    if cache is not None:
        root = Path(cache.mkdir("fla-core-0.5.2"))
    else:
        root = tmp_path_factory.mktemp("fla-core-0.5.2")
    target = root / "site"
    done = root / "installed"
    if not done.exists():
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--upgrade",
            "--target",
            str(target),
            "fla-core==0.5.2",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot fetch fla-core 0.5.2 with pip ({exc})")
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"cannot fetch fla-core 0.5.2 with pip: {last}")
        done.write_text("fla-core==0.5.2\n")
    return target


@pytest.mark.slow
def test_probe_passes_against_fla_core_0_5_2(fla_0_5_2):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE_0_5_2, str(fla_0_5_2)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["fla_file"]).resolve().is_relative_to(fla_0_5_2.resolve())
    assert out["version"] == "0.5.2"
    assert out["problems"] == []
    assert out["check"] is True
    assert out["resolved"] == {
        "causal_conv1d": "fla.modules.conv.causal_conv1d",
        "causal_conv1d_fwd": "fla.modules.conv.triton.ops",
        "causal_conv1d_bwd": "fla.modules.conv.triton.ops",
        "causal_conv1d_update": "fla.modules.conv.triton.ops",
        "CausalConv1dFunction": "fla.modules.conv.triton.ops",
        "ShortConvolution": "fla.modules.conv.short_conv",
        "convolution.causal_conv1d": "fla.modules.convolution",
        "convolution.ShortConvolution": "fla.modules.convolution",
    }
    assert out["original_is_public"] is True
