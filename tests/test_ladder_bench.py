"""The bench orchestration on a CPU stand-in machine (the toy family runs anywhere): records,
provenance, status handling, no partial record after a crash, git state."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ladder import bench, codehash, paths, records, timing
from tests.fixtures.ladder.helpers import copy_toy, idea_path


class CpuRuntime(bench.GpuRuntime):
    """The real measurement (correctness, copy ceiling, interleaved timing) on the CPU with
    wall-clock timing, under a device name that matches the toy family's target."""

    def unavailable(self):
        return None

    def device_info(self):
        return {
            "name": "NVIDIA H200 (CPU stand-in)",
            "capability": "9.0",
            "driver": "none",
            "sm_count": 1,
            "l2_bytes": 1 << 16,
            "memory_bytes": 1 << 30,
        }

    def clocks(self):
        return {}

    def measure(self, state):
        bench.measure(
            state, device="cpu", clock=timing.WallClock(), l2_bytes=1 << 16, copy_bytes=1 << 20
        )


@pytest.fixture
def root(tmp_path: Path, monkeypatch) -> Path:
    r = copy_toy(tmp_path)
    monkeypatch.setenv("LADDER_COMMIT", "c" * 40)
    monkeypatch.setenv("LADDER_DIRTY", "0")
    for key in ("TOY_FAST", "TOY_BLOCK"):
        monkeypatch.delenv(key, raising=False)
    return r


def _opts(root: Path, idea: str, **kw) -> bench.BenchOptions:
    base = {"family": "toy", "idea": idea, "shapes": "all", "rounds": 2, "reps": 2, "root": root}
    base.update(kw)
    return bench.BenchOptions(**base)


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_passed_record_from_a_full_run(root: Path) -> None:
    steps: list[tuple[str, float, float]] = []
    rec, path = bench.run_bench(
        _opts(root, "1", knobs=["TOY_BLOCK=128"]),
        runtime=CpuRuntime(),
        progress=lambda d, a, t: steps.append((d, a, t)),
    )
    assert path.parent == idea_path(root, "001-fast") / "records"
    assert path.name == f"{rec['record_id']}.json"
    back = records.read_record(path)
    assert back["status"] == "passed" and back["error"] is None
    assert [s["name"] for s in back["shapes"]] == ["prod", "d16-w2"]
    assert back["knobs"] == {"TOY_BLOCK": 128, "TOY_FAST": True}
    assert back["commit"] == "c" * 40 and back["dirty"] is False
    assert back["commit_source"] == "env"
    assert back["code_sha"] == codehash.code_sha(
        codehash.idea_files_from_dir(idea_path(root, "001-fast"))
    )
    assert back["related_code_sha"] == {
        "000-base": codehash.code_sha(codehash.idea_files_from_dir(idea_path(root, "000-base")))
    }
    assert back["harness_sha"] == codehash.harness_sha()
    # the fixture already holds records of this code: the oldest one is where it dates from
    same = [
        r
        for r in records.load_idea_records(idea_path(root, "001-fast"))
        if r["code_sha"] == back["code_sha"]
    ]
    assert back["code_unchanged_since"] == min(same, key=lambda r: r["created"])["record_id"]
    assert back["code_unchanged_since"] != back["record_id"]
    for s in back["shapes"]:
        assert s["correctness"]["passed"] is True
        assert s["rotation_sets"] >= 1
        for d in ("fwd", "bwd"):
            t = s[d]
            assert t["candidate_ms"]["n"] == 4 and t["baseline_ms"]["n"] == 4
            shape = next(
                x
                for x in paths.load_family("toy", root).SHAPES["prod"]
                + paths.load_family("toy", root).SHAPES["sweep"]
                if x.name == s["name"]
            )
            assert t["min_bytes"] == paths.load_family("toy", root).min_bytes(shape, d)
            want = (
                t["min_bytes"]
                / (t["candidate_ms"]["median"] * 1e-3)
                / 1e12
                / back["copy_ceiling_TBps"]
            )
            assert t["fraction_of_copy"] == pytest.approx(want)
        assert s["fwdbwd"]["ratio"] == pytest.approx(
            s["fwdbwd"]["baseline_ms"]["median"] / s["fwdbwd"]["candidate_ms"]["median"]
        )
    assert back["copy"]["bytes"] == 2 << 20
    assert steps and steps[-1][2] == pytest.approx(sum(a for _, a, _ in steps))


def test_first_record_of_new_code_dates_from_itself_then_chains(
    tmp_path: Path, monkeypatch
) -> None:
    root = copy_toy(tmp_path, records=False)
    monkeypatch.setenv("LADDER_COMMIT", "d" * 40)
    monkeypatch.setenv("LADDER_DIRTY", "0")
    first, p1 = bench.run_bench(_opts(root, "0", shapes="prod"), runtime=CpuRuntime())
    assert first["code_unchanged_since"] == first["record_id"]
    second, p2 = bench.run_bench(_opts(root, "0", shapes="prod"), runtime=CpuRuntime())
    assert second["code_unchanged_since"] == first["record_id"]
    assert p1 != p2 and p1.exists() and p2.exists()


def test_out_dir_and_unique_ids(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    rec1, p1 = bench.run_bench(_opts(root, "0", shapes="prod", out=out), runtime=CpuRuntime())
    rec2, p2 = bench.run_bench(_opts(root, "0", shapes="prod", out=out), runtime=CpuRuntime())
    assert p1.parent == p2.parent == out and p1 != p2
    assert rec1["record_id"] != rec2["record_id"]
    assert all(not n.endswith(".tmp") for n in _files(out))
    assert not (idea_path(root, "000-base") / "records" / p1.name).exists()


def test_incorrect_idea_gets_no_timing(root: Path) -> None:
    rec, path = bench.run_bench(_opts(root, "3", out=root / "out"), runtime=CpuRuntime())
    assert rec["status"] == "incorrect"
    assert rec["copy_ceiling_TBps"] is None
    for s in rec["shapes"]:
        assert s["correctness"]["passed"] is False
        assert not {"fwd", "bwd", "fwdbwd"} & set(s)
    records.read_record(path)


def test_exception_gives_an_error_record(root: Path) -> None:
    class Failing(CpuRuntime):
        """Fails in the middle of timing, after prod's fwd was timed."""

        def measure(self, state):
            inner = state.progress

            def progress(desc: str, advance: float) -> None:
                if desc.startswith("prod bwd"):
                    raise RuntimeError("compile failed: out of registers")
                inner(desc, advance)

            state.progress = progress
            super().measure(state)

    logs: list[str] = []
    rec, path = bench.run_bench(
        _opts(root, "0", out=root / "out"), runtime=Failing(), log=logs.append
    )
    assert rec["status"] == "error"
    assert rec["error"] == "RuntimeError: compile failed: out of registers"
    assert "Traceback" in logs[0]
    back = records.read_record(path)
    assert [s["name"] for s in back["shapes"]] == ["prod", "d16-w2"]
    for s in back["shapes"]:
        assert s["correctness"]["passed"] is True
        assert not {"fwd", "bwd", "fwdbwd"} & set(s)  # the fwd timing done before is dropped
    assert back["copy_ceiling_TBps"] is None


def test_interrupt_mid_bench_leaves_no_record(root: Path) -> None:
    out = root / "out"
    seen: list[str] = []

    def progress(desc: str, advance: float, total: float) -> None:
        seen.append(desc)
        if "bwd" in desc:
            raise KeyboardInterrupt

    before = _files(idea_path(root, "000-base") / "records")
    with pytest.raises(KeyboardInterrupt):
        bench.run_bench(_opts(root, "0", out=out), runtime=CpuRuntime(), progress=progress)
    assert any("fwd" in d for d in seen)  # it was interrupted in the middle of timing
    assert _files(out) == []
    assert _files(idea_path(root, "000-base") / "records") == before


def test_dirty_or_unknown_commit_needs_allow_dirty(root: Path, monkeypatch) -> None:
    monkeypatch.setenv("LADDER_DIRTY", "1")
    with pytest.raises(paths.LadderError, match="uncommitted changes"):
        bench.run_bench(_opts(root, "0", shapes="prod"), runtime=CpuRuntime())
    rec, _ = bench.run_bench(
        _opts(root, "0", shapes="prod", allow_dirty=True, out=root / "o1"), runtime=CpuRuntime()
    )
    assert rec["dirty"] is True and rec["commit"] == "c" * 40
    monkeypatch.delenv("LADDER_COMMIT")
    monkeypatch.delenv("LADDER_DIRTY")
    with pytest.raises(paths.LadderError, match="LADDER_COMMIT/LADDER_DIRTY are unset"):
        bench.run_bench(_opts(root, "0", shapes="prod"), runtime=CpuRuntime())
    rec, _ = bench.run_bench(
        _opts(root, "0", shapes="prod", allow_dirty=True, out=root / "o2"), runtime=CpuRuntime()
    )
    assert rec["commit"] is None and rec["dirty"] is True and rec["commit_source"] == "none"


def test_usage_errors_come_before_any_measurement(root: Path) -> None:
    class NoGpu(CpuRuntime):
        def unavailable(self):
            return "no CUDA GPU is visible"

    with pytest.raises(paths.NoGpu, match="python -m ladder check toy 000-base --interpret"):
        bench.run_bench(_opts(root, "0"), runtime=NoGpu())
    with pytest.raises(paths.LadderError, match="never reads TOY_X"):
        bench.run_bench(_opts(root, "1", knobs=["TOY_X=1"]), runtime=CpuRuntime())
    with pytest.raises(
        paths.LadderError,
        match=r"small is a shape set of family toy that is not benched as a set .*"
        r"--shapes s-b2-t9-d8-w4,s-b1-t5-d4-w3$",
    ):
        bench.run_bench(_opts(root, "0", shapes="small"), runtime=CpuRuntime())
    with pytest.raises(paths.LadderError, match="--shapes 'nope': nope is neither a shape set"):
        bench.run_bench(_opts(root, "0", shapes="nope"), runtime=CpuRuntime())
    with pytest.raises(paths.BadIdea, match="does not define toy_bwd"):
        bench.run_bench(_opts(root, "2"), runtime=CpuRuntime())
    records_before = sorted(root.rglob("records/*.json"))
    with pytest.raises(paths.LadderError, match="--warmup must be 0 or more, got -1"):
        bench.run_bench(_opts(root, "1", warmup=-1), runtime=CpuRuntime())
    assert sorted(root.rglob("records/*.json")) == records_before
    assert list(root.rglob("*.tmp")) == []


class Untouchable(CpuRuntime):
    """Fails the test if anything is measured."""

    def measure(self, state):
        raise AssertionError("measured although the options were bad")


def test_unwritable_out_fails_before_measuring(root: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "taken.json"
    blocker.write_text("keep")
    for out, message in (
        (blocker, "is a file, not a folder"),
        (blocker / "records", "cannot write records in"),
    ):
        with pytest.raises(records.RecordError, match=message) as err:
            bench.run_bench(_opts(root, "0", shapes="prod", out=out), runtime=Untouchable())
        assert err.value.exit_code == 2 and "\n" not in str(err.value)
    assert blocker.read_text() == "keep"
    # a missing folder (and its parents) is created before measuring, and gets the record
    deep = tmp_path / "a" / "b" / "c"
    rec, path = bench.run_bench(_opts(root, "0", shapes="prod", out=deep), runtime=CpuRuntime())
    assert path.parent == deep and records.read_record(path)["record_id"] == rec["record_id"]


@pytest.mark.parametrize("seed", [-1, 2**63, 99999999999999999999999])
def test_out_of_range_seed_is_refused_before_measuring(root: Path, seed: int) -> None:
    out = root / "out"
    with pytest.raises(paths.LadderError, match=f"--seed {seed} is out of range") as err:
        bench.run_bench(_opts(root, "0", seed=seed, out=out), runtime=Untouchable())
    assert err.value.exit_code == 2
    assert _files(out) == []


def test_largest_seed_is_usable(root: Path) -> None:
    rec, _ = bench.run_bench(
        _opts(root, "0", shapes="prod", seed=2**63 - 1, out=root / "out"), runtime=CpuRuntime()
    )
    assert rec["status"] == "passed" and rec["seed"] == 2**63 - 1


def test_record_ids_get_a_suffix_when_taken() -> None:
    from datetime import datetime, timezone

    t = datetime(2026, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    taken = {"20260506T070809Z-abcdef01", "20260506T070809Z-abcdef01-2"}
    rid = bench.new_record_id(t, "abcdef0123" + "0" * 54, taken.__contains__)
    assert rid == "20260506T070809Z-abcdef01-3"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_state_from_a_repository(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    git("init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    git("add", "-A")
    git("commit", "-qm", "a")
    head = git("rev-parse", "HEAD").strip()
    state = bench.git_state(tmp_path, allow_dirty=False, environ={"LADDER_COMMIT": "e" * 40})
    assert (state.commit, state.dirty, state.source) == (head, False, "git")
    (tmp_path / "a.txt").write_text("2\n")
    with pytest.raises(paths.LadderError, match=r"uncommitted changes \(a.txt\)"):
        bench.git_state(tmp_path, allow_dirty=False, environ={})
    state = bench.git_state(tmp_path, allow_dirty=True, environ={})
    assert state.dirty is True and state.commit == head


def test_baseline_is_retuned_at_each_shape_before_it_is_timed(root: Path, monkeypatch) -> None:
    """A family's baseline_retune runs once per timed shape, right before one untimed
    baseline call (fam.run on BASELINE) at that shape, so the baseline's autotuning sees the shape it is timed at."""
    fam = paths.load_family("toy", root)
    events: list[object] = []
    fwd, bwd = fam.BASELINE.toy_fwd, fam.BASELINE.toy_bwd

    def spy_fwd(x, w):
        events.append(("fwd", tuple(x.shape)))
        return fwd(x, w)

    def spy_bwd(x, w, dy):
        events.append(("bwd", tuple(x.shape)))
        return bwd(x, w, dy)

    monkeypatch.setattr(fam, "baseline_retune", lambda: events.append("retune"), raising=False)
    monkeypatch.setattr(fam.BASELINE, "toy_fwd", spy_fwd)
    monkeypatch.setattr(fam.BASELINE, "toy_bwd", spy_bwd)
    rec, _ = bench.run_bench(_opts(root, "1"), runtime=CpuRuntime())
    assert rec["status"] == "passed"
    timed = [(s["B"], s["T"], s["D"]) for s in rec["shapes"]]
    starts = [i for i, e in enumerate(events) if e == "retune"]
    assert len(starts) == len(timed) == 2
    for i, shape in zip(starts, timed):
        assert events[i + 1 : i + 3] == [("fwd", shape), ("bwd", shape)]
    # correctness (before any timing) calls the baseline without a retune in between
    assert events[0] != "retune"
