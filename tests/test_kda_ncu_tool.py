"""tools/kda_ncu_stages.py refuses an unknown or repeated stage, and a machine without a GPU,
with one line and exit status 2."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

TOOL = Path(__file__).resolve().parents[1] / "tools" / "kda_ncu_stages.py"


def test_unknown_stage_is_refused_with_the_known_ones():
    r = subprocess.run(
        [sys.executable, str(TOOL), "wy", "dhu"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert "'dhu'" in r.stderr and "intra, intra13, intra14, wy, fwdho" in r.stderr


def test_help_describes_the_tool_without_a_gpu():
    r = subprocess.run(
        [sys.executable, str(TOOL), "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "cudaProfilerStart" in r.stdout and "kda_ncu_stages: unknown" not in r.stdout + r.stderr


def test_a_repeated_stage_is_refused():
    r = subprocess.run(
        [sys.executable, str(TOOL), "intra", "intra"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "'intra' given twice" in r.stderr
    r = subprocess.run(
        [sys.executable, str(TOOL), "-h"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and "cudaProfilerStart" in r.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_a_machine_without_a_gpu_is_refused_in_one_line():
    r = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr and "Traceback" not in r.stderr
