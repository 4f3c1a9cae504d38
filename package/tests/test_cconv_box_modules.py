"""Which vendored module the cconv dispatch takes its box kernels (every case) from: the
vendored winner's, when it carries them, so that promoting a new idea needs no list edited
by hand (a stale list would keep running the previous idea's case kernels, silently)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types

from kernel_fun.cconv import ops


def _fake_build(monkeypatch, api: tuple[str, ...]) -> str:
    """A vendored winner module `strip9` holding `api`, named by the build's `_kernels`."""
    name = "kernel_fun.cconv._kernels.strip9"
    winner = types.ModuleType(name)
    for attr in api:
        setattr(winner, attr, lambda *a, **k: None)
    monkeypatch.setitem(sys.modules, name, winner)
    monkeypatch.setattr(ops, "_winner_module", lambda: name)
    return name


def test_the_vendored_winner_comes_first_when_it_has_every_case(monkeypatch):
    name = _fake_build(monkeypatch, ops.BOX_API)
    assert ops.box_modules() == (name, *ops.BOX_MODULES)
    monkeypatch.setattr(ops, "_box_mod", False)
    assert ops._box() is sys.modules[name]


def test_a_dense_only_winner_leaves_the_list(monkeypatch):
    _fake_build(monkeypatch, ("cconv_fwd", "cconv_bwd"))
    assert ops.box_modules() == ops.BOX_MODULES


def test_no_vendored_kernels_leaves_the_list(monkeypatch):
    monkeypatch.setattr(ops, "_winner_module", lambda: None)
    assert ops.box_modules() == ops.BOX_MODULES


def test_this_build_takes_the_module_its_init_imports_from():
    """The vendored build: `_kernels/__init__.py` imports the entry points from the winner's
    module, and that module is the first one tried when it carries every case. The entry points' own __module__ is not the test: an idea may hand out
    another idea's functions (cconv 007 hands out 006's)."""
    import importlib

    from kernel_fun.cconv import _kernels

    name = ops._winner_module()
    assert name is not None and name.startswith("kernel_fun.cconv._kernels.")
    winner = importlib.import_module(name)
    assert _kernels.cconv_fwd is winner.cconv_fwd and _kernels.cconv_bwd is winner.cconv_bwd
    has_api = all(hasattr(winner, a) for a in ops.BOX_API)
    assert ops.box_modules()[:1] == ((name,) if has_api else ops.BOX_MODULES[:1])
    assert len(set(ops.box_modules())) == len(ops.box_modules())


def test_a_broken_winner_is_tried_first_so_its_error_is_reported(monkeypatch):
    """A vendored winner that fails to import must not be skipped for an older module's
    kernels: it comes first, import_vendored reports its error, and calls go to fla."""
    name = "kernel_fun.cconv._kernels.strip_broken"

    class _Boom(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname == name:
                raise ImportError("broken build")
            return None

    monkeypatch.setattr(sys, "meta_path", [_Boom(), *sys.meta_path])
    monkeypatch.setattr(ops, "_winner_module", lambda: name)
    assert ops.box_modules()[0] == name
    monkeypatch.setattr(ops, "_box_mod", False)
    monkeypatch.setattr(ops, "_box_error", None)
    assert ops._box() is None and "broken build" in ops._box_error


def test_an_unreadable_init_is_said_and_leaves_the_list(monkeypatch, tmp_path, caplog):
    from importlib.machinery import ModuleSpec

    from kernel_fun._common import support

    support._reset_for_tests()
    spec = ModuleSpec("kernel_fun.cconv._kernels", None, origin=str(tmp_path / "missing.py"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    with caplog.at_level("WARNING", logger="kernel_fun"):
        assert ops._winner_module() is None
    assert "cannot read the vendored kernels' __init__.py" in caplog.text
    support._reset_for_tests()


def test_a_module_without_the_box_api_sends_the_cases_to_fla(monkeypatch):
    """A dense-only winner falls back to BOX_MODULES; one of those vendored only as the
    winner's helper keeps just what the winner uses, so it may lack the box API: then the
    cases go to fla with that as the reason instead of failing inside a call."""
    name = "kernel_fun.cconv._kernels.strip4"
    helper = types.ModuleType(name)
    helper.cconv_fwd = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, name, helper)
    monkeypatch.setattr(ops, "box_modules", lambda: (name,))
    monkeypatch.setattr(ops, "_box_mod", False)
    monkeypatch.setattr(ops, "_box_error", None)
    assert ops._box() is None
    assert ops._box_error.startswith(name + " has no conv_fwd, conv_bwd, cconv_update")
    assert ops._no_box_reason("bias") == (
        f"bias needs the cconv box kernels, which this build cannot use ({ops._box_error})"
    )
