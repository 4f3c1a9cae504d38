"""The board's per-shape view: which records feed the plot and the JSON ``shapes`` section.

An idea benched as a ``prod`` record and a ``sweep`` record of the same code shows every shape
of both; records of other code, other devices, other dirty state, or that did not pass, are
left out. The figure is checked bar by bar against the record files on disk.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ladder import board as board_mod
from ladder import boardplot
from ladder.cli import app
from tests.fixtures.ladder.helpers import copy_toy, idea_path
from tests.fixtures.ladder.recgen import fake_sha, make_record, shape_entry

W3 = (16, 8192, 2048, 3)
B4 = (4, 2048, 2048, 4)


def _read(root: Path, folder: str, stem_prefix: str) -> dict:
    (path,) = (idea_path(root, folder) / "records").glob(stem_prefix + "*.json")
    return json.loads(path.read_text())


def _write(root: Path, folder: str, rec: dict) -> dict:
    from ladder import records

    records.write_record(idea_path(root, folder), rec)
    return rec


def _with_shapes(rec: dict, shapes: list[dict]) -> dict:
    rec["shapes"] = shapes
    return rec


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The toy tree plus, on 000-base (whose best record has prod and d1024 at ceiling 4.0):
    a newer sweep record of the same code (d1024, w3, b4 at ceiling 5.0), and newer records
    that must not be plotted: other code, incorrect, B300, dirty."""
    root = copy_toy(tmp_path)
    sha = _read(root, "000-base", "20260102")["code_sha"]
    sweep = [
        shape_entry("d1024", (0.3, 0.6), (0.7, 1.4), ceiling=5.0, dims=(16, 8192, 1024, 4)),
        shape_entry("w3", (0.9, 1.2), (1.1, 2.9), ceiling=5.0, dims=W3),
        shape_entry("b4", (0.05, 0.07), (0.09, 0.3), ceiling=5.0, dims=B4),
    ]
    _write(
        root,
        "000-base",
        _with_shapes(
            make_record(idea="000-base", code_sha=sha, created="2026-01-07T10:00:00Z", ceiling=5.0),
            sweep,
        ),
    )
    decoys = [
        ("2026-01-08T10:00:00Z", "old-code", {"code_sha": fake_sha("old base")}),
        ("2026-01-09T10:00:00Z", "other-device", {"device": "NVIDIA B300"}),
        ("2026-01-10T10:00:00Z", "dirty-only", {"dirty": True}),
    ]
    for created, name, override in decoys:
        kw = {"code_sha": sha, **override}
        rec = make_record(idea="000-base", created=created, ceiling=6.0, **kw)
        shapes = [
            shape_entry("d1024", (0.1, 0.6), (0.2, 1.4), ceiling=6.0),
            shape_entry(name, (0.1, 0.6), (0.2, 1.4), ceiling=6.0),
        ]
        _write(root, "000-base", _with_shapes(rec, shapes))
    bad = make_record(
        idea="000-base", code_sha=sha, created="2026-01-11T10:00:00Z", status="incorrect"
    )
    bad["shapes"].append(shape_entry("incorrect-only", None, None, passed=False))
    _write(root, "000-base", bad)
    return root


def _points(b: board_mod.Board, idea: str) -> dict[str, board_mod.ShapePoint]:
    return {p.shape: p for p in b.shapes if p.idea == idea}


def _tbps(entry: dict, key: str) -> float:
    return entry["min_bytes"] / (entry[key]["median"] * 1e-3) / 1e12


def test_shapes_join_same_code_records_newest_first(root: Path) -> None:
    b = board_mod.build_board("toy", root)
    best = _read(root, "000-base", "20260102")
    sweep = _read(root, "000-base", "20260107")
    rows = {r.idea: r for r in b.rows}
    # The table still shows one row per idea from its best record.
    assert rows["000-base"].record_id == best["record_id"]
    assert rows["000-base"].records == 5  # the B300 decoy is off this board's device
    pts = _points(b, "000-base")
    assert list(pts) == ["prod", "d1024", "w3", "b4"]
    assert pts["prod"].record_id == best["record_id"]
    for name in ("d1024", "w3", "b4"):  # d1024 is in both: the newer record wins
        assert pts[name].record_id == sweep["record_id"]
    d1024 = next(s for s in sweep["shapes"] if s["name"] == "d1024")
    assert pts["d1024"].fwd_ms == d1024["fwd"]["candidate_ms"]["median"]
    assert pts["d1024"].fla_bwd_ms == d1024["bwd"]["baseline_ms"]["median"]
    assert pts["d1024"].bwd_TBps == pytest.approx(_tbps(d1024["bwd"], "candidate_ms"))
    assert (pts["w3"].fields["W"], pts["b4"].fields["B"], pts["b4"].fields["T"]) == (3, 4, 2048)
    assert "correctness" not in pts["w3"].fields and "name" not in pts["w3"].fields
    # Each point carries the copy ceiling of the record it came from.
    assert pts["prod"].copy_ceiling_TBps == best["copy_ceiling_TBps"] == 4.0
    assert pts["w3"].copy_ceiling_TBps == sweep["copy_ceiling_TBps"] == 5.0
    assert pts["w3"].fwd_fraction_of_copy == pytest.approx(pts["w3"].fwd_TBps / 5.0)
    # 001-fast: its clean best record only; the dirty and the old-code records stay out.
    fast = _read(root, "001-fast", "20260103")
    assert {p.record_id for p in _points(b, "001-fast").values()} == {fast["record_id"]}
    assert {p.idea for p in b.shapes} == {"000-base", "001-fast"}  # 003: incorrect only


def test_shapes_any_device_keeps_the_best_records_device(root: Path) -> None:
    b = board_mod.build_board("toy", root, device="")
    pts = _points(b, "000-base")
    assert list(pts) == ["prod", "d1024", "w3", "b4"]  # no "other-device" from the B300 record
    b300 = _read(root, "001-fast", "20260105")
    fast = _points(b, "001-fast")
    assert {p.record_id for p in fast.values()} == {b300["record_id"]}
    assert fast["prod"].fwd_ms == b300["shapes"][0]["fwd"]["candidate_ms"]["median"]


def test_board_json_has_shapes(root: Path) -> None:
    result = CliRunner().invoke(app, ["--root", str(root), "board", "toy", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    got = {(s["idea"], s["shape"]): s for s in data["shapes"]}
    assert sorted(n for i, n in got if i == "000-base") == ["b4", "d1024", "prod", "w3"]
    sweep = _read(root, "000-base", "20260107")
    assert got["000-base", "w3"]["record_id"] == sweep["record_id"]
    assert got["000-base", "w3"]["copy_ceiling_TBps"] == 5.0
    assert len(data["rows"]) == 4


def test_figure_bars_and_ceilings_come_from_the_records(root: Path) -> None:
    import matplotlib.pyplot as plt

    b = board_mod.build_board("toy", root)
    fig = board_mod.board_figure(b)
    try:
        recs = {
            "000-base": {
                "prod": _read(root, "000-base", "20260102"),
                **dict.fromkeys(("d1024", "w3", "b4"), _read(root, "000-base", "20260107")),
            },
            "001-fast": dict.fromkeys(("prod", "d1024"), _read(root, "001-fast", "20260103")),
        }
        names = ["prod", "d1024", "w3", "b4"]
        fwd_ax, bwd_ax = fig.axes
        for ax, direction in ((fwd_ax, "fwd"), (bwd_ax, "bwd")):
            ticks = [t.get_text() for t in ax.get_xticklabels()]
            assert [t.split("\n")[0] for t in ticks] == names
            # the name, then the dims wrapped over lines of at most 12 characters
            assert ticks[2].split("\n")[1:] == ["B16 T8192", "D2048 W3"]
            bars = {c.get_label(): list(c) for c in ax.containers}
            assert list(bars) == ["000-base", "001-fast", boardplot.FLA_LABEL]
            faces = {k: {tuple(r.get_facecolor()) for r in v} for k, v in bars.items()}
            assert all(len(f) == 1 for f in faces.values())  # one colour per series
            assert len(set().union(*faces.values())) == 3  # and no two series alike
            (ceil_lines,) = ax.collections
            segs = {
                round(float(s[:, 0].mean()), 6): float(s[0, 1]) for s in ceil_lines.get_segments()
            }
            fla_want: dict[str, list[float]] = {n: [] for n in names}
            for idea, by_shape in recs.items():
                got = {names[round(r.get_x() + r.get_width() / 2)]: r for r in bars[idea]}
                assert sorted(got) == sorted(by_shape)
                for name, rec in by_shape.items():
                    entry = next(s for s in rec["shapes"] if s["name"] == name)[direction]
                    bar = got[name]
                    assert bar.get_height() == pytest.approx(_tbps(entry, "candidate_ms"))
                    centre = round(bar.get_x() + bar.get_width() / 2, 6)
                    assert segs[centre] == rec["copy_ceiling_TBps"]
                    fla_want[name].append(_tbps(entry, "baseline_ms"))
            fla = {
                names[round(r.get_x() + r.get_width() / 2)]: r for r in bars[boardplot.FLA_LABEL]
            }
            for name in names:
                assert fla[name].get_height() == pytest.approx(statistics.median(fla_want[name]))
            assert max(segs.values()) == 5.0  # the decoys' 6.0 ceiling is nowhere
    finally:
        plt.close(fig)


def test_an_idea_with_records_on_other_devices_only_is_named_under_the_board(
    tmp_path: Path,
) -> None:
    root = copy_toy(tmp_path)
    sha = fake_sha("no-bwd")
    for dev, when in (("NVIDIA H100 80GB HBM3", "2026-01-08T10:00:00Z"),
                      ("NVIDIA B300", "2026-01-09T10:00:00Z")):  # fmt: skip
        _write(root, "002-no-bwd", make_record(idea="002-no-bwd", code_sha=sha, created=when,
                                               device=dev))  # fmt: skip
    b = board_mod.build_board("toy", root)
    rows = {r.idea: r for r in b.rows}
    assert rows["002-no-bwd"].record_id is None
    assert rows["002-no-bwd"].other_devices == ["NVIDIA B300", "NVIDIA H100 80GB HBM3"]
    assert rows["001-fast"].record_id is not None and rows["001-fast"].other_devices == [
        "NVIDIA B300"
    ]
    out = CliRunner().invoke(app, ["--root", str(root), "board", "toy"], terminal_width=400)
    assert out.exit_code == 0, out.output
    notes = [ln for ln in out.stdout.splitlines() if "records on other devices" in ln]
    assert notes == [
        "no record on H200, records on other devices: 002-no-bwd (NVIDIA B300, NVIDIA H100 "
        "80GB HBM3); `python -m ladder board toy --device ''` shows every device"
    ]
    every = CliRunner().invoke(app, ["--root", str(root), "board", "toy", "--device", ""])
    assert "records on other devices" not in every.stdout
    data = json.loads(
        CliRunner().invoke(app, ["--root", str(root), "board", "toy", "--json"]).stdout
    )
    assert {r["idea"]: r["other_devices"] for r in data["rows"]}["002-no-bwd"] == [
        "NVIDIA B300",
        "NVIDIA H100 80GB HBM3",
    ]


@pytest.mark.parametrize("n", [1, 3, 9, 10, 13, 18, 19, 40])
def test_idea_colors_are_distinct_and_never_fla_grey(n: int) -> None:
    import matplotlib.colors as mcolors

    colors = [boardplot.idea_color(j, n) for j in range(n)]
    assert len(set(colors)) == n
    for r, g, b, _ in colors:  # none grey like fla's bars: some channel stands apart
        assert max(r, g, b) - min(r, g, b) > 0.1, (r, g, b)
    assert mcolors.to_rgba("0.6") not in colors


def test_a_passed_row_names_the_records_where_its_code_failed_the_check(root: Path) -> None:
    """000-base's shown record passed; the fixture's incorrect record of the same code and
    knobs is named under the board (and in the JSON), with its seed; incorrect records of
    other code, other knobs or another device are not."""
    sha = _read(root, "000-base", "20260102")["code_sha"]
    decoys = [
        ("2026-01-12T10:00:00Z", {"code_sha": fake_sha("other base")}, {}),
        ("2026-01-13T10:00:00Z", {"code_sha": sha}, {"knobs": {"TOY_BLOCK": "64"}}),
        ("2026-01-14T10:00:00Z", {"code_sha": sha, "device": "NVIDIA B300"}, {}),
    ]
    for created, kw, extra in decoys:
        rec = make_record(idea="000-base", created=created, status="incorrect", **kw)
        _write(root, "000-base", {**rec, **extra, "seed": 7})
    fail = _read(root, "000-base", "20260111")
    b = board_mod.build_board("toy", root)
    row = next(r for r in b.rows if r.idea == "000-base")
    assert row.status == "passed"
    assert [bad["record_id"] for bad in row.incorrect_same_code] == [fail["record_id"]]
    assert row.incorrect_same_code[0]["seed"] == fail.get("seed")
    assert all(not r.incorrect_same_code for r in b.rows if r.idea != "000-base")
    out = CliRunner().invoke(app, ["--root", str(root), "board", "toy"], terminal_width=400)
    assert out.exit_code == 0, out.output
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("also incorrect:")]
    assert len(lines) == 1
    assert f"failed the check in record {fail['record_id']}" in lines[0]
    assert f"of record {row.record_id}" in lines[0]
    data = json.loads(
        CliRunner().invoke(app, ["--root", str(root), "board", "toy", "--json"]).stdout
    )
    rows = {r["idea"]: r for r in data["rows"]}
    assert [bad["record_id"] for bad in rows["000-base"]["incorrect_same_code"]] == [
        fail["record_id"]
    ]
