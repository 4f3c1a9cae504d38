"""tools/kda_host_cpu.py: the host-path comparison of kda chains on the CPU (Triton's launches
stubbed out) counts what each chain launches, and refuses bad arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "kda_host_cpu.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_counts_each_chains_launches_and_autotuned_launches(tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    # five interleaved rounds: the report's medians then hold against one round that a busy
    # host slowed (with one round, a forward block once took twice the forward+backward's)
    proc = _run("022", "024", "--calls", "3", "--rounds", "5", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    i22, i24 = rep["ideas"]["022"], rep["ideas"]["024"]
    # the same 19 launches per forward+backward; kda/022 takes 11 of them through fla's
    # autotuners (tests/test_kda_024.py names them), kda/024 none
    assert i22["launches"] == i24["launches"] == 19
    assert (i22["autotuned"], i24["autotuned"]) == (11, 0)
    for r in (i22, i24):
        assert 0 < r["fwd_us"] < r["fwdbwd_us"]
    assert "kda/024: forward" in proc.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("022", "--calls", "0"), "--calls and --rounds must be positive"),
        (("022", "--shape", "1,2,3"), "--shape must be five ints"),
        (("999",), "no kda idea '999'"),
        (("22",), "no kda idea '22'"),
        (("022", "--shape", "0,0,0,0,0"), "every size must be positive"),
        (("022", "--shape", "1,256,2,300,64"), "K at most 128"),
        (("022", "--out", "/"), "give a file path in an existing folder"),
        (
            ("022", "--out", "/nonexistent-folder-kf/x.json"),
            "give a file path in an existing folder",
        ),
    ],
)
def test_refuses_bad_arguments(args: tuple[str, ...], fragment: str) -> None:
    proc = _run(*args)
    assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr[-2000:]


def test_an_existing_report_is_kept_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    out.write_text('{"precious": true}\n')
    proc = _run("024", "--calls", "1", "--rounds", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (kept,) = tmp_path.glob("host.prev-*.json")
    assert json.loads(kept.read_text()) == {"precious": True}
    assert "024" in json.loads(out.read_text())["ideas"]
    assert f"the earlier file is kept as {kept}" in proc.stderr
