"""Bench records: schema round trip, validation messages, append-only writing, the winner."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ladder import codehash, records
from tests.fixtures.ladder.helpers import copy_toy, idea_path
from tests.fixtures.ladder.recgen import fake_sha, make_record

REPO = Path(__file__).resolve().parents[1]
SHA = "1" * 64


def _rec(**kw):
    base = {"idea": "001-fast", "code_sha": SHA, "created": "2026-02-01T00:00:00Z"}
    base.update(kw)
    return make_record(**base)


# ------------------------------------------------------------------------------------------
# schema
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["passed", "incorrect", "error"])
def test_round_trip(tmp_path: Path, status: str) -> None:
    rec = _rec(status=status)
    records.validate_record(rec)
    path = records.write_record(tmp_path / "idea", rec)
    assert path == tmp_path / "idea" / "records" / f"{rec['record_id']}.json"
    back = records.read_record(path)
    assert back.pop("_path") == path
    assert back == json.loads(json.dumps(rec))
    assert json.loads(path.read_text()) == back


def _mutate(rec: dict, dotted: str, value=None, delete: bool = False) -> dict:
    rec = copy.deepcopy(rec)
    obj = rec
    parts = dotted.replace("]", "").replace("[", ".").split(".")
    for p in parts[:-1]:
        obj = obj[int(p)] if p.isdigit() else obj[p]
    last = parts[-1]
    if delete:
        del obj[last]
    else:
        obj[last] = value
    return rec


@pytest.mark.parametrize(
    ("field", "value", "delete", "message"),
    [
        ("code_sha", None, True, "code_sha: missing"),
        ("harness_sha", "xyz", False, "harness_sha: malformed"),
        ("schema_version", 2, False, "schema_version: expected 1"),
        ("dirty", "no", False, "dirty: expected true or false"),
        ("created", "2026-02-01T00:00:00+02:00", False, "created: expected a UTC time"),
        ("created", "yesterday", False, "created: not ISO 8601"),
        ("commit", None, False, "commit: null commit on a record that is not dirty"),
        ("commit", "abc", False, "commit: expected a 40-hex"),
        ("device.name", None, True, "device.name: missing"),
        ("versions.fla", None, True, "versions.fla: missing"),
        ("status", "fast", False, "status: expected one of"),
        ("copy_ceiling_TBps", None, False, "copy_ceiling_TBps: a passed record needs"),
        ("clocks.end", None, True, "clocks.end: missing"),
        ("shapes[0].fwd.candidate_ms.median", -1.0, False, "shapes[0].fwd.candidate_ms.median"),
        ("shapes[0].bwd.ratio", 9.0, False, "shapes[0].bwd.ratio: 9.0 is not baseline/candidate"),
        ("shapes[0].fwd.min_bytes", None, True, "shapes[0].fwd.min_bytes: missing"),
        ("shapes[1].fwdbwd", None, True, "shapes[1].fwdbwd: missing"),
        ("shapes[0].correctness.passed", False, False, "shapes[0].correctness.passed: false"),
        ("shapes[1].correctness.err_ratio.y", "big", False, "shapes[1].correctness.err_ratio.y"),
        ("shapes[0].W", {"taps": 4}, False, "shapes[0].W: expected a number, string, bool"),
        ("shapes[0].seqlens", [1, [2]], False, "shapes[0].seqlens: expected a number"),
        ("shapes[0].case", 3, False, "shapes[0].case: expected a string"),
        ("record_id", "run-1", False, "record_id: malformed"),
        # a trailing newline is not part of a well-formed value
        ("idea", "001-fast\n", False, "idea: malformed"),
        ("family", "toy\n", False, "family: malformed"),
        ("code_sha", "1" * 64 + "\n", False, "code_sha: malformed"),
        ("code_unchanged_since", "20260201T000000Z-11111111\n", False, "code_unchanged_since"),
    ],
)
def test_validation_names_the_field(field, value, delete, message) -> None:
    bad = _mutate(_rec(), field, value, delete)
    with pytest.raises(records.RecordError) as err:
        records.validate_record(bad)
    text = str(err.value)
    assert message in text
    assert "\n" not in text


def test_shape_fields_are_the_familys_own() -> None:
    """A record's shapes carry whatever fields the family's shape_fields gives: no B/T/D/W
    needed, lists (varlen sequence lengths) allowed."""
    rec = _rec()
    for s in rec["shapes"]:
        for key in ("B", "T", "D", "W", "x_dtype", "w_dtype"):
            del s[key]
        s.update({"H": 4, "K": 128, "case": "varlen", "seqlens": [5, 11], "gate": None})
    records.validate_record(rec)


def test_committed_cconv_records_still_validate_and_keep_their_fields() -> None:
    from ladder import paths

    recs = records.load_records("cconv")
    assert recs, "cconv has committed records"
    fam = paths.load_family("cconv", complete=True)
    from ladder.contract import shape_fields

    want = set(shape_fields(fam, fam.SHAPES["prod"][0]))
    assert want == {"name", "B", "T", "D", "W", "x_dtype", "w_dtype"}
    for rec in recs:
        for s in rec["shapes"]:
            assert want <= set(s)


def test_incorrect_and_error_records_carry_no_timing() -> None:
    inc = _rec(status="incorrect")
    inc["shapes"][1]["fwd"] = _rec()["shapes"][1]["fwd"]
    with pytest.raises(records.RecordError, match=r"shapes\[1\]\.fwd: a incorrect record"):
        records.validate_record(inc)
    ok = _rec(status="incorrect")
    ok["shapes"][0]["correctness"]["passed"] = True
    with pytest.raises(records.RecordError, match="every shape's correctness passed"):
        records.validate_record(ok)
    err = _rec(status="error")
    err["error"] = ""
    with pytest.raises(records.RecordError, match="error: an error record needs"):
        records.validate_record(err)


# ------------------------------------------------------------------------------------------
# writing and loading
# ------------------------------------------------------------------------------------------


def test_write_never_overwrites(tmp_path: Path) -> None:
    rec = _rec()
    path = records.write_record(tmp_path, rec)
    before = path.read_bytes()
    other = copy.deepcopy(rec)
    other["shapes"][0]["correctness"]["candidate_err"]["y"] = 1e-3
    with pytest.raises(records.RecordError, match="never rewritten"):
        records.write_record(tmp_path, other)
    assert path.read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == [path.name]


def test_write_refuses_an_invalid_record_and_leaves_nothing(tmp_path: Path) -> None:
    bad = _mutate(_rec(), "status", "maybe")
    with pytest.raises(records.RecordError):
        records.write_record(tmp_path, bad)
    assert not (tmp_path / "records").exists() or not any((tmp_path / "records").iterdir())


def test_write_strips_private_keys(tmp_path: Path) -> None:
    rec = _rec()
    rec["_path"] = "somewhere"
    path = records.write_record(tmp_path, rec, records_dir=tmp_path / "out")
    assert path.parent == tmp_path / "out"
    assert "_path" not in json.loads(path.read_text())


def test_load_checks_file_name_and_folder(tmp_path: Path) -> None:
    root = copy_toy(tmp_path, records=False)
    rdir = idea_path(root, "001-fast") / "records"
    rec = _rec()
    (rdir / "20990101T000000Z-deadbeef.json").write_text(json.dumps(rec))
    with pytest.raises(records.RecordError, match="does not match the file name"):
        records.load_records("toy", root)
    (rdir / "20990101T000000Z-deadbeef.json").unlink()
    rec2 = _rec(idea="000-base")
    (rdir / f"{rec2['record_id']}.json").write_text(json.dumps(rec2))
    with pytest.raises(records.RecordError, match="does not belong in 001-fast"):
        records.load_records("toy", root)


def test_load_compares_the_full_idea_folder_name(tmp_path: Path) -> None:
    root = copy_toy(tmp_path, records=False)
    rdir = idea_path(root, "001-fast") / "records"
    rec = _rec(idea="001-other")  # same number, another idea
    path = rdir / f"{rec['record_id']}.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(records.RecordError) as err:
        records.load_idea_records(idea_path(root, "001-fast"))
    assert str(err.value).startswith(f"{path}: idea: '001-other'")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("[]", "expected a JSON object, got list", id="list"),
        pytest.param('"a record"', "expected a JSON object, got str", id="string"),
        pytest.param("[" * 100_000, "nested too deeply", id="deep-list"),
        pytest.param('{"a": ' * 100_000, "nested too deeply", id="deep-object"),
        pytest.param("{not json", "not a readable JSON record", id="not-json"),
    ],
)
def test_read_names_the_file_of_a_record_that_is_not_an_object(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "20260201T000000Z-11111111.json"
    path.write_text(text)
    with pytest.raises(records.RecordError) as err:
        records.read_record(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and reason in msg
    assert "\n" not in msg


def test_write_into_a_file_or_under_one_is_a_record_error(tmp_path: Path) -> None:
    blocker = tmp_path / "taken.json"
    blocker.write_text("keep")
    with pytest.raises(records.RecordError, match="is a file, not a folder") as err:
        records.write_record(tmp_path, _rec(), records_dir=blocker)
    assert "\n" not in str(err.value)
    with pytest.raises(records.RecordError, match="cannot write records in") as err:
        records.write_record(tmp_path, _rec(), records_dir=blocker / "records")
    assert str(blocker / "records") in str(err.value) and "\n" not in str(err.value)
    assert blocker.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.json"]


def test_write_without_hard_links_still_never_overwrites(tmp_path: Path, monkeypatch) -> None:
    def no_link(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    rec = _rec()
    path = records.write_record(tmp_path, rec)
    assert records.read_record(path)["record_id"] == rec["record_id"]
    before = path.read_bytes()
    with pytest.raises(records.RecordError, match="never rewritten"):
        records.write_record(tmp_path, _rec(fwd=(0.5, 1.0)))
    assert path.read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == [path.name]


_KILLED_WRITE = """
import os, signal, sys
from pathlib import Path
from ladder import records
from tests.fixtures.ladder.recgen import make_record

rec = make_record(idea="001-fast", code_sha="1" * 64, created="2026-02-01T00:00:00Z")
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # killed mid-write
records.write_record(Path(sys.argv[1]), rec)
"""


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_write_killed_midway_leaves_the_tree_clean(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    idea = repo / "001-fast"
    (idea / "records").mkdir(parents=True)
    (idea / "records" / ".gitkeep").write_text("")
    shutil.copy(REPO / ".gitignore", repo / ".gitignore")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
        ).stdout

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "idea")
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITE, str(idea)],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr  # SIGKILL: no cleanup ran
    left = [p for p in (idea / "records").iterdir() if p.name != ".gitkeep"]
    assert left and all(p.name.endswith(".tmp") for p in left)  # the temporary file stayed
    assert not list(idea.rglob("*.json"))  # and no record, whole or half
    assert git("status", "--porcelain", "--untracked-files=all") == ""
    assert records.load_idea_records(idea) == []


def test_code_unchanged_since(tmp_path: Path) -> None:
    idea = tmp_path / "001-fast"
    assert records.code_unchanged_since(idea, SHA, "self-id") == "self-id"
    other = "2" * 64
    records.write_record(idea, _rec(created="2026-03-01T00:00:00Z", code_sha=other))
    later = _rec(created="2026-03-05T00:00:00Z")
    earlier = _rec(created="2026-03-02T00:00:00Z")
    records.write_record(idea, later)
    records.write_record(idea, earlier)
    assert records.code_unchanged_since(idea, SHA, "x") == earlier["record_id"]
    assert records.code_unchanged_since(idea, "3" * 64, "x") == "x"


# ------------------------------------------------------------------------------------------
# ratio and winner
# ------------------------------------------------------------------------------------------


def test_prod_ratio_is_summed_fwd_bwd() -> None:
    rec = _rec(fwd=(0.5, 1.0), bwd=(1.5, 2.0))
    assert records.prod_ratio(rec) == pytest.approx((1.0 + 2.0) / (0.5 + 1.5))
    assert records.prod_ratio(_rec(status="incorrect")) is None


def _tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = copy_toy(tmp_path, records=False)
    shas = {
        f: codehash.code_sha(codehash.idea_files_from_dir(idea_path(root, f)))
        for f in ("000-base", "001-fast", "003-wrong-taps")
    }
    return root, shas


def _put(root: Path, rec: dict) -> Path:
    return records.write_record(idea_path(root, rec["idea"]), rec)


def test_winner_skips_dirty_incorrect_stale_and_other_devices(tmp_path: Path) -> None:
    root, shas = _tree(tmp_path)
    with pytest.raises(records.NoWinner, match="no toy records yet"):
        records.winner("toy", root)
    base = _rec(idea="000-base", code_sha=shas["000-base"], fwd=(1.0, 1.1), bwd=(2.0, 2.2))
    _put(root, base)
    _put(
        root,
        _rec(code_sha=shas["001-fast"], dirty=True, fwd=(0.1, 1.0), created="2026-02-02T00:00:00Z"),
    )
    _put(root, _rec(idea="003-wrong-taps", code_sha=shas["003-wrong-taps"], status="incorrect"))
    _put(root, _rec(code_sha=fake_sha("old"), fwd=(0.2, 1.0), created="2026-02-03T00:00:00Z"))
    b300 = _rec(
        code_sha=shas["001-fast"],
        device="NVIDIA B300",
        fwd=(0.3, 1.0),
        created="2026-02-04T00:00:00Z",
    )
    _put(root, b300)
    _put(root, _rec(code_sha=shas["001-fast"], status="error", created="2026-02-05T00:00:00Z"))
    # the only promotable-looking record is the baseline's (000-*), which never wins
    with pytest.raises(records.NoWinner, match=r"\(1 baseline, 2 not passed, 1 dirty"):
        records.winner("toy", root)
    on_b300 = records.winner("toy", root, device="b300")
    assert on_b300.record["record_id"] == b300["record_id"]
    with pytest.raises(records.NoWinner) as err:
        records.winner("toy", root, device="A100")
    msg = str(err.value)
    for part in ("1 baseline", "2 not passed", "1 dirty", "other device"):
        assert part in msg
    # code_sha_of decides staleness: pretend 001's current code is the old one.
    old = records.winner(
        "toy",
        root,
        code_sha_of=lambda f: fake_sha("old") if f == "001-fast" else shas[f],
    )
    assert old.idea == "001-fast" and old.score == pytest.approx(3.0 / 2.2)
    assert old.record_path.parent.parent == idea_path(root, "001-fast")


def test_winner_ties_go_to_the_earliest_then_record_id(tmp_path: Path) -> None:
    root, shas = _tree(tmp_path)
    kw = {"idea": "001-fast", "code_sha": shas["001-fast"], "fwd": (1.0, 1.5), "bwd": (2.0, 3.0)}
    late = _rec(created="2026-04-02T00:00:00Z", **kw)
    early_b = _rec(created="2026-04-01T00:00:00Z", record_id="20260401T000000Z-bbbbbbbb", **kw)
    early_a = _rec(created="2026-04-01T00:00:00Z", record_id="20260401T000000Z-aaaaaaaa", **kw)
    for rec in (late, early_b, early_a):
        _put(root, rec)
    assert records.winner("toy", root).record["record_id"] == early_a["record_id"]
    better = _rec(created="2026-04-03T00:00:00Z", **{**kw, "fwd": (0.9, 1.5)})
    _put(root, better)
    assert records.winner("toy", root).record["record_id"] == better["record_id"]


def test_winner_must_beat_fla_at_prod(tmp_path: Path) -> None:
    root, shas = _tree(tmp_path)
    kw = {"idea": "001-fast", "code_sha": shas["001-fast"]}
    slower = _rec(fwd=(1.2, 1.0), bwd=(2.4, 2.0), created="2026-05-01T00:00:00Z", **kw)
    _put(root, slower)
    assert records.prod_ratio(slower) < 1.0
    with pytest.raises(records.NoWinner, match=r"1 not faster than fla"):
        records.winner("toy", root)
    even = _rec(fwd=(1.0, 1.0), bwd=(2.0, 2.0), created="2026-05-02T00:00:00Z", **kw)
    _put(root, even)
    with pytest.raises(records.NoWinner, match=r"2 not faster than fla"):
        records.winner("toy", root)
    faster = _rec(fwd=(0.9, 1.0), bwd=(2.0, 2.0), created="2026-05-03T00:00:00Z", **kw)
    _put(root, faster)
    assert records.winner("toy", root).record["record_id"] == faster["record_id"]


def test_winner_needs_every_case_the_family_promotes(tmp_path: Path) -> None:
    root, _ = _tree(tmp_path)
    fam = root / "kernels" / "toy" / "family.py"
    fam.write_text(
        fam.read_text()
        + '\nCASES = {"dense": "plain", "packed": "cu_seqlens"}\nPROMOTE_CASES = ("dense", "packed")\n'
    )
    kernel = idea_path(root, "001-fast") / "kernel.py"
    sha = codehash.code_sha(codehash.idea_files_from_dir(idea_path(root, "001-fast")))
    _put(root, _rec(code_sha=sha, fwd=(0.5, 1.0), bwd=(1.0, 2.0)))
    # 001's kernel.py declares no CASES: it implements dense only
    with pytest.raises(records.NoWinner, match=r"1 missing a case the family promotes.*packed"):
        records.winner("toy", root)
    from ladder.board import build_board

    row = next(r for r in build_board("toy", root).rows if r.idea == "001-fast")
    assert row.missing_cases == ["packed"] and not row.promotable
    # a lookup says which cases each idea implements (the vendor's reads them at a commit)
    won = records.winner("toy", root, cases_of=lambda f: ("packed", "dense"))
    assert won.idea == "001-fast"
    kernel.write_text(kernel.read_text() + '\nCASES = ("dense", "packed")\n')
    sha2 = codehash.code_sha(codehash.idea_files_from_dir(idea_path(root, "001-fast")))
    _put(root, _rec(code_sha=sha2, fwd=(0.6, 1.0), bwd=(1.0, 2.0), created="2026-06-02T00:00:00Z"))
    won = records.winner("toy", root)  # the working tree's kernel.py now declares both
    assert won.idea == "001-fast" and won.record["code_sha"] == sha2
    kernel.write_text(kernel.read_text() + "\nCASES = tuple(sorted(CASES))\n")  # not literal
    row = next(r for r in build_board("toy", root).rows if r.idea == "001-fast")
    assert row.cases_unreadable and row.missing_cases == ["dense", "packed"]
    with pytest.raises(
        records.NoWinner, match=r"001-fast.s kernel.py: CASES must be a literal tuple"
    ):
        records.winner("toy", root, code_sha_of=lambda f: sha2)


def test_static_idea_cases_reads_the_literal_only() -> None:
    from ladder.contract import static_idea_cases

    assert static_idea_cases(b"x = 1\n") == ("dense",)
    assert static_idea_cases(b'CASES = ("dense", "varlen")\n') == ("dense", "varlen")
    assert static_idea_cases(b'CASES: tuple = ("varlen",)\n') == ("varlen",)
    assert static_idea_cases(b"CASES = tuple(FAMILY_CASES)\n") is None
    assert static_idea_cases(b"CASES = ()\n") is None
    assert static_idea_cases(b"CASES = (1, 2)\n") is None
    assert static_idea_cases(b"def (:\n") is None
    assert static_idea_cases(b'CASES = ["dense", "varlen"]\n') == ("dense", "varlen")
    assert static_idea_cases(b'CASES = {("dense",), ["varlen"]}\n') is None  # unhashable
