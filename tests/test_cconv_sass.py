"""tools/cconv_sass.py compiles cconv ideas' dense kernels for sm90 on the CPU and reads their
registers and SASS with Triton's own cuobjdump."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

pytest.importorskip("triton")


@pytest.mark.slow
def test_004_doubles_the_mufu_ops_of_001_and_spills_nothing() -> None:
    import cconv_sass

    try:
        s1 = cconv_sass.idea_stats("001", 4, 4, None)
        s4 = cconv_sass.idea_stats("004", 4, 4, None)
    except FileNotFoundError as exc:
        pytest.skip(f"this Triton has no sm90 tools: {exc}")
    for s in (s1, s4):
        for kernel in ("fwd", "bwd"):
            assert s[kernel]["regs"] and s[kernel]["stack"] == 0, s
            assert s[kernel]["instrs"] > s[kernel]["mufu"] + s[kernel]["fp32"] > 0, s
    for kernel in ("fwd", "bwd"):
        # 001: one tanh per element; 004: one ex2 and one rcp; the same loads and stores
        assert s4[kernel]["mufu"] == 2 * s1[kernel]["mufu"], (s1, s4)
        assert s4[kernel]["mem"] == s1[kernel]["mem"], (s1, s4)
        assert s4[kernel]["instrs"] > s1[kernel]["instrs"], (s1, s4)


def test_an_unknown_idea_exits_2() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "cconv_sass.py"), "999"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2 and "i999" in proc.stderr, proc.stderr[-2000:]
