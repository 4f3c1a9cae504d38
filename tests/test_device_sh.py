"""tools/device.sh: a GPU test stage that ran no test (all skipped, none collected) fails with a
clear line in the summary; checked on the CPU through its --verdict and --summary entry points
and through a real stage whose tests all skip without a GPU."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "device.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def sh(*args: str, env: dict[str, str] | None = None, timeout: int = 60):
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize(
    "rc, log, verdict",
    [
        (0, "....\n4 passed in 0.51s\n", "rc=0"),
        (0, "...s\n3 passed, 1 skipped in 0.40s\n", "rc=0"),
        (1, "1 failed, 2 passed, 1 warning in 1.00s\n", "rc=1"),
        (0, "sss\n3 skipped in 0.10s\n", "rc=1 ran no tests (3 skipped in 0.10s)"),
        (
            0,
            "===== 3 skipped, 2 deselected in 0.12s =====\n",
            "rc=1 ran no tests (3 skipped, 2 deselected in 0.12s)",
        ),
        (5, "===== 7 deselected in 0.05s =====\n", "rc=5 ran no tests (7 deselected in 0.05s)"),
        (5, "no tests ran in 0.01s\n", "rc=5 ran no tests (no tests ran in 0.01s)"),
        (0, "", "rc=1 ran no tests (no pytest summary line in the log)"),
        (2, "1 error in 0.30s\n", "rc=2"),
    ],
)
def test_verdict_of_a_pytest_log(tmp_path: Path, rc: int, log: str, verdict: str) -> None:
    path = tmp_path / "stage.log"
    path.write_text(log)
    res = sh("--verdict", str(rc), str(path))
    assert res.stdout.strip() == verdict
    assert res.returncode == (0 if verdict == "rc=0" else 1)


def test_summary_fails_on_any_stage_that_did_not_pass(tmp_path: Path) -> None:
    (tmp_path / "env.rc").write_text("rc=0 3s\n")
    (tmp_path / "bench-001.rc").write_text("rc=0 40s\n")
    (tmp_path / "ladder.rc").write_text("rc=1 9s ran no tests (6 skipped in 0.2s)\n")
    res = sh("--summary", str(tmp_path), "env", "bench", "ladder")
    lines = res.stdout.splitlines()
    assert lines[0] == "=== summary"
    assert [ln.split()[0] for ln in lines[1:]] == ["env", "bench-001", "ladder"]
    assert lines[-1].endswith("rc=1 9s ran no tests (6 skipped in 0.2s)")
    assert res.returncode == 1
    ok = sh("--summary", str(tmp_path), "env", "bench")
    assert ok.returncode == 0


def test_a_real_stage_whose_tests_all_skip_fails(tmp_path: Path) -> None:
    """The `common` stage on a machine without a usable GPU: pytest exits 0, every test
    skipped; the stage and the script fail, and the summary says why."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        "STAGES": "common",
        "OUT": str(out),
        "PY": sys.executable,
        "CUDA_VISIBLE_DEVICES": "",  # skipped even where a GPU is
        "TRITON_CACHE_IN": str(tmp_path / "no-cache"),
        "TRITON_CACHE_DIR": str(tmp_path / "tc"),
    }
    res = sh(env=env, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    log = (out / "common.log").read_text()
    assert " skipped" in log and " passed" not in log
    summary = res.stdout[res.stdout.index("=== summary") :].splitlines()
    (line,) = [ln for ln in summary if ln.strip().startswith("common")]
    assert "rc=1" in line and "ran no tests" in line and "skipped" in line


def _carry_cache(tmp_path: Path, mode: str) -> tuple[Path, Path, str]:
    """One call packs tmp_path/tc1 (a pick and a compiled kernel) with TRITON_CACHE_SAVE=mode,
    a second unpacks its parts into tmp_path/tc2. Returns (tc1, tc2, both calls' output)."""
    first = tmp_path / "tc1"
    (first / "ab12").mkdir(parents=True)
    (first / "ab12" / "chunk_kda_bwd_kernel_intra.autotune.json").write_text(
        '{"configs_timings": [[{"num_warps": 8}, 3.2]]}'
    )
    (first / "cd34").mkdir()
    (first / "cd34" / "chunk_kda_bwd_kernel_intra.cubin").write_bytes(b"\x7fELF" + bytes(4096))
    base = {**os.environ, "STAGES": "common", "PY": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    res = sh(
        env={**base, "OUT": str(tmp_path / "out1"), "TRITON_CACHE_DIR": str(first),
             "TRITON_CACHE_IN": str(tmp_path / "none"), "TRITON_CACHE_SAVE": mode},
        timeout=300,
    )  # fmt: skip
    log = res.stdout + res.stderr
    assert sorted((tmp_path / "out1").glob("tc-all.part-*")), log
    second = tmp_path / "tc2"
    res = sh(
        env={**base, "OUT": str(tmp_path / "out2"), "TRITON_CACHE_DIR": str(second),
             "TRITON_CACHE_IN": str(tmp_path / "out1")},
        timeout=300,
    )  # fmt: skip
    return first, second, log + res.stdout + res.stderr


def test_triton_cache_travels_between_calls(tmp_path: Path) -> None:
    """TRITON_CACHE_SAVE=1 packs the cache into OUT/tc-all.part-*; a later call with those parts
    in TRITON_CACHE_IN finds the same files in its TRITON_CACHE_DIR (what lets a new machine
    skip fla's minutes of autotuning)."""
    first, second, log = _carry_cache(tmp_path, "1")
    for f in first.rglob("*.*"):
        assert (second / f.relative_to(first)).read_bytes() == f.read_bytes(), log


def test_picks_only_cache_carries_the_picks_and_not_the_kernels(tmp_path: Path) -> None:
    """TRITON_CACHE_SAVE=picks packs the *.autotune.json files alone: the next call restores
    the pick byte for byte and none of the compiled kernels beside it."""
    first, second, log = _carry_cache(tmp_path, "picks")
    (pick,) = first.rglob("*.autotune.json")
    assert (second / pick.relative_to(first)).read_text() == pick.read_text(), log
    assert list(first.rglob("*.cubin")) and not list(second.rglob("*.cubin")), log


def test_a_save_replaces_an_earlier_saves_parts(tmp_path: Path) -> None:
    """A second save into the same OUT leaves no part of the first: the restore then reads
    the second save whole (an old -ab part would be appended to the new archive)."""
    out = tmp_path / "out1"
    out.mkdir()
    stale = out / "tc-all.part-zz"
    stale.write_bytes(b"not part of this save")
    first, second, log = _carry_cache(tmp_path, "picks")
    assert not stale.exists(), log
    (pick,) = first.rglob("*.autotune.json")
    assert (second / pick.relative_to(first)).read_text() == pick.read_text(), log
    assert "holds no readable cache" not in log and "unpacked 1 cache files" in log, log


def test_a_cut_off_cache_leaves_no_partial_file(tmp_path: Path) -> None:
    """Parts that end early (one part of two missing): nothing of the archive enters the
    cache, and the log says why and what to do."""
    first = tmp_path / "tc1"
    (first / "ab12").mkdir(parents=True)
    (first / "ab12" / "k.cubin").write_bytes(os.urandom(3 * 1024 * 1024))
    (first / "ab12" / "k.autotune.json").write_text("{}")
    packed = tmp_path / "packed.tgz"
    subprocess.run(["tar", "-czf", str(packed), "-C", str(tmp_path), "tc1"], check=True)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "tc-all.part-aa").write_bytes(packed.read_bytes()[: packed.stat().st_size // 2])
    second = tmp_path / "tc2"
    env = {**os.environ, "STAGES": "common", "PY": sys.executable, "CUDA_VISIBLE_DEVICES": "",
           "OUT": str(tmp_path / "out"), "TRITON_CACHE_DIR": str(second),
           "TRITON_CACHE_IN": str(cut)}  # fmt: skip
    res = sh(env=env, timeout=300)
    assert "holds no readable cache" in res.stderr and "starting cold" in res.stderr, res.stderr
    assert not second.exists() or not [p for p in second.rglob("*") if p.is_file()]


def test_an_unknown_cache_save_mode_is_refused_before_anything_runs(tmp_path: Path) -> None:
    env = {**os.environ, "STAGES": "common", "OUT": str(tmp_path / "out"),
           "PY": sys.executable, "TRITON_CACHE_SAVE": "yes"}  # fmt: skip
    res = sh(env=env, timeout=60)
    assert res.returncode == 2
    assert "TRITON_CACHE_SAVE=yes" in res.stderr and "picks" in res.stderr
    assert not (tmp_path / "out" / "common.log").exists()


def test_the_fsdp2_stage_without_gpus_fails_and_logs_why(tmp_path: Path) -> None:
    """`fsdp2` is a known stage; where no GPU is visible its processes refuse (usage) and
    the stage fails, with the reason in OUT/fsdp2.log."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        "STAGES": "fsdp2",
        "OUT": str(out),
        "PY": sys.executable,
        "CUDA_VISIBLE_DEVICES": "",
        "TRITON_CACHE_IN": str(tmp_path / "no-cache"),
        "TRITON_CACHE_DIR": str(tmp_path / "tc"),
    }
    res = sh(env=env, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "no CUDA GPU visible" in (out / "fsdp2.log").read_text()
    assert (out / "fsdp2.rc").read_text().startswith("rc=1 ")
    assert not (out / "fsdp2.json").exists()


@pytest.mark.parametrize("stage, passed", [("common", True), ("ladder", False)])
def test_pytest_workers_reach_the_test_groups_but_not_the_ladder(
    tmp_path: Path, stage: str, passed: bool
) -> None:
    """PYTEST_WORKERS=N adds `-n N` to the compile-bound groups' pytest, never to the ladder's
    (its tests time the GPU). A stand-in `xdist` module passes the script's import check."""
    out = tmp_path / "out"
    fake = tmp_path / "fake"
    (fake / "xdist").mkdir(parents=True)
    (fake / "xdist" / "__init__.py").write_text("")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]),
        "STAGES": stage,
        "OUT": str(out),
        "PY": sys.executable,
        "PYTEST_WORKERS": "3",
        "CUDA_VISIBLE_DEVICES": "",
        "TRITON_CACHE_IN": str(tmp_path / "no-cache"),
        "TRITON_CACHE_DIR": str(tmp_path / "tc"),
    }
    res = sh(env=env, timeout=300)
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith(f"=== {stage}: ")]
    assert (" -n 3 " in line) is passed, line


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_gpu_test_fails_when_no_test_ran(tmp_path: Path) -> None:
    """`make gpu-test` on a machine where every GPU test skips (no usable GPU) fails, and says
    why, instead of passing green."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PY": sys.executable}
    res = subprocess.run(
        ["make", "-s", "gpu-test", f"OUT={tmp_path}", f"PY={sys.executable}"],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode != 0, res.stdout[-2000:]
    assert "ran no tests" in res.stdout and "skipped" in res.stdout
    assert (tmp_path / "gpu-test.log").is_file()


@pytest.mark.parametrize(
    "extra, needle",
    [
        ({"STAGES": "   "}, "STAGES is empty"),
        ({"STAGES": "cconv+"}, "empty stage"),
        ({"STAGES": "cconv++kda"}, "empty stage"),
        ({"STAGES": "bogus"}, "unknown stage 'bogus'"),
        ({"STAGES": "common", "PYTEST_WORKERS": "abc"}, "positive number"),
        ({"STAGES": "common", "PYTEST_WORKERS": "0"}, "positive number"),
        ({"STAGES": "common", "STAGE_TIMEOUT": "10m"}, "positive number of seconds"),
        ({"STAGES": "common", "STAGE_TIMEOUT": "0"}, "positive number of seconds"),
        ({"STAGES": "bench", "BENCH_PLAN": "cconv 007"}, "BENCH_PLAN entry 'cconv 007'"),
        ({"STAGES": "bench", "BENCH_PLAN": " ; ;"}, "has no entry"),
        ({"STAGES": "bench", "BENCH_PLAN": "cconv 0;7 prod"}, "BENCH_PLAN entry 'cconv 0'"),
        ({"STAGES": "bench", "BENCH_PLAN": "cconv --help prod"}, "entry 'cconv --help prod'"),
        ({"STAGES": "bench", "BENCH_PLAN": "cconv 007 prod\nkda 004 v128"}, "line break"),
        ({"STAGES": "drift", "BENCH_PLAN": "cconv 007 prod"}, "has no bench stage"),
        (
            {"STAGES": "bench", "BENCH_PLAN": "cconv 007 prod", "BENCH_IDEAS": "001"},
            "BENCH_PLAN and BENCH_IDEAS are both set",
        ),
    ],
)
def test_bad_settings_are_refused_before_anything_runs(tmp_path: Path, extra, needle) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PY": sys.executable, **extra}
    res = sh(env=env)
    assert res.returncode == 2 and needle in res.stderr, res.stderr
    assert not out.exists()  # nothing made, nothing run


def fake_python(tmp_path: Path, body: str) -> str:
    """An executable standing in for PY: passes device.sh's `PY -c "import fla, libcst"`
    check, and runs `body` (bash) for every other call."""
    path = tmp_path / "fake-python"
    path.write_text(f"#!/usr/bin/env bash\nif [[ $1 == -c ]]; then exit 0; fi\n{body}\n")
    path.chmod(0o755)
    return str(path)


def fake_run_env(tmp_path: Path, body: str, **settings: str) -> dict[str, str]:
    """device.sh's environment for a run with a stand-in PY (fake_python(body)), OUT at
    tmp_path/out, no Triton cache to unpack, and `settings` (STAGES, STAGE_TIMEOUT, ...)."""
    return {
        **os.environ,
        "OUT": str(tmp_path / "out"),
        "PY": fake_python(tmp_path, body),
        "TRITON_CACHE_IN": str(tmp_path / "no-cache"),
        "TRITON_CACHE_DIR": str(tmp_path / "tc"),
        **settings,
    }


def test_stage_timeout_stops_a_stage_and_the_run_goes_on(tmp_path: Path) -> None:
    """A stage past STAGE_TIMEOUT is stopped, says so in its .rc and log, and the stages after
    it still run (what a call with a time limit needs to bring its records back)."""
    out = tmp_path / "out"
    body = 'if [[ $1 == tools/drift.py ]]; then sleep 60; fi; echo ran "$@"'
    env = fake_run_env(tmp_path, body, STAGES="drift prodtime", STAGE_TIMEOUT="2")
    res = sh(env=env, timeout=50)
    assert res.returncode == 1, res.stdout + res.stderr
    rc = (out / "drift.rc").read_text()
    assert rc.startswith("rc=124 ") and "stopped at STAGE_TIMEOUT=2s" in rc, rc
    assert "stopped at STAGE_TIMEOUT=2s" in (out / "drift.log").read_text()
    assert (out / "prodtime.rc").read_text().startswith("rc=0 ")
    assert "ran tools/prodtime.py" in (out / "prodtime.log").read_text()


def test_a_stage_that_dies_early_is_not_reported_as_timed_out(tmp_path: Path) -> None:
    # killed (137, as by the kernel's OOM killer) after 0 s, well before STAGE_TIMEOUT
    out = tmp_path / "out"
    env = fake_run_env(tmp_path, "kill -9 $$", STAGES="drift", STAGE_TIMEOUT="600")
    res = sh(env=env, timeout=50)
    assert res.returncode == 1, res.stdout + res.stderr
    rc = (out / "drift.rc").read_text()
    assert rc.startswith("rc=137 ") and "STAGE_TIMEOUT" not in rc, rc


def test_stopping_the_run_stops_a_stage_under_stage_timeout(tmp_path: Path) -> None:
    # A call's own time limit signals the run's process group: a stage under STAGE_TIMEOUT
    # must not outlive it, still holding the GPU.
    marker = tmp_path / "still-running"
    env = fake_run_env(tmp_path, f"sleep 8; touch {marker}", STAGES="drift", STAGE_TIMEOUT="100")
    proc = subprocess.Popen(["bash", str(SCRIPT)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGTERM)  # what `timeout` does to the call's command group
    proc.wait(timeout=20)
    time.sleep(8)
    assert not marker.exists(), "the stage ran on after the run was stopped"


def test_bench_plan_runs_each_entry_with_its_own_shapes_and_options(tmp_path: Path) -> None:
    out = tmp_path / "out"
    plan = "cconv 007 packed-131072-d2048,prod ; kda 004 v128 --knob KDA_WY_WARPS=4;"
    env = fake_run_env(tmp_path, 'echo args: "$@"', STAGES="bench", BENCH_PLAN=plan)
    res = sh(env=env, timeout=50)
    assert res.returncode == 0, res.stdout + res.stderr
    first = (out / "bench-1-cconv-007.log").read_text().strip()
    second = (out / "bench-2-kda-004.log").read_text().strip()
    assert first == "args: -m ladder bench cconv 007 --shapes packed-131072-d2048,prod", first
    assert second == "args: -m ladder bench kda 004 --shapes v128 --knob KDA_WY_WARPS=4", second
    assert "bench-1-cconv-007" in res.stdout and "bench-2-kda-004" in res.stdout
    assert (out / "records.tar").is_file()


def test_bench_records_are_packed_after_each_entry(tmp_path: Path) -> None:
    """A run stopped from outside during a later bench entry (a call's own time limit) still
    leaves the records of the entries before it in $OUT/records.tar."""
    root = tmp_path / "tree"
    (root / "tools").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "tools" / "device.sh")
    (root / "ladder" / "kernels").mkdir(parents=True)
    rec = "ladder/kernels/toy/ideas/001-a/records/r1.json"
    body = (
        f'if [[ " $* " == *" 001 "* ]]; then mkdir -p {Path(rec).parent} && echo {{}} > {rec}; '
        "else sleep 60; fi"
    )
    env = fake_run_env(tmp_path, body, STAGES="bench", BENCH_PLAN="toy 001 s; toy 002 s")
    proc = subprocess.Popen(["bash", str(root / "tools" / "device.sh")], env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    out = tmp_path / "out"
    try:
        deadline = time.monotonic() + 30
        while not (out / "bench-2-toy-002.log").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    with tarfile.open(out / "records.tar") as tar:
        assert tar.getnames() == [rec]


@pytest.mark.parametrize(
    "smi_out, smi_rc, apart",
    [("81559\n", 0, True), ("143771\n", 0, False), ("143771\n81559\n", 0, True),
     ("", 0, False), ("[N/A]\n", 0, False), (" 81559 \n", 0, True),
     ("NVML library version: 580.159\n", 9, False)],
)  # fmt: skip
def test_the_layer_group_runs_apart_on_a_gpu_under_100000_mib(
    tmp_path: Path, smi_out: str, smi_rc: int, apart: bool
) -> None:
    """A joined group holding `layer` runs its other members together and then `layer` alone
    when the smallest GPU nvidia-smi lists has under 100000 MiB (an 80 GB H100: the layer
    group ran out of memory beside the others there); on an H200, or where nvidia-smi fails or
    prints no number, the group runs joined. A stand-in nvidia-smi on PATH gives the memory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    (tmp_path / "smi.txt").write_text(smi_out)
    smi.write_text(f"#!/usr/bin/env bash\ncat {tmp_path / 'smi.txt'}\nexit {smi_rc}\n")
    smi.chmod(0o755)
    env = fake_run_env(
        tmp_path,
        'sleep 1; echo "1 passed in 0.01s"',
        STAGES="kda+layer+common",
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    res = sh(env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()

    def at(prefix: str) -> int:
        return next(i for i, ln in enumerate(lines) if ln.startswith(prefix))

    starts = [at(f"=== {s}: ") for s in ("kda", "common", "layer")]
    ends = [at(f"=== {s} done: ") for s in ("kda", "common", "layer")]
    assert max(starts[:2]) < min(ends[:2])  # kda and common always run together
    assert (starts[2] > max(ends[:2])) is apart, res.stdout
    assert ("layer group runs after kda+common" in res.stderr) is apart, res.stderr
    for s in ("kda", "layer", "common"):
        assert (tmp_path / "out" / f"{s}.rc").read_text().startswith("rc=0 ")


@pytest.mark.parametrize("seed", ["1", "0"])
def test_fla_picks_are_seeded_before_the_stages_and_checked_after(
    tmp_path: Path, seed: str
) -> None:
    """tools/seed_picks.py runs before any stage and again with --verify after the last one,
    its output in $OUT/seed-picks.log; SEED_PICKS=0 runs neither."""
    out = tmp_path / "out"
    stamp = tmp_path / "order.txt"
    body = f'echo "$*" >> {stamp}; echo ran "$@"'
    env = fake_run_env(tmp_path, body, STAGES="drift", SEED_PICKS=seed)
    res = sh(env=env, timeout=50)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = stamp.read_text().splitlines()
    if seed == "0":
        assert not any("seed_picks" in c for c in calls)
        assert not (out / "seed-picks.log").exists()
        return
    assert calls[0] == "tools/seed_picks.py" and calls[-1] == "tools/seed_picks.py --verify"
    assert any(c.startswith("tools/drift.py") for c in calls[1:-1])
    log = (out / "seed-picks.log").read_text()
    assert "ran tools/seed_picks.py" in log and "ran tools/seed_picks.py --verify" in log
