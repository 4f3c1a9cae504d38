"""tools/drift.py: each drift condition produced on purpose and detected, with exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.ladderfab import FakeLadder, vl

PLAIN = """
import os

K = int(os.environ.get("TOY_K", "1"))


def toy_fwd(x):
    return x + K


def toy_bwd(x):
    return x
"""
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
    code, payload = report(lad, "--strict")
    assert code == 1 and payload["strict"] is True
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


@pytest.mark.parametrize("how", ["edit", "delete", "extra"])
def test_tampered_is_always_fatal(tmp_path, how):
    lad = vendored(tmp_path)
    prov = vl.parse_provenance(provenance_path(lad).read_bytes(), "p")
    target = kernel_path(lad)
    if how == "edit":
        target.write_text(target.read_text() + "# tweak\n")
    elif how == "delete":
        target.unlink()
    else:
        (target.parent / "extra.py").write_text("x = 1\n")
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1 and fam["status"] == "drift"
    (msg,) = fam["tampered"]
    rel = f"{lad.package}/_kernels/" + ("extra.py" if how == "extra" else "first.py")
    assert msg.startswith(rel)
    if how != "extra":
        assert f"make vendor FAMILY=toy COMMIT={prov['SOURCE_COMMIT']}" in msg
    assert fam["not_reproducible"] == []  # the vendor still reproduces what was recorded
    # the restore command it gives works once the change is committed
    lad.commit("tampered")
    if how == "extra":
        (target.parent / "extra.py").unlink()
        lad.commit("remove it")
    else:
        exact = re.search(r"exactly: `python tools/vendor\.py (.*?)`", msg).group(1).split()
        assert lad.vendor(*exact[1:]).code == 0
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


def test_not_reproducible_when_the_vendor_refuses_at_the_source_commit(tmp_path):
    lad = vendored(tmp_path)
    path = provenance_path(lad)
    prov = vl.parse_provenance(path.read_bytes(), "p")
    rid = prov["RECORD"]["record_id"]
    path.write_text(path.read_text().replace(rid, "20260101T000000Z-abcdef"))
    code, payload = report(lad)
    fam = family(payload)
    assert code == 1
    (msg,) = fam["not_reproducible"]
    assert "the vendor at" in msg and "is not in commit" in msg


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
            "wrong type or form",
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


def test_human_output_names_every_finding(tmp_path):
    lad = vendored(tmp_path)
    kernel_path(lad).write_text(kernel_path(lad).read_text() + "# tweak\n")
    res = lad.drift()
    assert res.code == 1
    assert "toy: tampered: package/src/kernel_fun/toy/_kernels/first.py differs" in res.stdout
    assert "drift: drift" in res.stdout
    assert re.search(r"│ toy\s+│ drift\s+│ no\s+│ YES\s+│ yes\s+│", res.stdout)


def test_real_repository_drift():
    repo = vl.TOOL_ROOT
    provs = list((repo / "package" / "src" / "kernel_fun").glob("*/_provenance.py"))
    if not provs:
        pytest.skip("nothing is vendored in this checkout yet (no _provenance.py)")
    from tests.ladderfab import drift, invoke

    res = invoke(drift.app, ["--json", "--repo", str(repo)])
    payload = json.loads(res.stdout)
    for fam in payload["families"]:
        assert fam["tampered"] == [] and fam["not_reproducible"] == [], fam
        assert fam["error"] is None, fam
    assert res.code == 0
