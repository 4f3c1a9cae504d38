"""The opt-in GPU-test speed-up (package/tests/conftest.py) trims fla's autotune lists."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("fla")
pytest.importorskip("triton")


def _run(code: str, **env) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=os.path.dirname(__file__),
    )


def test_trimming_keeps_the_fewest_stages_then_warps():
    code = """
import conftest
from fla.ops.kda import chunk_bwd
from kernel_fun._testing import autotuners
before = {n: list(t.configs) for n, t in autotuners([chunk_bwd]).items()}
out = conftest.trim_fla_autotune(2)
big = [n for n, cs in before.items() if len(cs) > 2]
assert big, before
for n in big:
    t = autotuners([chunk_bwd])[n]
    assert out[n] == (len(before[n]), 2), out[n]
    order = sorted(before[n], key=lambda c: (c.num_stages, c.num_warps))
    assert t.configs == order[:2]
assert any(n.startswith("fla.ops.kda.chunk_intra") for n in out), sorted(out)
print(len(out))
"""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) >= 10


def test_trimming_refuses_a_non_positive_count():
    proc = _run("import conftest; conftest.trim_fla_autotune(0)")
    assert proc.returncode != 0 and "positive number of configs" in proc.stderr


def test_bad_env_value_stops_pytest_with_the_reason(tmp_path):
    import os

    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--confcutdir", os.path.dirname(__file__), "-c", os.devnull,
         "--rootdir", os.path.dirname(__file__), str(tmp_path / "test_x.py"),
         "-p", "conftest"],
        capture_output=True, text=True, cwd=os.path.dirname(__file__),
        env={**os.environ, "KERNEL_FUN_TEST_FLA_CONFIGS": "three"},
    )  # fmt: skip
    assert proc.returncode != 0
    assert "KERNEL_FUN_TEST_FLA_CONFIGS='three'" in proc.stdout + proc.stderr


def test_paths_outside_package_tests_are_refused(tmp_path):
    import os

    here = os.path.dirname(__file__)
    root = os.path.dirname(os.path.dirname(here))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         os.path.join(root, "tests", "test_readme_numbers.py"),
         os.path.join(here, "test_test_speedup.py")],
        capture_output=True, text=True, cwd=root,
        env={**os.environ, "KERNEL_FUN_TEST_FLA_CONFIGS": "3"},
    )  # fmt: skip
    assert proc.returncode != 0
    assert "for package/tests only" in proc.stdout + proc.stderr
