"""Bad input at the ladder's edges: one-line errors, exit 2, checked before the GPU is needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ladder import profile
from ladder.cli import app
from ladder.paths import LadderError
from tests.fixtures.ladder.helpers import copy_toy


def _one_line_error(result, needle: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert "\n" not in err and "Traceback" not in result.output, result.output
    assert needle in err, err


@pytest.mark.parametrize("name", ["import", "class", "lambda", "def"])
def test_new_family_refuses_python_keywords(tmp_path: Path, name: str) -> None:
    root = copy_toy(tmp_path)
    result = CliRunner().invoke(app, ["--root", str(root), "new-family", name])
    _one_line_error(result, "is a Python keyword")
    assert sorted(p.name for p in (root / "kernels").iterdir()) == ["toy"]


def test_new_family_takes_a_soft_keyword(tmp_path: Path) -> None:
    # `match` and `case` are identifiers in an import statement; only hard keywords are refused
    root = copy_toy(tmp_path)
    result = CliRunner().invoke(app, ["--root", str(root), "new-family", "match"])
    assert result.exit_code == 0, result.output
    assert (root / "kernels" / "match" / "family.py").is_file()


@pytest.mark.parametrize(
    ("directions", "needle"),
    [
        ("", "give names joined by commas"),
        ("fwd,,bwd", "give names joined by commas"),
        ("up", "unknown up; each is one of fwd, bwd, fwdbwd"),
        ("fwd,fwd", "names a direction twice"),
    ],
)
def test_profile_directions_refused(directions: str, needle: str) -> None:
    with pytest.raises(LadderError, match=needle):
        profile.check_directions(directions)


def test_profile_directions_accepted() -> None:
    assert profile.check_directions(" fwd , fwdbwd") == ["fwd", "fwdbwd"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["nosuch", "001"], "unknown family 'nosuch'"),
        (["cconv", "999"], "no idea '999' in family cconv"),
        (["cconv", "001", "--shape", "nosuch"], "family cconv has no shape 'nosuch'"),
        (["cconv", "001", "--directions", "up"], "--directions: unknown up"),
        (["cconv", "001", "--top", "0"], "--top must be at least 1, got 0"),
        (["cconv", "001", "--json", "/nonexistent-dir/x.json"], "does not exist; create it"),
    ],
)
def test_profile_reports_bad_input_before_needing_a_gpu(monkeypatch, args, needle) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(profile.app, args)
    _one_line_error(result, needle)


def test_profile_good_input_on_a_cpu_names_the_gpu(monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(profile.app, ["cconv", "001", "--directions", "fwd"])
    _one_line_error(result, "ladder.profile needs a CUDA GPU")


def test_knob_value_error_grammar(tmp_path: Path) -> None:
    from ladder import knobs

    src = 'import os\nN = int(os.environ.get("TOY_N", "4"))\n'
    (knob,) = knobs.scan_source(src, "kernel.py", "toy")
    with pytest.raises(knobs.KnobError) as info:
        knobs.parse_value(knob, "nan")
    assert "give an int" in str(info.value)


def test_profile_autotune_picks_survives_objects_that_raise_on_getattr(monkeypatch) -> None:
    import sys
    import types

    from triton.runtime.autotuner import Autotuner

    from ladder import profile

    class Raises:
        def __getattr__(self, name):
            raise RuntimeError(f"Tried to instantiate class '{name}'")

    tuner = Autotuner.__new__(Autotuner)
    tuner.cache = {(16, "bf16"): "BK: 32, num_warps: 4"}
    wrapped = types.SimpleNamespace(fn=types.SimpleNamespace(fn=tuner))
    mod = types.ModuleType("fla.fake_kernels")
    mod.raises, mod.kernel = Raises(), wrapped
    monkeypatch.setitem(sys.modules, "fla.fake_kernels", mod)
    outside = types.ModuleType("torch_like_ext")
    outside.raises = Raises()
    monkeypatch.setitem(sys.modules, "torch_like_ext", outside)
    picks = [p for p in profile.autotune_picks() if p["module"] == "fla.fake_kernels"]
    assert picks == [
        {
            "module": "fla.fake_kernels",
            "kernel": "kernel",
            "key": repr((16, "bf16")),
            "config": "BK: 32, num_warps: 4",
        }
    ]


def test_profile_host_table_is_self_time_per_call_largest_first() -> None:
    import types

    from ladder import profile

    def ev(key, self_us, count):
        return types.SimpleNamespace(key=key, self_cpu_time_total=self_us, count=count)

    events = [
        ev("aten::empty", 300.0, 40),
        ev("autograd::engine::evaluate_function", 0.0, 10),
        ev("triton launch", 1200.0, 80),
        ev("aten::zeros", 50.0, 10),
    ]
    rows = profile.host_table(events, reps=10)
    assert [r["op"] for r in rows] == ["triton launch", "aten::empty", "aten::zeros"]
    assert rows[0] == {"op": "triton launch", "us": 120.0, "calls": 8.0}
    assert rows[1]["us"] == 30.0 and rows[1]["calls"] == 4.0


@pytest.mark.parametrize("host", [False, True])
def test_profile_cli_writes_each_direction_in_its_mode(monkeypatch, tmp_path, host) -> None:
    """The CLI's loop without a GPU: the measuring functions stand in, the wiring is real
    (the idea resolved and prepared, each direction measured once, printed and written)."""
    import json
    import types

    import torch

    from ladder import profile

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    fam = profile.paths.load_family("cconv")
    monkeypatch.setattr(fam, "make_inputs", lambda shape, device, seed: None)
    monkeypatch.setattr(fam, "timed", lambda module, inputs: {"fwd": "F", "bwd": "B"})
    monkeypatch.setattr(
        profile,
        "prepare_idea",
        lambda *a, **k: types.SimpleNamespace(folder="000-fla", module=None),
    )
    seen = []

    def fake_host(fn, *, warmup, reps):
        seen.append(("host", fn, warmup, reps))
        return {"host_us": 50.0, "ops": [{"op": "aten::empty", "us": 7.0, "calls": 2.0}]}

    def fake_kernels(fn, *, warmup, reps):
        seen.append(("kernels", fn, warmup, reps))
        return {
            "wall_ms": 1.5,
            "kernel_ms": 1.0,
            "kernels": [{"kernel": "k", "ms": 1.0, "launches": 1}],
        }

    monkeypatch.setattr(profile, "profile_host", fake_host)
    monkeypatch.setattr(profile, "profile_direction", fake_kernels)
    out = tmp_path / "p.json"
    args = ["cconv", "000", "--shape", "prod", "--reps", "3", "--json", str(out)]
    res = CliRunner().invoke(profile.app, args + (["--host"] if host else []))
    assert res.exit_code == 0, res.output
    mode = "host" if host else "kernels"
    assert seen == [(mode, "F", 2, 3), (mode, "B", 2, 3)]
    data = json.loads(out.read_text())
    assert data["mode"] == mode and data["device"] == "Fake GPU"
    assert list(data["directions"]) == ["fwd", "bwd"]
    if host:
        assert data["directions"]["bwd"]["host_us"] == 50.0
        assert (
            "cconv/000-fla prod fwd (host): 50 us/call, profiled ops' self time 7 us/call"
            in res.output
        )
    else:
        assert data["directions"]["fwd"]["wall_ms"] == 1.5
        assert "cconv/000-fla prod fwd: wall 1.500 ms/call, kernels 1.000 ms/call" in res.output


def _fake_profile_gpu(monkeypatch):
    """The profile CLI's measuring parts stood in (see the test above); returns the module."""
    import types

    import torch

    from ladder import profile

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    fam = profile.paths.load_family("cconv")
    monkeypatch.setattr(fam, "make_inputs", lambda shape, device, seed: None)
    monkeypatch.setattr(fam, "timed", lambda module, inputs: {"fwd": "F"})
    monkeypatch.setattr(
        profile,
        "prepare_idea",
        lambda *a, **k: types.SimpleNamespace(folder="000-fla", module=None),
    )
    monkeypatch.setattr(
        profile,
        "profile_direction",
        lambda fn, *, warmup, reps: {"wall_ms": 1.0, "kernel_ms": 1.0, "kernels": []},
    )
    return profile


@pytest.mark.parametrize("what", ["file", "folder", "seed"])
def test_profile_cli_refuses_before_any_gpu_work(monkeypatch, tmp_path, what) -> None:
    """An existing file (a committed record, say) is never replaced, a folder is refused, and
    so is a negative seed: each before the idea is prepared or anything is measured."""
    profile = _fake_profile_gpu(monkeypatch)
    monkeypatch.setattr(profile, "prepare_idea", lambda *a, **k: pytest.fail("prepared"))
    target = tmp_path / "record.json"
    target.write_text('{"kept": true}')
    args = {
        "file": ["--json", str(target)],
        "folder": ["--json", str(tmp_path)],
        "seed": ["--seed", "-1"],
    }[what]
    res = CliRunner().invoke(profile.app, ["cconv", "000", "--directions", "fwd", *args])
    assert res.exit_code == 2, res.output
    assert {"file": "exists", "folder": "is a folder", "seed": "--seed"}[what] in res.output
    assert target.read_text() == '{"kept": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_profile_result_never_replaces_a_file_that_appeared(monkeypatch, tmp_path) -> None:
    profile = _fake_profile_gpu(monkeypatch)
    out = tmp_path / "p.json"
    real = profile.profile_direction

    def appear(fn, **kw):  # another process writes the path while this one measures
        out.write_text("theirs")
        return real(fn, **kw)

    monkeypatch.setattr(profile, "profile_direction", appear)
    res = CliRunner().invoke(
        profile.app, ["cconv", "000", "--directions", "fwd", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert out.read_text() == "theirs"
    assert json.loads((tmp_path / "p.json.1").read_text())["idea"] == "000-fla"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "p.json.1"]
