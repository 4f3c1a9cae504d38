"""Which vendored module the cconv dispatch takes its box kernels (every case) from: the
vendored winner's, when it carries them, so that promoting a new idea needs no list edited
by hand (a stale list would keep running the previous idea's case kernels, silently)."""

from __future__ import annotations

import sys
import types

from kernel_fun.cconv import ops


def _fake_build(monkeypatch, api: tuple[str, ...]) -> str:
    """A vendored `_kernels` whose entry points come from a module `strip9` holding `api`."""
    name = "kernel_fun.cconv._kernels.strip9"
    winner = types.ModuleType(name)
    for attr in api:
        setattr(winner, attr, lambda *a, **k: None)
    winner.cconv_fwd.__module__ = name
    pkg = types.ModuleType("kernel_fun.cconv._kernels")
    pkg.cconv_fwd = winner.cconv_fwd
    monkeypatch.setitem(sys.modules, name, winner)
    monkeypatch.setitem(sys.modules, "kernel_fun.cconv._kernels", pkg)
    monkeypatch.setattr(sys.modules["kernel_fun.cconv"], "_kernels", pkg, raising=False)
    return name


def test_the_vendored_winner_comes_first_when_it_has_every_case(monkeypatch):
    name = _fake_build(monkeypatch, ops.BOX_API)
    assert ops.box_modules() == (name, *ops.BOX_MODULES)
    monkeypatch.setattr(ops, "_box_mod", False)
    assert ops._box() is sys.modules[name]


def test_a_dense_only_winner_leaves_the_list(monkeypatch):
    _fake_build(monkeypatch, ("cconv_fwd", "cconv_bwd"))
    assert ops.box_modules() == ops.BOX_MODULES


def test_this_build_takes_its_winners_module():
    """The vendored build: its winner's module (004's strip4 in this build, which carries
    every case) is the first module tried, and the one the dispatch uses."""
    from kernel_fun.cconv import _kernels

    winner = sys.modules[_kernels.cconv_fwd.__module__]
    has_api = all(hasattr(winner, a) for a in ops.BOX_API)
    expected = (winner.__name__,) if has_api else ops.BOX_MODULES[:1]
    assert ops.box_modules()[:1] == expected
    assert len(set(ops.box_modules())) == len(ops.box_modules())
