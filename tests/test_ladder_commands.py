"""The researcher's commands: `knobs`, a knob sweep through `bench`, `show` and `compare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ladder import bench, paths, records, timing
from ladder.cli import app
from tests.fixtures.ladder.helpers import FIXTURE_ROOT, copy_toy, idea_path

ROOT = str(FIXTURE_ROOT)
FAST = FIXTURE_ROOT / "kernels/toy/ideas/001-fast/records"


def run(*args: str, root: Path | str | None = ROOT):
    argv = (["--root", str(root)] if root is not None else []) + list(args)
    return CliRunner().invoke(app, argv)


def usage_error(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert "\n" not in err and err.startswith("error: ") and "Traceback" not in result.output
    for needle in needles:
        assert needle in err, err
    return err


def fixture(name: str) -> dict:
    return json.loads((FAST / f"{name}.json").read_text())


# ------------------------------------------------------------------------------------------
# knobs
# ------------------------------------------------------------------------------------------


def test_knobs_lists_type_default_and_value_in_effect(monkeypatch) -> None:
    monkeypatch.delenv("TOY_FAST", raising=False)
    monkeypatch.setenv("TOY_BLOCK", "128")
    data = json.loads(run("knobs", "toy", "1", "--json").stdout)
    assert data["idea"] == "001-fast"
    rows = {r["key"]: r for r in data["knobs"]}
    assert set(rows) == {"TOY_BLOCK", "TOY_FAST"}
    assert rows["TOY_BLOCK"] | {"where": None} == {
        "key": "TOY_BLOCK",
        "name": "BLOCK",
        "type": "int",
        "default": 64,
        "value": 128,
        "set": True,
        "allowed": None,
        "where": None,
        "error": None,
    }
    assert rows["TOY_BLOCK"]["where"].startswith("ideas/001-fast/kernel.py:")
    assert (rows["TOY_FAST"]["value"], rows["TOY_FAST"]["set"]) == (True, False)
    monkeypatch.setenv("TOY_BLOCK", "lots")
    bad = json.loads(run("knobs", "toy", "1", "--json").stdout)["knobs"]
    assert next(r for r in bad if r["key"] == "TOY_BLOCK")["error"]


def test_knobs_of_an_idea_include_the_modules_it_imports_and_the_rules(tmp_path: Path) -> None:
    root = copy_toy(tmp_path, records=False)
    (idea_path(root, "000-base") / "knob.py").write_text(
        'import os\n\nDEPTH = int(os.environ.get("TOY_DEPTH", "3"))\n'
    )
    data = json.loads(run("knobs", "toy", "001-fast", "--json", root=root).stdout)
    # a module of the imported idea that 001 does not import is not 001's
    assert "TOY_DEPTH" not in {r["key"] for r in data["knobs"]}
    kernel = idea_path(root, "001-fast") / "kernel.py"
    kernel.write_text(
        kernel.read_text() + "\nfrom ladder.kernels.toy.ideas.i000 import knob  # noqa: E402\n"
    )
    data = json.loads(run("knobs", "toy", "001-fast", "--json", root=root).stdout)
    depth = next(r for r in data["knobs"] if r["key"] == "TOY_DEPTH")
    assert depth["where"] == "ideas/000-base/knob.py:3" and depth["default"] == 3
    # a key two imported modules read (with one default) names both places
    rows8 = json.loads(run("knobs", "cconv", "008", "--json", root=None).stdout)["knobs"]
    where = next(r for r in rows8 if r["key"] == "CCONV_MIN_PROGRAMS")["where"].split(", ")
    assert sorted(w.split("/")[1] for w in where) == ["002-strip-box", "005-small-call-grid"]
    # cconv's real idea: the allowed values are the family's KNOB_RULES
    fam = paths.load_family("cconv")
    rows = json.loads(run("knobs", "cconv", "1", "--json", root=None).stdout)["knobs"]
    ruled = {r["key"]: r["allowed"] for r in rows if r["allowed"]}
    assert ruled and ruled == {k: v[0] for k, v in fam.KNOB_RULES.items() if k in ruled}
    table = run("knobs", "cconv", "1", root=None)
    assert table.exit_code == 0
    for key in ruled:
        assert key in table.stdout


def test_knobs_marks_a_value_outside_the_rules_unusable(monkeypatch) -> None:
    # a value that parses but breaks the family's KNOB_RULES is one check and bench refuse:
    # knobs says so, with the rule, and still lists the other knobs as usable
    fam = paths.load_family("kda")
    key = "KDA_DAV_STAGES"
    allowed, test = fam.KNOB_RULES[key]
    assert not test(99) and test(3)
    monkeypatch.setenv(key, "99")
    rows = json.loads(run("knobs", "kda", "25", "--json", root=None).stdout)["knobs"]
    row = next(r for r in rows if r["key"] == key)
    assert (row["value"], row["set"]) == (99, True)
    assert row["error"] == f"must be {allowed} (family KNOB_RULES)"
    assert all(r["error"] is None for r in rows if r["key"] != key)
    monkeypatch.setenv(key, "3")
    rows = json.loads(run("knobs", "kda", "25", "--json", root=None).stdout)["knobs"]
    assert next(r for r in rows if r["key"] == key)["error"] is None


def test_knobs_usage_errors() -> None:
    usage_error(run("knobs", "toy", "9"), "no idea '9'")
    usage_error(run("knobs", "nope", "1"), "unknown family")


# ------------------------------------------------------------------------------------------
# show
# ------------------------------------------------------------------------------------------


def test_show_prints_every_shape_and_direction() -> None:
    rec = fixture("20260103T100000Z-767b7232")
    result = run("show", "toy", rec["record_id"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    for s in rec["shapes"]:
        for err in s["correctness"]["candidate_err"].values():
            assert f"{err:.3e}" in text
        for d in ("fwd", "bwd", "fwdbwd"):
            t = s[d]
            cand = t["candidate_ms"]["median"]
            line = next(ln for ln in text.splitlines() if ln.split()[:2] == [s["name"], d]).split()
            assert line[2:5] == [
                f"{cand:.4f}",
                f"{t['baseline_ms']['median']:.4f}",
                f"{t['ratio']:.3f}",
            ]
            if d != "fwdbwd":
                tbps = t["min_bytes"] / (cand * 1e-3) / 1e12
                assert line[5:] == [f"{tbps:.3f}", f"{100 * t['fraction_of_copy']:.1f}"]
    assert rec["device"]["name"] in text and rec["record_id"] in text


def test_show_by_prefix_path_and_json() -> None:
    rec = fixture("20260104T100000Z-767b7232")
    by_prefix = run("show", "toy", "20260104", "--json")
    assert json.loads(by_prefix.stdout) == rec
    by_path = run("show", "toy", str(FAST / f"{rec['record_id']}.json"), "--json")
    assert json.loads(by_path.stdout) == rec
    usage_error(run("show", "toy", "2026"), "ambiguous")
    usage_error(run("show", "toy", "19990101T000000Z"), "no toy record")
    usage_error(run("show", "toy", "missing.json"), "no record file missing.json")


# ------------------------------------------------------------------------------------------
# compare
# ------------------------------------------------------------------------------------------


def test_compare_two_records_shape_by_shape() -> None:
    a, b = fixture("20260103T100000Z-767b7232"), fixture("20260105T100000Z-767b7232")
    data = json.loads(run("compare", "toy", a["record_id"], b["record_id"], "--json").stdout)
    sa = {s["name"]: s for s in a["shapes"]}
    sb = {s["name"]: s for s in b["shapes"]}
    common = [n for n in sa if n in sb]
    assert [r["name"] for r in data["shapes"]] == common and common
    for row in data["shapes"]:
        for d in ("fwd", "bwd", "fwdbwd"):
            ma = sa[row["name"]][d]["candidate_ms"]["median"]
            mb = sb[row["name"]][d]["candidate_ms"]["median"]
            assert row[d] == {"a_ms": ma, "b_ms": mb, "b_over_a": pytest.approx(mb / ma)}
    assert any("different devices" in n and b["device"]["name"] in n for n in data["notes"])
    text = run("compare", "toy", a["record_id"], b["record_id"])
    assert "note: different devices" in text.stdout


def test_compare_ideas_by_their_best_records_and_only_common_shapes(tmp_path: Path) -> None:
    root = copy_toy(tmp_path)
    best = fixture("20260103T100000Z-767b7232")
    base = json.loads(next((idea_path(root, "000-base") / "records").glob("*.json")).read_text())
    data = json.loads(run("compare", "toy", "0", "fast", "--json", root=root).stdout)
    assert data["a"]["record_id"] == base["record_id"]
    assert data["b"]["record_id"] == best["record_id"]
    # a record of other versions with one shape fewer
    other = dict(best, record_id="20260301T000000Z-767b7232", created="2026-03-01T00:00:00Z")
    other["versions"] = dict(best["versions"], triton="9.9.9")
    other["shapes"] = best["shapes"][:1]
    records.write_record(idea_path(root, "001-fast"), other)
    data = json.loads(
        run("compare", "toy", best["record_id"], other["record_id"], "--json", root=root).stdout
    )
    assert [r["name"] for r in data["shapes"]] == [best["shapes"][0]["name"]]
    assert data["only_a"] == [s["name"] for s in best["shapes"][1:]]
    assert any(n.startswith("different triton") and "9.9.9" in n for n in data["notes"])
    usage_error(run("compare", "toy", "2", "1"), "002-no-bwd has no record")
    # neither an idea nor a record: the message offers both kinds of argument
    usage_error(run("compare", "toy", "9", "1"), "no toy record or idea '9'", "001-fast")
    usage_error(run("compare", "toy", "fast-typo", "1"), "or an idea (000-base, 001-fast")


def test_a_record_id_under_two_ideas_asks_for_a_path(tmp_path: Path) -> None:
    # a record copied into another idea's folder: its full id cannot be made longer, so the
    # message names the paths that tell the two apart
    root = copy_toy(tmp_path)
    rec = fixture("20260104T100000Z-767b7232")
    src = idea_path(root, "001-fast") / "records" / f"{rec['record_id']}.json"
    dup = idea_path(root, "003-wrong-taps") / "records" / src.name
    dup.write_bytes(src.read_bytes())
    err = usage_error(run("show", "toy", rec["record_id"], root=root), "give the record's path")
    assert str(src) in err and str(dup) in err
    assert "give more of the id" not in err
    by_path = run("show", "toy", str(src), "--json", root=root)
    assert json.loads(by_path.stdout) == rec


# ------------------------------------------------------------------------------------------
# bench: knob sweeps
# ------------------------------------------------------------------------------------------

FLAKY = '''
"""toy/004: 000's kernel, wrong on purpose when TOY_BROKEN=1."""

import os

from ladder.kernels.toy.ideas.i000 import kernel as base

BROKEN = os.environ.get("TOY_BROKEN", "0") == "1"
BLOCK = int(os.environ.get("TOY_BLOCK4", "8"))


def toy_fwd(x, w):
    y = base.toy_fwd(x, w)
    return 2 * y if BROKEN else y


def toy_bwd(x, w, dy):
    return base.toy_bwd(x, w, dy)
'''


@pytest.fixture
def cpu_gpu(tmp_path: Path, monkeypatch) -> tuple[Path, list]:
    """A toy tree with idea 004, benched on the CPU as if it were the GPU; its measurements."""
    root = copy_toy(tmp_path)
    (idea_path(root, "004-flaky") / "records").mkdir(parents=True)
    (idea_path(root, "004-flaky") / "kernel.py").write_text(FLAKY)
    measured: list = []

    def measure(self, state):
        measured.append(state.seed)
        bench.measure(
            state, device="cpu", clock=timing.WallClock(), l2_bytes=1 << 16, copy_bytes=1 << 20
        )

    monkeypatch.setattr(bench.GpuRuntime, "unavailable", lambda self: None)
    monkeypatch.setattr(
        bench.GpuRuntime,
        "device_info",
        lambda self: {"name": "NVIDIA H200 (CPU stand-in)", "capability": "9.0", "driver": "x"},
    )
    monkeypatch.setattr(bench.GpuRuntime, "clocks", lambda self: {})
    monkeypatch.setattr(bench.GpuRuntime, "measure", measure)
    monkeypatch.setenv("LADDER_COMMIT", "c" * 40)
    monkeypatch.setenv("LADDER_DIRTY", "0")
    for key in ("TOY_BROKEN", "TOY_BLOCK4"):
        monkeypatch.delenv(key, raising=False)
    return root, measured


def _sweep(root: Path, *knobs: str):
    argv = ["bench", "toy", "4", "--shapes", "prod", "--rounds", "1", "--reps", "1"]
    for k in knobs:
        argv += ["--knob", k]
    return run(*argv, root=root)


def test_sweep_benches_every_point_with_one_seed(cpu_gpu) -> None:
    root, measured = cpu_gpu
    result = run(
        "bench", "toy", "4", "--shapes", "prod", "--rounds", "1", "--reps", "1", "--seed", "11",
        "--knob", "TOY_BROKEN=1,0", "--knob", "TOY_BLOCK4=16,32",
        root=root,
    )  # fmt: skip
    assert result.exit_code == 1, result.output  # the broken points are incorrect
    recs = records.load_idea_records(idea_path(root, "004-flaky"))
    got = sorted((r["knobs"]["TOY_BROKEN"], r["knobs"]["TOY_BLOCK4"], r["status"]) for r in recs)
    assert got == [
        (False, 16, "passed"),
        (False, 32, "passed"),
        (True, 16, "incorrect"),
        (True, 32, "incorrect"),
    ]  # each point imported the idea afresh with its own values
    assert {r["seed"] for r in recs} == {11} and measured == [11] * 4
    assert "sweep: 4 points of TOY_BROKEN, TOY_BLOCK4, seed 11" in result.stdout
    for rec in recs:
        assert rec["record_id"] in result.stdout


def test_sweep_refusals_come_before_any_measurement(cpu_gpu) -> None:
    root, measured = cpu_gpu
    many = ",".join(str(8 * i) for i in range(1, 66))
    usage_error(_sweep(root, f"TOY_BLOCK4={many}"), "65 points", "more than 64")
    usage_error(_sweep(root, "TOY_BLOCK4=16,lots"), "TOY_BLOCK4=lots")
    usage_error(_sweep(root, "TOY_BLOCK4=16,,32"), "empty value")
    usage_error(_sweep(root, "TOY_BLOCK4=16,16"), "listed twice")
    usage_error(_sweep(root, "TOY_NOPE=1,2"), "never reads TOY_NOPE")
    assert measured == []
    assert list((idea_path(root, "004-flaky") / "records").iterdir()) == []


def test_show_labels_any_familys_shape_fields() -> None:
    from ladder.recview import _shape_label

    kda = {"name": "prod", "B": 16, "T": 8192, "H": 16, "K": 128, "case": "dense",
           "lengths": None, "state": False, "fwd": {}, "host_us": {}, "peak_mem_bytes": {}}  # fmt: skip
    assert _shape_label(kda) == "prod B16 T8192 H16 K128 case=dense"
    cconv = {"name": "w2", "B": 16, "T": 8192, "D": 2048, "W": 2, "x_dtype": "bfloat16"}
    assert _shape_label(cconv) == "w2 B16 T8192 D2048 W2 x_dtype=bfloat16"


def test_bench_of_a_family_ranking_on_several_shapes_says_the_rank_ratio(cpu_gpu) -> None:
    """With RANK_SHAPES, a sweep's table has the rank score of each point, and a bench that
    times only some of the rank shapes says it cannot win."""
    root, _ = cpu_gpu
    rank = ("prod", "d16-w2")
    fam = root / "kernels" / "toy" / "family.py"
    fam.write_text(fam.read_text() + f"\nRANK_SHAPES = {rank!r}\n")
    result = run(
        "bench", "toy", "4", "--shapes", "prod,d16-w2", "--rounds", "1", "--reps", "1",
        "--seed", "5", "--knob", "TOY_BLOCK4=16,32",
        root=root,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "rank x over prod, d16-w2" in result.stdout
    recs = records.load_idea_records(idea_path(root, "004-flaky"))
    assert len(recs) == 2
    for rec in recs:  # the point's row: its knob, status, fwd ms, bwd ms, prod x, rank x, id
        line = next(ln for ln in result.stdout.splitlines() if rec["record_id"] in ln and "│" in ln)
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        score = records.rank_score(rec, rank)
        assert score is not None and cells[4:] == [
            f"{records.prod_ratio(rec):.3f}",
            f"{score:.3f}",
            rec["record_id"],
        ]
    single = run("bench", "toy", "4", "--shapes", "prod", "--rounds", "1", "--reps", "1", root=root)
    assert single.exit_code == 0, single.output
    assert "no rank ratio: this record does not time fwd and bwd at every rank shape" in (
        " ".join(single.stdout.split())
    )
