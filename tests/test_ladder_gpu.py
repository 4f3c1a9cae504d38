"""GPU tests of the ladder: an end-to-end prod bench of the strip kernel, GPU correctness
checks, and the CUDA-event timer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ladder import paths, records

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]


def _ladder(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    return subprocess.run(
        [sys.executable, "-m", "ladder", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bench_prod_end_to_end(tmp_path: Path) -> None:
    idea_records = paths.idea_dir("cconv", "001") / "records"
    before = sorted(p.name for p in idea_records.iterdir())
    proc = _ladder(
        "bench", "cconv", "001", "--shapes", "prod", "--allow-dirty", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (path,) = tmp_path.glob("*.json")
    assert f"record: {path}" in proc.stdout
    rec = records.read_record(path)  # validates the schema
    assert rec["status"] == "passed" and rec["error"] is None
    assert rec["idea"] == "001-strip-onepass" and rec["family"] == "cconv"
    assert int(rec["device"]["capability"].split(".")[0]) >= 9
    assert rec["device"]["l2_bytes"] > 0 and rec["device"]["sm_count"] > 0
    assert {"CCONV_TARGET_PROGRAMS", "CCONV_FAST_SIGMOID", "CCONV_AUTOTUNE"} <= set(rec["knobs"])
    assert 0.5 < rec["copy_ceiling_TBps"] < 20
    (prod,) = rec["shapes"]
    assert (prod["name"], prod["B"], prod["T"], prod["D"], prod["W"]) == ("prod", 16, 8192, 2048, 4)
    corr = prod["correctness"]
    assert corr["passed"] is True
    for out in ("y", "dx", "dw"):
        assert corr["candidate_err"][out] <= 1.10 * corr["baseline_err"][out] + 1e-6
    for d in ("fwd", "bwd"):
        t = prod[d]
        assert t["candidate_ms"]["n"] == t["baseline_ms"]["n"] == 8 * 25
        # nothing moves its minimum bytes much faster than a plain device copy
        assert 0 < t["fraction_of_copy"] < 1.3
    assert prod["fwdbwd"]["candidate_ms"]["median"] > 0
    # one fwd+bwd at prod holds at least its outputs y, dx (2 x 512 MiB of bf16) at its peak
    for side in ("candidate", "baseline"):
        assert prod["peak_mem_bytes"][side] >= 2 * 16 * 8192 * 2048 * 2
        for d in ("fwd", "fwdbwd"):
            assert 0 < prod["host_us"][d][side] < 100_000
    assert 0 < prod["host_us"]["torch_op"] < prod["host_us"]["fwdbwd"]["baseline"]
    assert prod["host_us"]["torch_op"] < prod["host_us"]["torch_op_fwdbwd"]
    assert records.prod_ratio(rec) is not None
    assert sorted(p.name for p in idea_records.iterdir()) == before


@pytest.mark.parametrize("idea", ["000", "001"])
def test_check_small_shapes_on_the_gpu(idea: str) -> None:
    proc = _ladder("check", "cconv", idea, "--shapes", "small", timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "passed:" in proc.stdout and "FAILED" not in proc.stdout


def test_cuda_clock_scales_with_work() -> None:
    import torch

    from ladder import timing

    n = 256 << 20
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    half_a, half_b = a[: n // 2], b[: n // 2]
    ms = timing.time_interleaved(
        {"full": lambda i: b.copy_(a), "half": lambda i: half_b.copy_(half_a)}, rounds=4, reps=10
    )
    full, half = timing.summarize(ms["full"])["median"], timing.summarize(ms["half"])["median"]
    assert 0 < half < full
    assert 1.5 < full / half < 2.5


def test_queued_sleep_hides_launch_overhead() -> None:
    """A tiny op is launch-bound when timed back to back from an idle queue; with the GPU
    sleep queued ahead of each block, the events see its device time only."""
    import torch

    from ladder import timing

    a = torch.ones(1024, device="cuda")
    b = torch.empty_like(a)

    def op(i: int) -> None:
        for _ in range(20):
            b.copy_(a)

    kw = {"rounds": 4, "reps": 20}
    plain = timing.time_interleaved({"op": op}, clock=timing.CudaClock(preload=False), **kw)
    queued = timing.time_interleaved({"op": op}, clock=timing.CudaClock(), **kw)
    t_plain = timing.summarize(plain["op"])["median"]
    t_queued = timing.summarize(queued["op"])["median"]
    assert 0 < t_queued < t_plain
