"""The kda family's KNOB_RULES: every integer launch knob an idea reads has a rule, every
committed record's values satisfy them, and a bad value is refused before anything runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ladder.cli import app
from ladder.kernels.kda import family

IDEAS = Path(__file__).resolve().parents[1] / "ladder" / "kernels" / "kda" / "ideas"


def test_every_integer_knob_an_idea_reads_has_a_rule() -> None:
    read = {
        m.group(1)
        for path in IDEAS.glob("*/*.py")
        for m in re.finditer(r'int\(os\.environ\.get\("(KDA_[A-Z0-9_]+)"', path.read_text())
    }
    assert read, "no knob found: the pattern no longer matches the ideas' knob reads"
    assert sorted(read - set(family.KNOB_RULES)) == []


def test_committed_records_satisfy_the_rules() -> None:
    n = 0
    for path in IDEAS.glob("*/records/*.json"):
        for name, value in json.loads(path.read_text()).get("knobs", {}).items():
            if name in family.KNOB_RULES and not isinstance(value, bool):
                allowed, ok = family.KNOB_RULES[name]
                assert ok(value), (path.name, name, value, allowed)
                n += 1
    assert n > 100


@pytest.mark.parametrize(
    ("knob", "fragment"),
    [
        ("KDA_WY_BK=-64", "KDA_WY_BK must be a power of two from 16 to 256"),
        ("KDA_L2F_WARPS=3", "KDA_L2F_WARPS must be a power of two from 1 to 16"),
        ("KDA_FH_STAGES=0", "KDA_FH_STAGES must be 1 to 6"),
        ("KDA_WY_MAXNREG=16", "KDA_WY_MAXNREG must be 0 (no cap) or 24 to 255"),
    ],
)
def test_a_bad_launch_knob_is_refused_on_the_cpu(knob: str, fragment: str) -> None:
    # the knob check comes before any device is looked for, so this runs on the CPU
    res = CliRunner().invoke(app, ["bench", "kda", "024", "--knob", knob])
    assert res.exit_code != 0 and fragment in res.output, res.output


def test_check_refuses_a_bad_knob_before_saying_kda_needs_a_gpu() -> None:
    res = CliRunner().invoke(app, ["check", "kda", "024", "--knob", "KDA_WY_BK=3"])
    assert res.exit_code != 0
    assert "KDA_WY_BK must be a power of two from 16 to 256" in res.output, res.output
