"""A knob sweep needs no commit between its points: a new record under an idea's records/ is
not dirt, while a changed tracked record (or any other change) still is; `make bench` passes
KNOBS through as --knob items."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from ladder import bench, paths
from tests.fixtures.ladder.helpers import copy_toy, idea_path
from tests.test_ladder_bench import CpuRuntime

REPO = Path(__file__).resolve().parents[1]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(root: Path, *args: str) -> str:
    env = {**os.environ, **_ENV}
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    root = copy_toy(tmp_path)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "toy")
    for key in ("LADDER_COMMIT", "LADDER_DIRTY", "TOY_FAST", "TOY_BLOCK"):
        monkeypatch.delenv(key, raising=False)
    return root


def state(root: Path) -> bench.GitState:
    return bench.git_state(root, allow_dirty=True, environ={})


@needs_git
def test_new_records_are_not_dirt(repo: Path) -> None:
    rdir = idea_path(repo, "001-fast") / "records"
    (rdir / "20260301T000000Z-abcdef01.json").write_text("{}\n")
    fresh = idea_path(repo, "002-no-bwd") / "records" / "deep"
    fresh.mkdir(parents=True)  # a folder git has never seen, holding the new file
    (fresh / "20260301T000000Z-abcdef02.json").write_text("{}\n")
    s = state(repo)
    assert (s.dirty, s.changed) == (False, [])
    assert bench.git_state(repo, allow_dirty=False, environ={}).commit == s.commit


@needs_git
@pytest.mark.parametrize(
    "change, dirt",
    [
        ("modify-record", "kernels/toy/ideas/001-fast/records/20260103T100000Z-767b7232.json"),
        ("delete-record", "kernels/toy/ideas/001-fast/records/20260103T100000Z-767b7232.json"),
        ("stray-file", "kernels/toy/ideas/001-fast/.DS_Store"),
        ("beside-records", "kernels/toy/ideas/001-fast/records.json"),
        ("not-an-idea", "kernels/toy/ideas/scratch/records/x.json"),
        ("staged-rename", "kernels/toy/ideas/001-fast/fast.py"),
    ],
)
def test_everything_else_is_still_dirt(repo: Path, change: str, dirt: str) -> None:
    record = idea_path(repo, "001-fast") / "records" / "20260103T100000Z-767b7232.json"
    if change == "modify-record":
        record.write_text(record.read_text().replace('"n": 200', '"n": 201', 1))
    elif change == "delete-record":
        record.unlink()
    elif change == "staged-rename":
        git(
            repo, "mv", "kernels/toy/ideas/001-fast/kernel.py", "kernels/toy/ideas/001-fast/fast.py"
        )
    else:
        (repo / dirt).parent.mkdir(parents=True, exist_ok=True)
        (repo / dirt).write_text("x\n")
    s = state(repo)
    assert s.dirty is True and s.changed == [dirt]
    with pytest.raises(paths.LadderError, match="uncommitted changes"):
        bench.git_state(repo, allow_dirty=False, environ={})


@needs_git
def test_two_benches_in_a_row_need_no_commit_between(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    made = []
    for block in ("32", "64"):
        opts = bench.BenchOptions(
            family="toy",
            idea="1",
            shapes="prod",
            knobs=[f"TOY_BLOCK={block}"],
            rounds=1,
            reps=1,
            seed=3,
            root=repo,
        )
        rec, path = bench.run_bench(opts, runtime=CpuRuntime())
        assert rec["commit"] == head and rec["dirty"] is False and rec["commit_source"] == "git"
        made.append(path)
    assert len(set(made)) == 2


def test_make_bench_passes_knobs_through() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}  # not nested
    proc = subprocess.run(
        ["make", "-n", "bench", "IDEA=001", "KNOBS=CCONV_X=1 CCONV_Y=2,3", "SHAPES=prod"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    (line,) = [ln for ln in proc.stdout.splitlines() if " -m ladder bench " in ln]
    argv = shlex.split(line)
    assert argv[argv.index("ladder") :] == [
        "ladder",
        "bench",
        "cconv",
        "001",
        "--shapes",
        "prod",
        "--knob",
        "CCONV_X=1",
        "--knob",
        "CCONV_Y=2,3",
    ]
    plain = subprocess.run(
        ["make", "-n", "bench", "IDEA=001"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert "--knob" not in plain.stdout
