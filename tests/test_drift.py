"""tools/drift.py: each drift condition produced on purpose and detected, with exit codes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.ladderfab import PLAIN, FakeLadder, drift, invoke, vl

MODULES = {"001-first": {"kernel": "first"}, "002-second": {"kernel": "second"}}


def report(lad: FakeLadder, *args: str) -> tuple[int, dict[str, Any]]:
    res = lad.drift("--json", *args)
    payload = json.loads(res.stdout)
    assert payload["exit_code"] == res.code
    return res.code, payload


def family(payload: dict[str, Any], name: str = "toy") -> dict[str, Any]:
    return next(f for f in payload["families"] if f["family"] == name)


def vendored(tmp_path: Path, *, commit_package: bool = True) -> FakeLadder:
    lad = FakeLadder(tmp_path / "repo", modules=MODULES)
    lad.add_idea("001-first", {"kernel.py": PLAIN})
    lad.commit("idea")
    lad.add_record("001-first", {"TOY_K": 3}, ratio=1.5)
    lad.commit("record")
    res = lad.vendor()
    assert res.code == 0, res.stderr
    if commit_package:
        lad.commit("vendor")
    return lad


def provenance_path(lad: FakeLadder) -> Path:
    return lad.root / lad.package / "_provenance.py"


def kernel_path(lad: FakeLadder) -> Path:
    return lad.root / lad.package / "_kernels" / "first.py"


def test_not_vendored_is_advisory(tmp_path):
    lad = FakeLadder(tmp_path / "repo", modules=MODULES)
    lad.add_idea("001-first", {"kernel.py": PLAIN})
    lad.commit("idea")
    code, payload = report(lad)
    assert code == 0
    assert family(payload)["status"] == "not vendored"
    assert family(payload)["vendored"] is False
    # nothing beats the baseline yet: nothing to release, so --strict passes too
    code, payload = report(lad, "--strict")
    assert code == 0 and payload["strict"] is True
    assert "nothing to vendor yet" in family(payload)["problem"]
    lad.add_record("001-first", {"TOY_K": 3}, ratio=0.9)  # slower than the baseline
    lad.commit("record")
    code, payload = report(lad, "--strict")
    assert code == 0 and "not faster than fla" in family(payload)["problem"]
    # a winner that is not vendored is what --strict refuses
    lad.add_record("001-first", {"TOY_K": 3}, ratio=1.5)
    lad.commit("record")
    code, payload = report(lad, "--strict")
    assert code == 1 and family(payload)["winner"].startswith("001-first record ")
    res = lad.drift()
    assert res.code == 0 and "toy: not vendored (`make vendor FAMILY=toy`)" in res.stdout


def test_clean_when_the_source_commit_is_head(tmp_path):
    lad = vendored(tmp_path, commit_package=False)
    prov = vl.parse_provenance(provenance_path(lad).read_bytes(), "p")
    assert prov["SOURCE_COMMIT"] == lad.git("rev-parse", "HEAD")
    code, payload = report(lad, "--strict")
    assert code == 0, payload
    fam = family(payload)
    assert fam["status"] == "clean"
    assert fam["stale"] == fam["tampered"] == fam["not_reproducible"] == []
    assert fam["source_commit"] == prov["SOURCE_COMMIT"]


def test_clean_when_the_source_commit_is_an_ancestor(tmp_path):
    lad = vendored(tmp_path)
    lad.write("README.md", "unrelated\n")
    lad.commit("unrelated")
    prov = vl.parse_provenance(provenance_path(lad).read_bytes(), "p")
    assert prov["SOURCE_COMMIT"] != lad.git("rev-parse", "HEAD")
    code, payload = report(lad, "--strict")
    assert code == 0 and family(payload)["status"] == "clean"
    res = lad.drift()
    assert res.code == 0 and "drift: clean" in res.stdout


def test_stale_when_a_source_changed(tmp_path):
    lad = vendored(tmp_path)
    lad.write(f"{lad.ideas}/001-first/kernel.py", PLAIN.replace("x + K", "x + K + 1"))
    lad.commit("new code, not re-vendored")
    code, payload = report(lad)
    fam = family(payload)
    assert code == 0 and fam["status"] == "stale"
    assert any(
        s.startswith("ladder/kernels/toy/ideas/001-first/kernel.py changed since")
        for s in fam["stale"]
    )
    # the vendored record no longer matches the code, so there is no winner at HEAD either
    assert any(s.startswith("no winner at HEAD") for s in fam["stale"])
    assert fam["tampered"] == [] and fam["not_reproducible"] == []
    code, _ = report(lad, "--strict")
    assert code == 1


def test_stale_when_a_better_winner_exists(tmp_path):
    lad = vendored(tmp_path)
    lad.add_idea("002-second", {"kernel.py": PLAIN.replace("x + K", "x * K")})
    lad.commit("idea 2")
    better = lad.add_record("002-second", {}, ratio=2.5)
    lad.commit("record")
    code, payload = report(lad)
    fam = family(payload)
    assert code == 0
    (note,) = fam["stale"]
    assert f"the winner at HEAD is 002-second record {better}" in note
    assert "prod ratio 2.500" in note
    assert report(lad, "--strict")[0] == 1
    # re-vendoring makes it clean again
    assert lad.vendor().code == 0
    lad.commit("re-vendor")
    assert report(lad, "--strict")[0] == 0


def _tamper(lad: FakeLadder, how: str) -> str:
    """Edit, delete or add a file of _kernels/; the repo-relative path touched."""
    target = kernel_path(lad)
    if how == "edit":
        target.write_text(target.read_text() + "# tweak\n")
    elif how == "delete":
        target.unlink()
    else:
        target = target.parent / "extra.py"
        target.write_text("x = 1\n")
    return target.relative_to(lad.root).as_posix()


def _hint(msg: str, pattern: str) -> list[str]:
    found = re.search(pattern, msg)
    assert found, msg
    return found.group(1).split()


@pytest.mark.parametrize("how", ["edit", "delete", "extra"])
def test_tampered_uncommitted_is_fatal_and_git_restores_it(tmp_path, how):
    lad = vendored(tmp_path)
    rel = _tamper(lad, how)
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1 and fam["status"] == "drift"
    (msg,) = fam["tampered"]
    assert msg.startswith(rel)
    assert fam["not_reproducible"] == []  # the vendor still reproduces what was recorded
    # The hint is git, not the vendor (which refuses to overwrite edits it did not make).
    assert "make vendor" not in msg
    assert "has uncommitted changes that the vendor did not make" in lad.vendor().stderr
    if how == "extra":
        assert _hint(msg, r"remove it \(`(rm [^`]+)`\)") == ["rm", rel]
        (lad.root / rel).unlink()
    else:
        assert _hint(msg, r"`(git checkout -- [^`]+)`") == ["git", "checkout", "--", rel]
        lad.git("checkout", "--", rel)
    assert report(lad, "--strict")[0] == 0


@pytest.mark.parametrize("how", ["edit", "delete", "extra"])
def test_tampered_committed_is_fatal_and_the_vendor_restores_it(tmp_path, how):
    lad = vendored(tmp_path)
    prov = vl.parse_provenance(provenance_path(lad).read_bytes(), "p")
    rel = _tamper(lad, how)
    lad.commit("tampered")
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1 and fam["status"] == "drift"
    (msg,) = fam["tampered"]
    assert msg.startswith(rel)
    if how == "extra":
        assert _hint(msg, r"remove it \(`(git rm [^`]+)`\)") == ["git", "rm", rel]
        lad.git("rm", "-q", rel)
    else:
        assert f"make vendor FAMILY=toy COMMIT={prov['SOURCE_COMMIT']}" in msg
        exact = _hint(msg, r"exactly: `python tools/vendor\.py ([^`]+)`")
        res = lad.vendor(*exact[1:])
        assert res.code == 0, res.stderr
    lad.commit("restored")
    assert report(lad, "--strict")[0] == 0


def test_an_edit_over_a_committed_edit_names_both_steps(tmp_path):
    lad = vendored(tmp_path)
    rel = _tamper(lad, "edit")
    lad.commit("tampered")
    (lad.root / rel).write_text((lad.root / rel).read_text() + "# again\n")
    (msg,) = family(report(lad)[1])["tampered"]
    assert f"discard the uncommitted edit (`git checkout -- {rel}`), then restore with" in msg


def test_a_stray_bytecode_file_in_kernels_is_tampering(tmp_path):
    lad = vendored(tmp_path)
    # Python imports a sourceless .pyc beside the sources when no .py of that name exists.
    stray = kernel_path(lad).parent / "evil.pyc"
    stray.write_bytes(b"\x00" * 16)
    (kernel_path(lad).parent / "__pycache__").mkdir()
    (kernel_path(lad).parent / "__pycache__" / "first.cpython-312.pyc").write_bytes(b"\x00")
    code, payload = report(lad)
    (msg,) = family(payload)["tampered"]
    assert code == 1
    assert msg.startswith(f"{lad.package}/_kernels/evil.pyc is not a vendor output")


@pytest.mark.parametrize("committed", [False, True])
def test_kernels_without_provenance_is_tampered(tmp_path, committed):
    lad = vendored(tmp_path)
    prov_rel = f"{lad.package}/_provenance.py"
    provenance_path(lad).unlink()
    if committed:
        lad.commit("provenance deleted")
    kernel_path(lad).write_text(kernel_path(lad).read_text() + "# hand edit\n")
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1 and fam["status"] == "drift" and fam["vendored"] is False
    (msg,) = fam["tampered"]
    assert msg.startswith(f"{prov_rel} is missing, but {lad.package}/_kernels/ holds 2 file(s)")
    assert report(lad, "--strict")[0] == 1
    res = lad.drift()
    assert res.code == 1 and "not vendored" not in res.stdout
    assert re.search(r"│ toy\s+│ drift\s+│ n/a\s+│ YES\s+│ n/a\s+│", res.stdout)
    if committed:
        assert "re-vendor with `make vendor FAMILY=toy`" in msg
        lad.commit("hand edit")
        assert lad.vendor().code == 0
        lad.commit("re-vendored")
    else:
        assert f"restore it with `git checkout -- {prov_rel}`" in msg
        lad.git("checkout", "--", prov_rel)
        assert family(report(lad)[1])["vendored"] is True  # now an ordinary edit
        lad.git("checkout", "--", kernel_path(lad).relative_to(lad.root).as_posix())
    assert report(lad, "--strict")[0] == 0


def test_deleting_kernels_and_provenance_of_a_vendored_family_is_tampered(tmp_path):
    """Vendored at HEAD, both deleted in the working tree: the package can no longer import
    its kernels, so this is tampering (fatal), not "not vendored" (advisory)."""
    lad = vendored(tmp_path)
    shutil.rmtree(lad.root / lad.package / "_kernels")
    provenance_path(lad).unlink()
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1 and fam["status"] == "drift" and fam["vendored"] is False
    (msg,) = fam["tampered"]
    assert "committed at HEAD but missing here" in msg and "git checkout --" in msg
    lad.git("checkout", "--", lad.package)
    assert report(lad, "--strict")[0] == 0


def test_a_repository_without_families_is_a_usage_error(tmp_path):
    repo = tmp_path / "empty"
    repo.mkdir()
    for args in (
        ["init", "-q"],
        [
            "-c",
            "user.email=a@b",
            "-c",
            "user.name=a",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "empty",
        ],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    out = invoke(drift.app, ["--repo", str(repo)])
    assert out.code == 2
    assert out.stderr.startswith("drift: no families in") and out.stderr.count("\n") == 1


def test_only_bytecode_in_kernels_is_not_vendored(tmp_path):
    lad = FakeLadder(tmp_path / "repo", modules=MODULES)
    lad.add_idea("001-first", {"kernel.py": PLAIN})
    lad.commit("idea")
    cache = lad.root / lad.package / "_kernels" / "__pycache__"
    cache.mkdir(parents=True)
    (cache / "first.cpython-312.pyc").write_bytes(b"\x00")
    code, payload = report(lad)
    assert code == 0 and family(payload)["status"] == "not vendored"


def test_a_staging_folder_left_by_a_killed_vendor_is_tampering(tmp_path):
    lad = vendored(tmp_path)
    left = lad.root / lad.package / ".vendor-k1ll3d_x"
    (left / "new" / "_kernels").mkdir(parents=True)
    (left / "new" / "_kernels" / "first.py").write_text("x = 1\n")
    rel = left.relative_to(lad.root).as_posix()
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1 and fam["status"] == "drift"
    (msg,) = fam["tampered"]
    assert msg.startswith(f"{rel} is left over from a vendor run") and f"remove {rel}" in msg
    assert _hint(msg, r"`(rm -r [^`]+)`") == ["rm", "-r", rel]


def _vendored_with_two_records(tmp_path: Path) -> tuple[FakeLadder, str, str]:
    """A vendored ladder whose idea has a winning record and a slower one."""
    lad = FakeLadder(tmp_path / "repo", modules=MODULES)
    lad.add_idea("001-first", {"kernel.py": PLAIN})
    lad.commit("idea")
    won = lad.add_record("001-first", {"TOY_K": 3}, ratio=1.5)
    slow = lad.add_record("001-first", {"TOY_K": 2}, ratio=1.2)
    lad.commit("records")
    assert lad.vendor().code == 0
    lad.commit("vendor")
    return lad, won, slow


def _record_rel(lad: FakeLadder, rid: str) -> str:
    return f"{lad.ideas}/001-first/records/{rid}.json"


@pytest.mark.parametrize("how", ["rewritten", "deleted", "uncommitted"])
def test_a_rewritten_vendored_record_is_fatal(tmp_path, how):
    lad, won, _ = _vendored_with_two_records(tmp_path)
    source = vl.parse_provenance(provenance_path(lad).read_bytes(), "p")["SOURCE_COMMIT"]
    rel = _record_rel(lad, won)
    if how == "deleted":
        (lad.root / rel).unlink()
    else:  # the knobs rewritten in place: the code and the winner look the same
        rec = json.loads(lad.read(rel))
        rec["knobs"] = {"TOY_K": 4}
        lad.write(rel, json.dumps(rec, indent=2))
    if how != "uncommitted":
        lad.commit("record changed")
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1 and fam["status"] == "drift"
    (msg,) = fam["tampered"]
    if how == "uncommitted":
        assert msg == (
            f"record {won} ({rel}) has uncommitted changes; records are append-only: "
            f"restore it with `git checkout -- {rel}`"
        )
        lad.git("checkout", "--", rel)
    else:
        verb = "was rewritten after it was vendored" if how == "rewritten" else "is gone at HEAD"
        assert msg.startswith(f"record {won} ({rel}) {verb}")
        assert msg.endswith(
            f"records are append-only: restore it with `git checkout {source} -- {rel}`"
        )
        lad.git("checkout", source, "--", rel)
        lad.commit("restored")
    assert report(lad, "--strict")[0] == 0


@pytest.mark.parametrize("how", ["rewritten", "deleted", "added"])
def test_records_changed_since_the_source_commit_are_fatal(tmp_path, how):
    lad, _, slow = _vendored_with_two_records(tmp_path)
    source = vl.parse_provenance(provenance_path(lad).read_bytes(), "p")["SOURCE_COMMIT"]
    rel = _record_rel(lad, slow)
    if how == "deleted":
        (lad.root / rel).unlink()
    elif how == "rewritten":
        rec = json.loads(lad.read(rel))
        rec["knobs"] = {"TOY_K": 5}
        lad.write(rel, json.dumps(rec, indent=2))
    else:
        lad.add_record("001-first", {"TOY_K": 1}, ratio=1.1)
    lad.commit("records changed")
    code, payload = report(lad, "--strict")
    fam = family(payload)
    if how == "added":  # appending is what records are for
        assert code == 0 and fam["tampered"] == [], fam
        return
    assert code == 1
    (msg,) = fam["tampered"]
    assert msg == (
        f"record {rel} was {how} after {source[:12]} (SOURCE_COMMIT); records are append-only: "
        f"restore it with `git checkout {source} -- {rel}`"
    )
    lad.git("checkout", source, "--", rel)
    lad.commit("restored")
    assert report(lad, "--strict")[0] == 0


def test_not_reproducible_is_always_fatal(tmp_path):
    lad = vendored(tmp_path)
    # edit the output and its recorded hash together: nothing looks tampered...
    target = kernel_path(lad)
    old_hash = vl.sha256(target.read_bytes())
    target.write_text(target.read_text().replace("x + K", "x + K + 1"))
    text = provenance_path(lad).read_text().replace(old_hash, vl.sha256(target.read_bytes()))
    provenance_path(lad).write_text(text)
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1 and fam["tampered"] == []
    (msg,) = fam["not_reproducible"]
    assert msg.startswith(f"{lad.package}/_kernels/first.py: the vendor at ")
    assert "gives other bytes (differs)" in msg


def test_not_reproducible_when_the_knobs_were_changed_by_hand(tmp_path):
    lad = vendored(tmp_path)
    path = provenance_path(lad)
    path.write_text(path.read_text().replace('"TOY_K": 3', '"TOY_K": 4'))
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1
    assert any(m.startswith("KNOBS at ") for m in fam["not_reproducible"])


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda t: t + "\ndef oops(:\n", "does not parse"),
        (
            lambda t: re.sub(r"KNOBS = (\{.*?\})\n", r"KNOBS = dict(**\1)\n", t, flags=re.S),
            "KNOBS is not a literal",
        ),
        (lambda t: re.sub(r"VENDOR = \{.*?\}\n", "", t, flags=re.S), "missing VENDOR"),
        (lambda t: t + "import os\n", "only NAME = <literal> lines belong here"),
        (
            lambda t: re.sub(r'SOURCE_COMMIT = "[0-9a-f]+"', 'SOURCE_COMMIT = "HEAD"', t),
            "SOURCE_COMMIT has the wrong type or form: 'HEAD' is not a 40-hex commit sha",
        ),
        (
            lambda t: re.sub(r'"sha256": "[0-9a-f]+"', '"sha256": 5', t),
            "RECORD['sha256'] has the wrong type or form: 5 is not a 64-hex sha256",
        ),
        (
            lambda t: re.sub(r'"idea": "001-first"', '"idea": "../../x"', t),
            "RECORD['idea'] has the wrong type or form",
        ),
        (
            lambda t: re.sub(r"KNOBS = \{.*?\}\n", "KNOBS = [1]\n", t, flags=re.S),
            "KNOBS has the wrong type or form",
        ),
        (
            lambda t: re.sub(r'(SOURCE_FILES = \{\s*"[^"]+": )"[0-9a-f]+"', r'\1"abc"', t),
            "SOURCE_FILES['ladder/kernels/toy/ideas/001-first/kernel.py'] has the wrong type",
        ),
        (
            lambda t: re.sub(r"OUTPUT_FILES = \{.*?\}\n", 'OUTPUT_FILES = "x"\n', t, flags=re.S),
            "OUTPUT_FILES has the wrong type or form: a str, not a dict",
        ),
        (
            lambda t: re.sub(r"VENDOR = \{.*?\}\n", "VENDOR = 1\n", t, flags=re.S),
            "VENDOR has the wrong type or form",
        ),
        (lambda t: t + "KNOBS = {}\n", "unexpected or repeated KNOBS"),
    ],
)
def test_corrupt_provenance_is_a_configuration_error(tmp_path, edit, fragment):
    lad = vendored(tmp_path)
    path = provenance_path(lad)
    text = path.read_text()
    assert edit(text) != text
    path.write_text(edit(text))
    code, payload = report(lad)
    fam = family(payload)
    assert code == 2 and fam["status"] == "error"
    assert fragment in fam["error"], fam["error"]
    res = lad.drift()
    assert res.code == 2 and "drift: error" in res.stdout


def test_a_source_commit_missing_from_the_objects_is_a_configuration_error(tmp_path):
    lad = vendored(tmp_path)
    path = provenance_path(lad)
    prov = vl.parse_provenance(path.read_bytes(), "p")
    path.write_text(path.read_text().replace(prov["SOURCE_COMMIT"], "f" * 40))
    code, payload = report(lad)
    assert code == 2
    assert "is not in the local git objects" in family(payload)["error"]


def test_family_selection(tmp_path):
    lad = vendored(tmp_path)
    code, payload = report(lad, "--family", "toy")
    assert code == 0 and [f["family"] for f in payload["families"]] == ["toy"]
    code, payload = report(lad, "--family", "nope")
    assert code == 2 and "unknown family 'nope'" in family(payload, "nope")["error"]


def test_usage_and_configuration_errors_are_one_line(tmp_path):
    long = tmp_path / ("not-a-repository-" + "x" * 120)
    long.mkdir()
    out = invoke(drift.app, ["--repo", str(long)])
    assert out.code == 2
    assert out.stderr.startswith("drift: ") and out.stderr.count("\n") == 1, out.stderr
    assert str(long) in out.stderr
    out = invoke(drift.app, ["--no-such-option-" + "y" * 100])
    assert out.code == 2
    (line,) = [ln for ln in out.stderr.splitlines() if "No such option" in ln]
    assert line.startswith("Error: No such option: --no-such-option-yyy") and line.endswith("y")


def test_human_output_names_every_finding(tmp_path):
    lad = vendored(tmp_path)
    kernel_path(lad).write_text(kernel_path(lad).read_text() + "# tweak\n")
    res = lad.drift()
    assert res.code == 1
    assert "toy: tampered: package/src/kernel_fun/toy/_kernels/first.py differs" in res.stdout
    assert "drift: drift" in res.stdout
    assert re.search(r"│ toy\s+│ drift\s+│ no\s+│ YES\s+│ yes\s+│", res.stdout)


def test_real_repository_drift():
    skip_in_a_shallow_clone()
    repo = vl.TOOL_ROOT
    provs = list((repo / "package" / "src" / "kernel_fun").glob("*/_provenance.py"))
    if not provs:
        pytest.skip("nothing is vendored in this checkout yet (no _provenance.py)")
    res = invoke(drift.app, ["--json", "--repo", str(repo)])
    payload = json.loads(res.stdout)
    for fam in payload["families"]:
        assert fam["tampered"] == [] and fam["not_reproducible"] == [], fam
        assert fam["error"] is None, fam
    assert res.code == 0


def skip_in_a_shallow_clone() -> None:
    """These tests re-run the vendor at SOURCE_COMMIT, which a shallow clone may not hold."""
    if vl.is_shallow(vl.TOOL_ROOT):
        pytest.skip(
            "a shallow clone: SOURCE_COMMIT needs the full history (`git fetch --unshallow`)"
        )
