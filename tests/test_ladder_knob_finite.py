"""A float knob set to nan or inf is refused before anything is measured, and a finished
measurement whose record cannot be written is saved elsewhere, never lost."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from ladder import bench, knobs, paths, prepare, records
from tests.fixtures.ladder.helpers import copy_toy, idea_path
from tests.fixtures.ladder.recgen import make_record
from tests.test_ladder_bench import CpuRuntime

SCALED = '''
"""toy/004 scaled: 000's kernel with a float knob."""

import os

from ladder.kernels.toy.ideas.i000 import kernel as base

SCALE = float(os.environ.get("TOY_SCALE", "{default}"))


def toy_fwd(x, w):
    return base.toy_fwd(x, w)


def toy_bwd(x, w, dy):
    return base.toy_bwd(x, w, dy)
'''


class Counting(CpuRuntime):
    """The CPU stand-in, counting how often a measurement started."""

    def __init__(self) -> None:
        super().__init__()
        self.measured = 0

    def measure(self, state):
        self.measured += 1
        super().measure(state)


@pytest.fixture
def root(tmp_path: Path, monkeypatch) -> Path:
    r = copy_toy(tmp_path)
    folder = idea_path(r, "004-scaled")
    (folder / "records").mkdir(parents=True)
    (folder / "kernel.py").write_text(SCALED.format(default="0.5"))
    monkeypatch.setenv("LADDER_COMMIT", "c" * 40)
    monkeypatch.setenv("LADDER_DIRTY", "0")
    monkeypatch.setenv(records.RESCUE_DIR_ENV, str(tmp_path / "rescue"))
    for key in ("TOY_FAST", "TOY_BLOCK", "TOY_SCALE"):
        monkeypatch.delenv(key, raising=False)
    return r


def _opts(root: Path, **kw) -> bench.BenchOptions:
    base = {"family": "toy", "idea": "4", "shapes": "prod", "rounds": 1, "reps": 1, "root": root}
    return bench.BenchOptions(**{**base, **kw})


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
def test_non_finite_knob_is_refused_before_measuring(root: Path, raw: str) -> None:
    rt = Counting()
    with pytest.raises(paths.LadderError) as err:
        bench.run_bench(_opts(root, knobs=[f"TOY_SCALE={raw}"]), runtime=rt)
    msg = str(err.value)
    assert "TOY_SCALE" in msg and "not a finite float" in msg and "\n" not in msg
    assert err.value.exit_code == 2
    assert rt.measured == 0
    assert list((idea_path(root, "004-scaled") / "records").iterdir()) == []


def test_non_finite_knob_from_the_environment_is_refused(root: Path, monkeypatch) -> None:
    monkeypatch.setenv("TOY_SCALE", "inf")
    rt = Counting()
    with pytest.raises(paths.LadderError, match=r"TOY_SCALE='inf' is not a finite float") as err:
        bench.run_bench(_opts(root), runtime=rt)
    assert "unset TOY_SCALE" in str(err.value) and rt.measured == 0


@pytest.mark.parametrize("default", ["nan", "inf"])
def test_non_finite_default_in_the_idea_is_refused(root: Path, default: str) -> None:
    (idea_path(root, "004-scaled") / "kernel.py").write_text(SCALED.format(default=default))
    rt = Counting()
    with pytest.raises(paths.LadderError) as err:
        bench.run_bench(_opts(root), runtime=rt)
    assert "TOY_SCALE" in str(err.value) and "not a finite float" in str(err.value)
    assert "kernel.py:" in str(err.value) and rt.measured == 0


def test_a_finite_float_knob_is_recorded(root: Path) -> None:
    rec, path = bench.run_bench(_opts(root, knobs=["TOY_SCALE=2.5e-3"]), runtime=Counting())
    assert records.read_record(path)["knobs"] == {"TOY_SCALE": 2.5e-3}


def test_parse_knob_value_refuses_what_no_record_can_hold() -> None:
    (knob,) = knobs.scan_source(SCALED.format(default="1.5"), "kernel.py", "toy")
    assert prepare.parse_knob_value(knob, "-0.25") == -0.25
    for raw in ("nan", "-inf", "1e400"):
        assert not math.isfinite(knobs.parse_value(knob, raw))  # what the code would compute
        with pytest.raises(knobs.KnobError, match=r"kernel.py:\d+: TOY_SCALE=.* not a finite"):
            prepare.parse_knob_value(knob, raw)


def test_a_record_that_cannot_be_written_is_rescued(root: Path, tmp_path: Path) -> None:
    """The records folder turns into a file while measuring: the run is saved elsewhere."""
    rdir = idea_path(root, "004-scaled") / "records"

    class Sabotage(Counting):
        def measure(self, state):
            super().measure(state)
            shutil.rmtree(rdir)
            rdir.write_text("not a folder")

    with pytest.raises(records.RecordNotWritten) as err:
        bench.run_bench(_opts(root, seed=7), runtime=Sabotage())
    msg = str(err.value)
    assert err.value.exit_code == 1 and "\n" not in msg
    saved = list((tmp_path / "rescue").glob("ladder-rescue-toy-*.json"))
    assert len(saved) == 1 and str(saved[0]) in msg
    rec = json.loads(saved[0].read_text())
    assert rec["status"] == "passed" and rec["seed"] == 7
    assert rec["shapes"][0]["fwd"]["candidate_ms"]["median"] > 0
    records.validate_record(rec)  # intact: move it into records/ once the folder is fixed


def test_a_record_json_cannot_hold_is_rescued_with_its_values(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(records.RESCUE_DIR_ENV, str(tmp_path / "rescue"))
    rec = make_record(idea="001-fast", code_sha="1" * 64, created="2026-02-01T00:00:00Z")
    rec["knobs"] = {"TOY_SCALE": math.nan}
    with pytest.raises(records.RecordNotWritten, match=r"knobs.TOY_SCALE: expected a finite"):
        records.write_record(tmp_path / "idea", rec)
    assert not list((tmp_path / "idea").rglob("*.json"))
    (saved,) = (tmp_path / "rescue").iterdir()
    assert math.isnan(json.loads(saved.read_text())["knobs"]["TOY_SCALE"])
    # with nowhere to save it, the record is printed as JSON
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv(records.RESCUE_DIR_ENV, str(blocker / "sub"))
    with pytest.raises(records.RecordNotWritten, match="printed above as JSON"):
        records.write_record(tmp_path / "idea", rec)
