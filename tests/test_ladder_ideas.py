"""Paths, the idea import finder and knob handling of ideas."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

from ladder import paths, prepare
from tests.fixtures.ladder.helpers import FIXTURE_ROOT, copy_toy, idea_path


def test_resolve_idea_accepts_number_padded_full_and_slug() -> None:
    for ref in ("1", "001", "001-fast", "fast"):
        assert paths.resolve_idea("toy", ref, FIXTURE_ROOT) == "001-fast"
    with pytest.raises(paths.UnknownIdea) as err:
        paths.resolve_idea("toy", "42", FIXTURE_ROOT)
    assert "000-base, 001-fast, 002-no-bwd, 003-wrong-taps" in str(err.value)
    assert "python -m ladder new toy <slug>" in str(err.value)


@pytest.mark.parametrize("ref", ["\u00b2", "\u0661", "\u0660\u0660\u0661", "1\u00b2"])
def test_non_ascii_digits_are_not_idea_numbers(ref: str) -> None:
    # superscript two, Arabic-Indic one, Arabic-Indic 001: isdigit() is true for each
    with pytest.raises(paths.UnknownIdea) as err:
        paths.resolve_idea("toy", ref, FIXTURE_ROOT)
    assert f"no idea {ref!r} in family toy" in str(err.value)


def test_names_ending_in_a_newline_are_not_ideas(tmp_path: Path) -> None:
    root = copy_toy(tmp_path, records=False)
    odd = root / "kernels" / "toy" / "ideas" / "004-nl\n"
    odd.mkdir()
    (odd / "kernel.py").write_text((idea_path(root, "000-base") / "kernel.py").read_text())
    assert paths.list_ideas("toy", root) == ["000-base", "001-fast", "002-no-bwd", "003-wrong-taps"]
    with pytest.raises(paths.LadderError, match="not an idea folder name"):
        paths.idea_number("004-nl\n")
    paths.load_family("toy", root)  # serve ladder.kernels.toy from the copy
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ladder.kernels.toy.ideas.i004")
    assert not paths.FAMILY_RE.match("toy\n")


def test_unknown_family_lists_the_known_ones() -> None:
    with pytest.raises(paths.UnknownFamily, match=r"unknown family 'nope' \(known: toy\)"):
        paths.family_dir("nope", FIXTURE_ROOT)
    assert "cconv" in paths.list_families()


def test_kernels_dir_accepts_repo_root_and_package_folder(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "ladder" / "kernels").mkdir(parents=True)
    assert paths.kernels_dir(repo) == (repo / "ladder" / "kernels").resolve()
    assert paths.kernels_dir(FIXTURE_ROOT) == FIXTURE_ROOT / "kernels"
    with pytest.raises(paths.LadderError, match="no ladder/kernels folder") as err:
        paths.kernels_dir(tmp_path / "empty")
    # the root may come from --root or from LADDER_ROOT: the message names both
    assert "--root" in str(err.value) and "LADDER_ROOT" in str(err.value)


def test_finder_maps_numbered_packages_to_folders() -> None:
    mod = paths.load_idea("toy", "1", FIXTURE_ROOT)
    assert mod.__name__ == "ladder.kernels.toy.ideas.i001.kernel"
    assert Path(mod.__file__) == FIXTURE_ROOT / "kernels/toy/ideas/001-fast/kernel.py"
    # 001 imports 000 through the finder
    base = sys.modules["ladder.kernels.toy.ideas.i000.kernel"]
    assert mod.base is base
    pkg = importlib.import_module("ladder.kernels.toy.ideas.i000")
    assert list(pkg.__path__) == [str(FIXTURE_ROOT / "kernels/toy/ideas/000-base")]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ladder.kernels.toy.ideas.i077")


def test_finder_serves_this_checkouts_ideas() -> None:
    mod = importlib.import_module("ladder.kernels.cconv.ideas.i000.kernel")
    assert callable(mod.cconv_fwd) and callable(mod.cconv_bwd)
    assert Path(mod.__file__).parent.name == "000-fla"


def test_missing_entry_point_is_a_one_line_error() -> None:
    with pytest.raises(paths.BadIdea) as err:
        paths.load_idea("toy", "2", FIXTURE_ROOT)
    msg = str(err.value)
    assert "ideas/002-no-bwd/kernel.py does not define toy_bwd" in msg
    assert "\n" not in msg


def test_rebinding_a_family_to_another_root_reimports(tmp_path: Path) -> None:
    root = copy_toy(tmp_path, records=False)
    (idea_path(root, "000-base") / "kernel.py").write_text(
        "from ladder.kernels.toy import family\n\n"
        "MARK = 'copy'\n\n"
        "def toy_fwd(x, w):\n    return family.baseline_fwd(x, w)\n\n"
        "def toy_bwd(x, w, dy):\n    return family.baseline_bwd(x, w, dy)\n"
    )
    assert paths.load_idea("toy", "0", root).MARK == "copy"
    assert not hasattr(paths.load_idea("toy", "0", FIXTURE_ROOT), "MARK")


def test_knobs_include_imported_ideas_and_apply_before_import(monkeypatch) -> None:
    monkeypatch.delenv("TOY_BLOCK", raising=False)
    monkeypatch.delenv("TOY_FAST", raising=False)
    assert prepare.related_ideas("toy", "001-fast", FIXTURE_ROOT) == ["000-base"]
    found = prepare.idea_knobs("toy", "001-fast", FIXTURE_ROOT)
    assert sorted(found) == ["TOY_BLOCK", "TOY_FAST"]
    p = prepare.prepare_idea(
        "toy", "1", ["TOY_BLOCK=128"], FIXTURE_ROOT, defaults={"TOY_FAST": "0"}
    )
    assert p.module.BLOCK == 128 and p.module.FAST is False
    assert p.knob_values() == {"TOY_BLOCK": 128, "TOY_FAST": False}
    assert os.environ["TOY_BLOCK"] == "128"
    # a later load with another value re-reads the knob
    p2 = prepare.prepare_idea("toy", "1", ["TOY_BLOCK=32"], FIXTURE_ROOT)
    assert p2.module.BLOCK == 32


@pytest.mark.parametrize(("word", "on"), [("True", True), ("true", True), ("False", False)])
def test_a_bool_knob_takes_the_words_a_record_prints(word: str, on: bool) -> None:
    # records store bool knobs as true/false; the knob's code compares with "1"
    p = prepare.prepare_idea("toy", "1", [f"TOY_FAST={word}"], FIXTURE_ROOT)
    assert p.module.FAST is on and os.environ["TOY_FAST"] == ("1" if on else "0")
    assert p.knob_values()["TOY_FAST"] is on


@pytest.mark.parametrize("word", ["true", "True", "yes", ""])
def test_a_bool_knob_in_the_environment_must_be_0_or_1(word: str, monkeypatch) -> None:
    # the knob's code compares with "1": "true" in the environment would quietly read as off
    monkeypatch.setenv("TOY_FAST", word)
    with pytest.raises(paths.LadderError) as err:
        prepare.prepare_idea("toy", "1", [], FIXTURE_ROOT, load=False)
    msg = str(err.value)
    assert f"TOY_FAST={word!r} in the environment" in msg and "set it to 1 or 0" in msg
    assert ("--knob TOY_FAST=" in msg) == (word in ("true", "True"))
    # --knob overrides the environment; 0 / 1 there are fine
    assert prepare.prepare_idea("toy", "1", ["TOY_FAST=1"], FIXTURE_ROOT, load=False)
    monkeypatch.setenv("TOY_FAST", "0")
    assert prepare.prepare_idea("toy", "1", [], FIXTURE_ROOT, load=False)


def test_a_sweep_listing_one_bool_value_twice_is_refused() -> None:
    with pytest.raises(paths.LadderError, match="'true' is listed twice"):
        prepare.sweep_points(["TOY_FAST=1,true"])
    assert prepare.sweep_points(["TOY_FAST=0,true"]) == [["TOY_FAST=0"], ["TOY_FAST=true"]]


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["TOY_NOPE=1"], "idea 001-fast never reads TOY_NOPE (it reads TOY_BLOCK, TOY_FAST)"),
        (["TOY_BLOCK=big"], "--knob TOY_BLOCK=big"),
        (["TOY_BLOCK"], "--knob takes KEY=VALUE"),
        (["TOY_BLOCK=1", "TOY_BLOCK=2"], "--knob TOY_BLOCK given twice"),
        (["TOY_FAST=yes"], "--knob TOY_FAST=yes: TOY_FAST is a bool knob; give 0 or 1"),
    ],
)
def test_bad_knobs(items: list[str], message: str) -> None:
    with pytest.raises(paths.LadderError) as err:
        prepare.prepare_idea("toy", "1", items, FIXTURE_ROOT, load=False)
    assert message in str(err.value)


def test_an_idea_reading_the_environment_badly_is_refused(tmp_path: Path) -> None:
    root = copy_toy(tmp_path, records=False)
    (idea_path(root, "000-base") / "extra.py").write_text(
        "import os\n\n\ndef f():\n    return os.environ['TOY_X']\n"
    )
    with pytest.raises(paths.LadderError, match=r"ideas/000-base/extra\.py:5"):
        prepare.idea_knobs("toy", "000-base", root)
    with pytest.raises(paths.LadderError, match=r"ideas/000-base/extra\.py:5"):
        prepare.idea_knobs("toy", "000-base", root)  # a refusal is not remembered as a pass


def test_an_idea_is_scanned_once_per_process_until_its_bytes_change(tmp_path, monkeypatch):
    root = copy_toy(tmp_path, records=False)
    monkeypatch.setattr(prepare, "_SCANNED", {})
    calls: list[tuple[str, ...]] = []
    real = prepare.knobs.scan_idea

    def counting(files, family):
        calls.append(tuple(sorted(files)))
        return real(files, family)

    monkeypatch.setattr(prepare.knobs, "scan_idea", counting)
    first = prepare.prepare_idea("toy", "1", ["TOY_BLOCK=32"], root, load=False)
    scans = len(calls)
    assert scans >= 1
    again = prepare.prepare_idea("toy", "1", [], root, load=False)
    assert len(calls) == scans and again.knobs == first.knobs
    again.knobs.clear()  # the caller's dict is its own
    assert prepare.prepare_idea("toy", "1", [], root, load=False).knobs == first.knobs
    kernel = idea_path(root, "001-fast") / "kernel.py"
    kernel.write_text(kernel.read_text() + "\n# edited\n")
    prepare.prepare_idea("toy", "1", [], root, load=False)
    assert len(calls) == scans + 1  # only the edited idea is scanned again


@pytest.mark.parametrize(
    ("knob", "value", "allowed"),
    [
        ("CCONV_FIXED_G", "3", "4 or 8"),
        ("CCONV_FIXED_WARPS", "3", "a power of two from 1 to 16"),
        ("CCONV_TARGET_PROGRAMS", "0", "a positive integer"),
    ],
)
def test_family_knob_rules_refuse_values_a_kernel_cannot_run(knob, value, allowed, monkeypatch):
    """A value outside cconv's KNOB_RULES is refused before the idea is imported, whether it
    comes from --knob or from the environment (a G of 3 would write outside its segment)."""
    monkeypatch.delenv(knob, raising=False)
    with pytest.raises(paths.LadderError) as err:
        prepare.prepare_idea("cconv", "1", [f"{knob}={value}"], load=False)
    assert str(err.value) == f"--knob {knob}={value}: {knob} must be {allowed} (family KNOB_RULES)"
    monkeypatch.setenv(knob, value)
    with pytest.raises(paths.LadderError, match=f"{knob}={value} in the environment: .*unset"):
        prepare.prepare_idea("cconv", "1", load=False)
    monkeypatch.delenv(knob)
    ok = {"CCONV_FIXED_G": "8", "CCONV_FIXED_WARPS": "4", "CCONV_TARGET_PROGRAMS": "512"}[knob]
    assert prepare.prepare_idea("cconv", "1", [f"{knob}={ok}"], load=False).folder == (
        "001-strip-onepass"
    )


def _second_module(root: Path, text: str) -> None:
    """000-base gains a module `tune.py` that 001-fast's kernel then imports alone."""
    (idea_path(root, "000-base") / "tune.py").write_text(text)
    kernel = idea_path(root, "001-fast") / "kernel.py"
    kernel.write_text(
        kernel.read_text().replace(
            "from ladder.kernels.toy.ideas.i000 import kernel as base\n",
            "from ladder.kernels.toy.ideas.i000 import kernel as base\n"
            "from ladder.kernels.toy.ideas.i000 import tune  # noqa: F401\n",
        )
    )


def test_knobs_of_another_idea_come_from_the_modules_imported(tmp_path: Path) -> None:
    """A module of another idea that nothing imports never runs: its knobs are not the
    idea's, even when it reads a key the idea's imported modules read with another default
    (a record would otherwise state that default as the value that ran)."""
    root = copy_toy(tmp_path, records=False)
    (idea_path(root, "000-base") / "unused.py").write_text(
        'import os\n\nBLOCK = int(os.environ.get("TOY_BLOCK", "8"))\nX = int(os.environ.get("TOY_X", "1"))\n'
    )
    found = prepare.idea_knobs("toy", "001-fast", root)
    assert sorted(found) == ["TOY_BLOCK", "TOY_FAST"]
    assert found["TOY_BLOCK"].default == 64 and found["TOY_BLOCK"].file == "kernel.py"
    # the idea's own folder is read whole
    assert "TOY_X" in prepare.idea_knobs("toy", "000-base", root)
    # an imported module of the other idea counts, and so does what it imports relatively:
    # unused.py, now imported through tune.py, reads TOY_BLOCK with another default
    _second_module(
        root,
        'import os\n\nfrom . import unused  # noqa: F401\n\nY = int(os.environ.get("TOY_Y", "2"))\n',
    )
    with pytest.raises(
        paths.LadderError, match=r"ideas/000-base/unused\.py:3 \(int, default '8'\)"
    ):
        prepare.idea_knobs("toy", "001-fast", root)
    (idea_path(root, "000-base") / "unused.py").write_text(
        'import os\n\nX = int(os.environ.get("TOY_X", "1"))\n'
    )
    assert sorted(prepare.idea_knobs("toy", "001-fast", root)) == [
        "TOY_BLOCK", "TOY_FAST", "TOY_X", "TOY_Y"
    ]  # fmt: skip


def test_two_imported_ideas_reading_one_key_with_other_defaults_is_refused(tmp_path: Path) -> None:
    root = copy_toy(tmp_path, records=False)
    _second_module(root, 'import os\n\nBLOCK = int(os.environ.get("TOY_BLOCK", "32"))\n')
    with pytest.raises(paths.LadderError) as err:
        prepare.idea_knobs("toy", "001-fast", root)
    msg = str(err.value)
    assert "knob TOY_BLOCK" in msg and "ideas/001-fast/kernel.py:11" in msg, msg
    assert "ideas/000-base/tune.py:3" in msg and "default '64'" in msg and "'32'" in msg, msg
    # with the same default, one variable setting both is what ran: allowed
    (idea_path(root, "000-base") / "tune.py").write_text(
        'import os\n\nBLOCK = int(os.environ.get("TOY_BLOCK", "64"))\n'
    )
    found = prepare.idea_knobs("toy", "001-fast", root)
    assert found["TOY_BLOCK"].file == "kernel.py"
