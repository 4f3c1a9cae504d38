"""tools/kda_ncu_stages.py refuses an unknown stage before it imports torch or needs a GPU."""

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "kda_ncu_stages.py"


def test_unknown_stage_is_refused_with_the_known_ones():
    r = subprocess.run(
        [sys.executable, str(TOOL), "wy", "dhu"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert "'dhu'" in r.stderr and "intra, wy, fwdho" in r.stderr


def test_help_describes_the_tool_without_a_gpu():
    r = subprocess.run(
        [sys.executable, str(TOOL), "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "cudaProfilerStart" in r.stdout and "kda_ncu_stages: unknown" not in r.stdout + r.stderr
