"""tools/warm.py: the config split between warm processes, the autotuner patch (its share of
configurations, no disk-cached picks) and the process fan-out, on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

triton = pytest.importorskip("triton")

import warm  # noqa: E402


@pytest.mark.parametrize("n_cfg", [1, 3, 8, 13])
@pytest.mark.parametrize("n", [1, 4, 8])
def test_shares_cover_every_config_once_and_none_is_empty(n_cfg: int, n: int) -> None:
    cfgs = list(range(n_cfg))
    shares = [warm.share(cfgs, i, n) for i in range(n)]
    assert all(shares), shares
    if n_cfg >= n:  # each configuration compiled by exactly one process
        assert sorted(c for s in shares for c in s) == cfgs
    else:  # every configuration is someone's, and each process runs one
        assert {c for s in shares for c in s} == set(cfgs)
        assert all(len(s) == 1 for s in shares)


@pytest.mark.parametrize("text", ["", "1", "a/b", "3/3", "-1/2", "1/0"])
def test_bad_part_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="KF_WARM_PART"):
        warm.parse_part(text)


def test_patch_gives_each_autotuner_its_share_and_turns_disk_picks_off(monkeypatch) -> None:
    from triton.runtime.autotuner import Autotuner

    # patch_autotuner replaces class attributes: undo them after the test
    monkeypatch.setattr(Autotuner, "prune_configs", Autotuner.prune_configs)
    monkeypatch.setattr(Autotuner, "run", Autotuner.run)

    @triton.jit
    def k(x, BLOCK: triton.language.constexpr):
        pass

    cfgs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128, 256)]
    tuned = triton.autotune(configs=cfgs, key=[], cache_results=True)(k)
    warm.patch_autotuner(1, 2)
    got = [c.kwargs["BLOCK"] for c in tuned.prune_configs({})]
    assert got == [32, 128]
    seen = {}

    def fake_run(self, *a, **kw):  # what the original run would see
        seen["cache_results"] = self.cache_results

    # the patch wraps the run in effect when it was applied; re-apply over a stand-in
    monkeypatch.setattr(Autotuner, "run", fake_run)
    warm.patch_autotuner(0, 1)
    tuned.cache_results = True
    tuned.run()
    assert seen == {"cache_results": False}


def test_fan_out_runs_each_part_once_and_reports_a_failure(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "import os, sys\n"
        "from triton.runtime.autotuner import Autotuner\n"
        "part = os.environ['KF_WARM_PART']\n"
        "print('part', part, Autotuner.prune_configs.__name__, sys.argv[1:])\n"
        "sys.exit(3 if part == '2/3' else 0)\n"
    )
    logs = tmp_path / "logs"
    cmd = [sys.executable, str(ROOT / "tools" / "warm.py"), "-j", "3", "--logs", str(logs)]
    r = subprocess.run([*cmd, "--", str(script), "x", "--y"], capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    assert "warm process 2/3 exited 3" in r.stderr
    for i in range(3):
        text = (logs / f"warm-{i}.log").read_text()
        assert f"part {i}/3 prune_share ['x', '--y']" in text, text


def test_no_command_is_a_usage_error() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "warm.py"), "-j", "2"], capture_output=True,
        text=True,
    )  # fmt: skip
    assert r.returncode == 2 and "give the command after --" in r.stderr


def test_module_command_runs_as_main(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "warm.py"), "-j", "2", "--logs", str(logs), "--",
         "-m", "platform", "--terse"], capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    import platform

    for i in range(2):
        assert (logs / f"warm-{i}.log").read_text().strip() == platform.platform(terse=True)


def test_stopping_the_parent_stops_the_warm_processes(tmp_path: Path) -> None:
    import os
    import signal
    import time

    script = tmp_path / "sleep.py"
    script.write_text("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n")
    logs = tmp_path / "logs"
    p = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "warm.py"), "-j", "2", "--logs", str(logs), "--",
         str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    pids = []
    for _ in range(200):
        texts = [(logs / f"warm-{i}.log") for i in range(2)]
        pids = [int(t.read_text()) for t in texts if t.exists() and t.read_text().strip()]
        if len(pids) == 2:
            break
        time.sleep(0.05)
    assert len(pids) == 2
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 128 + signal.SIGTERM
    for pid in pids:
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"warm process {pid} still runs")


def test_ladder_mode_checks_its_options(tmp_path: Path) -> None:
    warm_py = [sys.executable, str(ROOT / "tools" / "warm.py"), "-j", "1"]
    both = subprocess.run(
        [*warm_py, "--ladder", "toy", "1", "prod", "--", "x.py"], capture_output=True, text=True
    )
    assert both.returncode == 2 and "not both" in both.stderr
    stray = subprocess.run(
        [*warm_py, "--knob", "A=1", "--", "x.py"], capture_output=True, text=True
    )
    assert stray.returncode == 2 and "--knob goes with --ladder" in stray.stderr


def test_ladder_mode_runs_the_family_workload_in_each_process(tmp_path: Path, monkeypatch) -> None:
    # the child side, in process: every shape, idea then baseline, through the family's run
    calls = []

    class Fam:
        BASELINE = "fla"

        @staticmethod
        def make_inputs(shape, device, seed):
            return (shape.name, device)

        @staticmethod
        def run(impl, inputs, poison):
            poison([])
            calls.append((impl, inputs))

    class Shape:
        def __init__(self, name):
            self.name = name

    import types

    from ladder import bench, paths, prepare

    torch = pytest.importorskip("torch")
    monkeypatch.setattr(paths, "load_family", lambda family, complete: Fam)
    monkeypatch.setattr(
        bench, "select_shapes", lambda fam, which, sets: [Shape(n) for n in which.split(",")]
    )
    got_knobs = []

    def prep(family, idea, knobs, load):
        got_knobs.append((family, idea, list(knobs)))
        return types.SimpleNamespace(module="idea")

    monkeypatch.setattr(prepare, "prepare_idea", prep)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    warm.ladder_workload("toy", "7", "a,b", ["K=1"])
    assert got_knobs == [("toy", "7", ["K=1"])]
    assert calls == [
        ("idea", ("a", "cuda")), ("fla", ("a", "cuda")),
        ("idea", ("b", "cuda")), ("fla", ("b", "cuda")),
    ]  # fmt: skip
