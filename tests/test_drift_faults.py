"""drift and vendor on the faults of a real checkout: hand-edited provenance, families being
set up, CRLF checkouts (core.autocrlf), shallow clones, uncommitted ideas, odd source bytes."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.ladderfab import PLAIN, FakeLadder, drift, invoke, vendor, vl

MODULES = {"001-first": {"kernel": "first"}, "002-second": {"kernel": "second"}}


def vendored(tmp_path: Path) -> FakeLadder:
    lad = FakeLadder(tmp_path / "repo", modules=MODULES)
    lad.add_idea("001-first", {"kernel.py": PLAIN})
    lad.commit("idea")
    lad.add_record("001-first", {"TOY_K": 3}, ratio=1.5)
    lad.commit("record")
    assert lad.vendor().code == 0
    lad.commit("vendor")
    return lad


def report(repo: Path, *args: str) -> tuple[int, dict[str, Any]]:
    res = invoke(drift.app, ["--json", "--repo", str(repo), *args])
    payload = json.loads(res.stdout)
    assert payload["exit_code"] == res.code
    return res.code, payload


def family(payload: dict[str, Any], name: str = "toy") -> dict[str, Any]:
    return next(f for f in payload["families"] if f["family"] == name)


def hint(msg: str) -> list[str]:
    found = re.search(r"`(git checkout -- [^`]+)`", msg)
    assert found, msg
    return found.group(1).split()[1:]


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# ------------------------------------------------------------------------------------------
# a hand edit of _provenance.py is blamed on _provenance.py, not on the record
# ------------------------------------------------------------------------------------------

EDITS = {
    "record_id": (
        lambda t, p: t.replace(p["RECORD"]["record_id"], "20260101T000000Z-abcdef"),
        "names record 20260101T000000Z-abcdef",
    ),
    "sha256": (
        lambda t, p: t.replace(p["RECORD"]["sha256"], "0" * 64),
        "gives RECORD['sha256'] 000000000000",
    ),
    "comment": (
        lambda t, p: t + "# checked by hand\n",
        "is not what the vendor writes for its own values",
    ),
}


@pytest.mark.parametrize("committed", [False, True])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_hand_edit_of_provenance_is_blamed_on_provenance(tmp_path, edit, committed):
    lad = vendored(tmp_path)
    rel = f"{lad.package}/_provenance.py"
    path = lad.root / rel
    prov = vl.parse_provenance(path.read_bytes(), rel)
    change, fragment = EDITS[edit]
    path.write_text(change(path.read_text(), prov))
    if committed:
        lad.commit("provenance edited")
    code, payload = report(lad.root)
    fam = family(payload)
    assert code == 1 and fam["status"] == "drift"
    (msg,) = fam["tampered"]
    assert msg.startswith(rel) and fragment in msg, msg
    assert "rewritten after it was vendored" not in msg and fam["not_reproducible"] == []
    if committed:  # the hint is the vendor, and it restores a clean package
        assert "re-vendor (`make vendor FAMILY=toy`)" in msg and "git checkout" not in msg
        assert lad.vendor().code == 0, lad.vendor().stderr
        lad.commit("re-vendored")
    else:  # the hint is git, naming the file that exists
        assert hint(msg) == ["checkout", "--", rel]
        lad.git("checkout", "--", rel)
    assert report(lad.root, "--strict")[0] == 0


def test_a_rewritten_record_is_still_blamed_on_the_record(tmp_path):
    lad = vendored(tmp_path)
    prov = vl.parse_provenance((lad.root / lad.package / "_provenance.py").read_bytes(), "p")
    rid = prov["RECORD"]["record_id"]
    rel = f"{lad.ideas}/001-first/records/{rid}.json"
    rec = json.loads(lad.read(rel))
    rec["knobs"] = {"TOY_K": 9}
    lad.write(rel, json.dumps(rec, indent=2))
    lad.commit("record rewritten")
    (msg,) = family(report(lad.root)[1])["tampered"]
    assert msg.startswith(f"record {rid} ({rel}) was rewritten after it was vendored")
    assert git(lad.root, "cat-file", "-t", f"{prov['SOURCE_COMMIT']}:{rel}") == "blob"


# ------------------------------------------------------------------------------------------
# families being set up do not stop drift for the others
# ------------------------------------------------------------------------------------------

HALF = {
    "minimal": ('"""Being set up."""\n\nFAMILY = "half"\n', "defines no ENTRY_POINTS"),
    "broken": ('FAMILY = "half"\nVENDOR = {\n', "syntax error"),
    "bad map": (
        'FAMILY = "half"\nENTRY_POINTS = ("f",)\nTARGET_DEVICE = "H200"\n'
        'VENDOR = {"package": "kernel_fun.half", "modules": {"first": {}}}\n',
        "VENDOR['modules'] maps idea folders",
    ),
}


@pytest.mark.parametrize("case", sorted(HALF))
def test_a_family_without_a_usable_family_py_is_not_vendored(tmp_path, case):
    text, fragment = HALF[case]
    lad = vendored(tmp_path)
    lad.write("ladder/kernels/half/family.py", text)
    lad.commit("half a family")
    for args in ([], ["--strict"]):
        code, payload = report(lad.root, *args)
        half = family(payload, "half")
        assert half["status"] == "not vendored" and half["error"] is None
        assert fragment in half["problem"], half["problem"]
        assert family(payload)["status"] == "clean"  # the others are still checked
        assert code == (1 if args else 0)
    res = invoke(drift.app, ["--repo", str(lad.root)])
    assert res.code == 0 and "half: not vendored: ladder/kernels/half/family.py" in res.stdout
    if case == "minimal":
        res = invoke(vendor.app, ["half", "--repo", str(lad.root)])
        assert res.code == 2
        line = res.stderr.strip()
        assert "\n" not in line and "defines no ENTRY_POINTS, TARGET_DEVICE, VENDOR" in line
        assert 'VENDOR = {"package": "kernel_fun.half"' in line
        assert "INTERFACES" not in line and "docs/DESIGN.md" in line
        assert (vl.TOOL_ROOT / "docs" / "DESIGN.md").is_file()


def test_a_vendored_family_whose_family_py_breaks_is_an_error(tmp_path):
    lad = vendored(tmp_path)
    lad.write("ladder/kernels/toy/family.py", 'FAMILY = "toy"\n')
    lad.commit("family.py cut down")
    code, payload = report(lad.root)
    assert code == 2 and "defines no ENTRY_POINTS" in family(payload)["error"]


# ------------------------------------------------------------------------------------------
# line endings: a CRLF checkout is clean, a hand edit in it is caught, the hint fixes it
# ------------------------------------------------------------------------------------------


def autocrlf_clone(lad: FakeLadder, dest: Path) -> Path:
    subprocess.run(
        ["git", "-c", "core.autocrlf=true", "clone", "-q", str(lad.root), str(dest)],
        check=True,
    )
    git(dest, "config", "core.autocrlf", "true")
    return dest


def test_an_autocrlf_clone_is_drift_clean_and_a_hand_edit_in_it_is_caught(tmp_path):
    lad = vendored(tmp_path)
    clone = autocrlf_clone(lad, tmp_path / "crlf")
    kernel = clone / lad.package / "_kernels" / "first.py"
    assert b"\r\n" in kernel.read_bytes()  # the checkout really is CRLF
    assert b"\r\n" in (clone / lad.package / "_provenance.py").read_bytes()
    code, payload = report(clone, "--strict")
    assert code == 0, family(payload)
    # the vendor agrees: nothing to change
    res = invoke(vendor.app, ["toy", "--repo", str(clone), "--dry-run"])
    assert res.code == 0 and "no changes" in res.stdout, res.stdout + res.stderr
    # a real edit, in CRLF like its neighbours, is tampering; git's restore is clean
    kernel.write_bytes(kernel.read_bytes().replace(b"x + K", b"x + K + 1"))
    code, payload = report(clone)
    (msg,) = family(payload)["tampered"]
    assert code == 1 and msg.startswith(f"{lad.package}/_kernels/first.py differs")
    git(clone, *hint(msg))
    assert report(clone, "--strict")[0] == 0
    # and the same edit on the LF checkout is caught too
    lf = lad.root / lad.package / "_kernels" / "first.py"
    lf.write_bytes(lf.read_bytes().replace(b"x + K", b"x + K + 1"))
    assert report(lad.root)[0] == 1


def test_vendor_output_is_lf_whatever_the_source_line_endings(tmp_path):
    lad = FakeLadder(tmp_path / "repo")
    lad.add_idea("001-first", {"kernel.py": PLAIN})
    lad.commit("idea")
    rid = lad.add_record("001-first", {"TOY_K": 2})
    lad.commit("record")
    assert lad.vendor("--record", rid).code == 0
    kernel = lad.root / lad.package / "_kernels" / "first.py"

    def body() -> bytes:  # without the two header lines, which name the commit
        return b"".join(kernel.read_bytes().splitlines(keepends=True)[2:])

    want = body()
    lf = (lad.root / lad.ideas / "001-first" / "kernel.py").read_bytes()
    variants = {
        "crlf": lf.replace(b"\n", b"\r\n"),
        "cr": lf.replace(b"\n", b"\r"),
        "mixed": b"".join(
            line.replace(b"\n", [b"\r\n", b"\r", b"\n"][i % 3])
            for i, line in enumerate(lf.splitlines(keepends=True))
        ),
        "bom": b"\xef\xbb\xbf" + lf.replace(b"\n", b"\r\n"),
    }
    for name, data in variants.items():
        (lad.root / lad.ideas / "001-first" / "kernel.py").write_bytes(data)
        lad.git("-c", "core.autocrlf=false", "add", "-A")
        lad.git("commit", "-q", "-m", name)
        assert lad.git("cat-file", "-p", f"HEAD:{lad.ideas}/001-first/kernel.py") is not None
        rid = lad.add_record("001-first", {"TOY_K": 2})
        lad.commit(f"record {name}")
        res = lad.vendor("--record", rid)
        assert res.code == 0, (name, res.stderr)
        assert b"\r" not in kernel.read_bytes(), name
        assert body() == want, name
        lad.commit(f"vendored {name}")
        assert report(lad.root)[0] == 0, name


def test_a_non_utf8_idea_file_is_a_one_line_refusal(tmp_path):
    lad = FakeLadder(tmp_path / "repo")
    lad.add_idea("001-first", {"kernel.py": PLAIN})
    path = lad.root / lad.ideas / "001-first" / "kernel.py"
    path.write_bytes(path.read_bytes() + b"\n# caf\xe9\n")
    lad.commit("idea")
    rid = lad.add_record("001-first", {})
    lad.commit("record")
    res = lad.vendor("--record", rid)
    assert res.code == 2
    line = res.stderr.strip()
    n = path.read_bytes().count(b"\n")
    assert "\n" not in line
    assert line.startswith(f"vendor: {lad.ideas}/001-first/kernel.py:{n}: not UTF-8 text"), line
    assert "save the file as UTF-8" in line


# ------------------------------------------------------------------------------------------
# shallow clones, uncommitted ideas and families
# ------------------------------------------------------------------------------------------


def test_vendor_refuses_in_a_shallow_clone(tmp_path):
    lad = vendored(tmp_path)
    lad.write("README.md", "later\n")
    lad.commit("later")
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{lad.root}", str(shallow)], check=True
    )
    assert vl.is_shallow(shallow) and not vl.is_shallow(lad.root)
    res = invoke(vendor.app, ["toy", "--repo", str(shallow)])
    assert res.code == 2
    line = res.stderr.strip()
    assert "\n" not in line and "this clone is shallow" in line
    assert "git fetch --unshallow" in line
    # drift names the same remedy for a SOURCE_COMMIT it cannot see
    code, payload = report(shallow)
    assert code == 2 and "git fetch --unshallow" in family(payload)["error"]


@pytest.mark.parametrize("what", ["missing", "file", "not-git"])
def test_a_repo_path_that_is_no_repository_is_named_as_such(tmp_path, what):
    path = tmp_path / "no such folder"
    want = {"missing": "does not exist", "file": "is a file, not a folder",
            "not-git": "is not in a git repository"}[what]  # fmt: skip
    if what == "file":
        path.write_text("x\n")
    elif what == "not-git":
        path.mkdir()
    res = invoke(vendor.app, ["toy", "--dry-run", "--repo", str(path)])
    assert res.code == 2
    line = res.stderr.strip()
    assert "\n" not in line and want in line and str(path) in line, line
    assert "unshallow" not in line
    dres = invoke(drift.app, ["--repo", str(path)])
    assert dres.code == 2 and want in dres.stderr and "unshallow" not in dres.stderr


def test_vendoring_an_uncommitted_idea_says_commit_first(tmp_path):
    lad = vendored(tmp_path)
    lad.add_idea("002-second", {"kernel.py": PLAIN})  # not committed
    for ref in ("002", "2", "second", "002-second"):
        res = lad.vendor("--idea", ref)
        assert res.code == 2
        line = res.stderr.strip()
        assert "\n" not in line
        assert "idea ladder/kernels/toy/ideas/002-second is in the working tree but not " in line
        assert "the vendor reads git objects at HEAD" in line and "commit it first" in line
    res = invoke(vendor.app, ["later", "--repo", str(lad.root)])
    assert "unknown family 'later'" in res.stderr
    lad.write("ladder/kernels/later/family.py", 'FAMILY = "later"\n')
    res = invoke(vendor.app, ["later", "--repo", str(lad.root)])
    assert res.code == 2
    assert "ladder/kernels/later/family.py is in the working tree but not committed" in res.stderr


def test_vendoring_from_a_commit_before_the_family_existed_says_so(tmp_path):
    lad = vendored(tmp_path)
    before = lad.git("rev-parse", "HEAD").strip()
    lad.write("ladder/kernels/later/family.py", 'FAMILY = "later"\n')
    lad.commit("add family later")
    res = invoke(vendor.app, ["later", "--repo", str(lad.root), "--commit", before])
    assert res.code == 2
    line = res.stderr.strip()
    assert "\n" not in line
    assert f"ladder/kernels/later/family.py does not exist at {before}" in line
    assert "committed later" in line and "not committed" not in line
