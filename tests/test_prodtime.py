"""CPU checks of tools/prodtime.py: statistics, rotation, conv share, the tables, the JSON,
and the command line (options, the no-GPU refusal, the flow of options into the run).
The timings themselves need the GPU (`make prodtime`)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("prodtime", ROOT / "tools" / "prodtime.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["prodtime"] = mod
    spec.loader.exec_module(mod)
    return mod


prodtime = _load()


def _stats(median, p20=None, p80=None, n=100):
    return {"median": median, "p20": p20 or median * 0.98, "p80": p80 or median * 1.03, "n": n}


def _report():
    """A report shaped like a real run, with made-up numbers."""
    conv = []
    for op, fla_ms, ours_ms, agrees in (("fwd", 0.52, 0.31, True), ("bwd", 1.81, None, False)):
        conv.append(
            {
                "op": op,
                "B": 16,
                "T": 8192,
                "D": 2048,
                "W": 4,
                "x_dtype": "bfloat16",
                "w_dtype": "float32",
                "activation": "silu",
                "fla_ms": _stats(fla_ms),
                "kernel_fun_ms": _stats(ours_ms) if ours_ms else None,
                "ratio": fla_ms / ours_ms if ours_ms else None,
                "rel_diff_vs_fla": {"y": 2.5e-3} if op == "fwd" else {"dx": 0.3, "dw": 1e-3},
                "agrees": agrees,
                "rotation_sets": 1,
            }
        )
    layer = {
        **prodtime.LAYER,
        "precision": "amp",
        "fla": {
            "step_ms": _stats(80.0),
            "conv_ms": 9.0,
            "kernel_ms": 78.0,
            "conv_share": 9.0 / 78.0,
            "conv_launches": 9,
        },
        "kernel_fun": {
            "step_ms": _stats(74.0),
            "conv_ms": 3.0,
            "kernel_ms": 72.0,
            "conv_share": 3.0 / 72.0,
            "conv_launches": 6,
            "fla_conv_launches": 0,
            "engaged": True,
        },
        "cconv_only": {
            "step_ms": _stats(77.0),
            "conv_ms": 3.0,
            "kernel_ms": 75.0,
            "conv_share": 3.0 / 75.0,
            "conv_launches": 6,
            "fla_conv_launches": 0,
            "engaged": True,
        },
        "ratio": 80.0 / 74.0,
        "ratio_cconv_only": 80.0 / 77.0,
        "ratio_vs_cconv_only": 77.0 / 74.0,
    }
    kda = {
        **prodtime.KDA_OP,
        "rel_diff_vs_fla": {
            "o": 1e-3,
            "dq": 2e-3,
            "dk": 2e-3,
            "dv": 1e-3,
            "dg": 3e-3,
            "dbeta": 2e-3,
        },
        "agrees": True,
        "engaged": True,
        "fla_ms": _stats(25.0),
        "kernel_fun_ms": _stats(23.0),
        "ratio": 25.0 / 23.0,
    }
    return {
        "tool": "tools/prodtime.py",
        "created": "2026-11-29T12:00:00+00:00",
        "command": "python tools/prodtime.py --out out/prodtime.json",
        "device": {"name": "NVIDIA H200", "capability": "sm90"},
        "versions": {"kernel_fun": "0.3.0.dev0", "fla": "0.6.0"},
        "kernel_fun_path": "/x/kernel_fun",
        "conv": conv,
        "kda": kda,
        "layer": layer,
    }


def _text(renderable) -> str:
    console = Console(record=True, width=240, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_summarize_matches_numpy_linear_percentiles():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 100, 101):
        values = rng.gamma(2.0, 0.3, size=n)
        s = prodtime.summarize(values)
        assert s["n"] == n
        for key, q in (("median", 50), ("p20", 20), ("p80", 80)):
            assert s[key] == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    with pytest.raises(ValueError):
        prodtime.summarize([])


def test_rotation_sets():
    l2 = 50 * 2**20
    assert prodtime.rotation_sets(2 * 2 * 16 * 8192 * 2048, l2) == 1  # the prod call: 1 GiB
    assert prodtime.rotation_sets(l2, l2) == 3  # 3 L2s worth
    assert prodtime.rotation_sets(l2 // 2 + 1, l2) == 6
    assert prodtime.rotation_sets(1024, l2) == prodtime.MAX_ROTATION
    with pytest.raises(ValueError):
        prodtime.rotation_sets(0, l2)


def test_conv_share_counts_only_conv_kernels():
    kernels = [
        ("cconv_fwd_kernel", 100.0),
        ("ampere_bf16_gemm", 700.0),
        ("cconv_bwd_kernel", 150.0),
        ("causal_conv1d_states_fwd_kernel", 50.0),  # not fla's conv fwd kernel
        ("compute_dh0_kernel", 25.0),  # fla's, though it holds our "dh0_kernel"
    ]
    s = prodtime.conv_share(kernels, ("cconv_fwd_kernel", "cconv_bwd_kernel", "dh0_kernel"))
    assert s == pytest.approx(
        {"conv_ms": 0.25, "kernel_ms": 1.025, "conv_share": 0.25 / 1.025, "conv_launches": 2}
    )
    fla = prodtime.conv_share(kernels, prodtime.FLA_CONV_KERNELS)
    assert fla["conv_launches"] == 0 and fla["conv_share"] == 0.0
    assert prodtime.conv_share([], prodtime.FLA_CONV_KERNELS)["conv_share"] == 0.0


def test_our_conv_kernels_are_the_vendored_builds_and_not_flas():
    """The patched steps' needles are the installed build's own kernels (whatever the vendored
    idea named them), forward and backward, and none of them matches fla's conv kernels."""
    ours = prodtime.our_conv_kernels()
    assert any("fwd" in n for n in ours) and any("bwd" in n for n in ours), ours
    assert not set(ours) & set(prodtime.FLA_CONV_KERNELS), ours


def test_tables_show_the_numbers():
    report = _report()
    conv = _text(prodtime.conv_table(report))
    assert "B16 T8192 D2048 W4 bfloat16/float32" in conv
    assert "0.520 [0.510-0.536]" in conv  # fla fwd median [p20-p80]
    assert "0.310 [0.304-0.319]" in conv
    assert "1.68x" in conv  # 0.52 / 0.31
    assert "DISAGREES" in conv and "dx 3.0e-01" in conv
    layer = _text(prodtime.layer_table(report))
    assert "B8 T8192 hidden 2048 16x128 expand_v 2 W4, amp" in layer
    assert "80.000 [78.400-82.400]" in layer and "74.000" in layer
    assert "11.5%" in layer and "4.2%" in layer  # 9/78 and 3/72
    assert "1.08x" in layer and "step time saved: 6.000 ms" in layer
    assert "77.000" in layer and "1.04x" in layer  # conv only: 80/77; conv only / both 77/74
    kda = _text(prodtime.kda_table(report))
    assert "B8 T8192 16x128 V256" in kda and "25.000" in kda and "1.09x" in kda
    assert "3.00e-03" in kda  # the largest difference from fla
    report["kda"]["agrees"] = False
    assert "DISAGREES" in _text(prodtime.kda_table(report))
    report["kda"] = None
    assert prodtime.kda_table(report) is None
    report["layer"]["kernel_fun"]["engaged"] = False
    assert "NOT ENGAGED" in _text(prodtime.layer_table(report))
    report["layer"] = None
    assert prodtime.layer_table(report) is None


def test_failures_and_json_round_trip(tmp_path):
    report = _report()
    assert prodtime.failures(report) == [
        "conv bwd D2048: kernel-fun disagrees with fla {'dx': 0.3, 'dw': 0.001}"
    ]
    report["layer"]["kernel_fun"]["engaged"] = False
    assert len(prodtime.failures(report)) == 2
    report["kda"]["agrees"] = False
    assert "chunk_kda: kernel-fun disagrees" in prodtime.failures(report)[1]
    path = prodtime.write_report(report, tmp_path / "deep" / "prodtime.json")
    assert json.loads(path.read_text()) == report


runner = CliRunner()


def test_cli_help_and_bad_options():
    result = runner.invoke(prodtime.app, ["--help"])
    assert result.exit_code == 0
    for option in ("--out", "--iters", "--layer-steps", "--layer-precision", "--skip-layer"):
        assert option in result.output
    assert runner.invoke(prodtime.app, ["--iters", "2"]).exit_code == 2
    assert runner.invoke(prodtime.app, ["--layer-precision", "fp8"]).exit_code == 2
    assert runner.invoke(prodtime.app, ["--no-such-option"]).exit_code == 2


def test_cli_without_a_gpu_exits_2_and_writes_nothing(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "prodtime.json"
    result = runner.invoke(prodtime.app, ["--out", str(out)])
    assert result.exit_code == 2
    assert "no CUDA GPU" in result.output
    assert not out.exists()


def test_cli_passes_options_through_and_writes_the_report(tmp_path, monkeypatch):
    """The run's orchestration with the GPU measurements replaced by recorders."""
    calls = []
    template = _report()
    monkeypatch.setattr(prodtime, "_require_gpu", lambda: None)
    monkeypatch.setattr(prodtime, "_device_info", lambda: template["device"])
    monkeypatch.delenv("FLA_CACHE_RESULTS", raising=False)

    def conv(D, iters, warmup, console):
        calls.append(("conv", D, iters, warmup))
        return [dict(r, D=D, agrees=True) for r in template["conv"][:1]]

    def layer(precision, steps, warmup, console):
        calls.append(("layer", precision.value, steps, warmup))
        return template["layer"]

    def kda(iters, warmup, console):
        calls.append(("kda", iters, warmup))
        return template["kda"]

    monkeypatch.setattr(prodtime, "measure_conv", conv)
    monkeypatch.setattr(prodtime, "measure_layer", layer)
    monkeypatch.setattr(prodtime, "measure_kda", kda)
    out = tmp_path / "r.json"
    args = ["--out", str(out), "--iters", "7", "--layer-steps", "4", "--warmup", "2"]
    monkeypatch.setattr(sys, "argv", ["tools/prodtime.py", *args])
    result = runner.invoke(prodtime.app, [*args, "--layer-precision", "bf16"])
    assert result.exit_code == 0, result.output
    assert calls == [
        ("conv", 2048, 7, 2), ("conv", 4096, 7, 2), ("kda", 20, 2), ("layer", "bf16", 4, 2)
    ]  # fmt: skip
    report = json.loads(out.read_text())
    assert [r["D"] for r in report["conv"]] == [2048, 4096]
    assert report["settings"] == {
        "iters": 7,
        "layer_steps": 4,
        "warmup": 2,
        "layer_precision": "bf16",
        "kda_iters": 20,
        "fla_autotune_in_process": report["settings"]["fla_autotune_in_process"],
        "FLA_CACHE_RESULTS_before": None,
    }
    assert os.environ["FLA_CACHE_RESULTS"] == "0"  # fla tunes in the run, not from disk
    assert report["versions"]["kernel_fun"] and report["versions"]["fla"]
    assert report["created"].endswith("+00:00") and "--iters" in report["command"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    assert report["commit"] == (head.stdout.decode().strip() if head.returncode == 0 else None)
    assert "1.08x" in result.output  # the layer table was printed

    calls.clear()
    result = runner.invoke(prodtime.app, ["--out", str(out), "--skip-layer", "--skip-kda"])
    assert result.exit_code == 0 and [c[0] for c in calls] == ["conv", "conv"]
    report = json.loads(out.read_text())
    assert report["layer"] is None and report["kda"] is None


def test_an_unwritable_out_is_refused_before_anything_runs(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(prodtime, "_require_gpu", lambda: ran.append("gpu"))
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    for out, fragment in (
        (tmp_path, "is a folder"),
        (afile / "x.json", "cannot create its folder"),
    ):
        result = runner.invoke(prodtime.app, ["--out", str(out)])
        assert result.exit_code == 2, result.output
        assert fragment in result.output
    assert ran == [] and afile.read_text() == "keep me"
