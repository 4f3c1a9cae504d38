"""tools/kda_fla_configs.py: finding fla's autotuned kernels, widening them, reading gains."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("fla")
triton = pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("kda_fla_configs", ROOT / "tools/kda_fla_configs.py")
tool = importlib.util.module_from_spec(spec)
sys.modules["kda_fla_configs"] = tool
spec.loader.exec_module(tool)


def test_every_default_kernel_is_an_autotuned_fla_kernel():
    tuners = tool.autotuners()
    assert set(tool.DEFAULT_KERNELS) <= set(tuners), sorted(set(tool.DEFAULT_KERNELS) - set(tuners))


def test_wider_adds_only_new_launches_above_each_config():
    a = triton.Config({"BK": 64}, num_warps=4, num_stages=2)
    b = triton.Config({"BK": 64}, num_warps=8, num_stages=2)
    c = triton.Config({"BK": 32}, num_warps=16, num_stages=3)
    new = tool.wider([a, b, c])
    keys = [tool.config_key(x) for x in new]
    # a gains 16 warps only (its 8-warp copy is b); b gains 16; c nothing; no duplicates
    assert keys == [((("BK", 64),), 16, 2)]
    assert len(set(keys)) == len(keys)


class _Tuner:
    def __init__(self, configs):
        self.configs = configs
        self.cache = {"old": 1}
        self.configs_timings = None

    def run(self, timings):
        self.configs_timings = timings
        return "ran"


def test_widen_logs_each_benchmark_and_best_rows_compares_with_fla_s_own():
    a = triton.Config({"BK": 64}, num_warps=4, num_stages=2)
    t = _Tuner([a])
    fla_keys, log = tool.widen(t)
    assert t.cache == {} and len(t.configs) == 3  # a, a at 8 warps, a at 16 warps
    wide8, wide16 = t.configs[1:]
    assert t.run({a: [2.0, 1.9, 2.1], wide8: [1.5, 1.4, 1.6], wide16: [float("inf")] * 3}) == "ran"
    t.run(t.configs_timings)  # the same dict again: a cache hit, not a new benchmark
    assert len(log) == 1
    (row,) = tool.best_rows(fla_keys, log)
    assert row["fla_ms"] == 2.0 and row["best_ms"] == 1.5 and row["gain_ms"] == 0.5
    assert row["best_config"] == str(wide8) and row["fla_config"] == str(a)
    assert wide8.num_warps == 8 and wide16.num_warps == 16


def test_without_a_gpu_it_says_so(tmp_path):
    import subprocess

    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/kda_fla_configs.py"), "--out", str(tmp_path / "r.json")],
        capture_output=True, text=True, env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    if proc.returncode == 0:
        pytest.fail("ran without a GPU")
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr, proc.stderr[-1000:]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--kernels", ","], "names no kernel"),
        (["--K", "300"], "K <= 256"),
        (["--out", "{tmp}"], "is a folder"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(tmp_path, args, needle):
    import subprocess

    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "r.json")]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/kda_fla_configs.py"), *args],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr[-1000:]
