"""Run one pass of the vendor on source text (for the per-pass tests, codemod style)."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper

from ladder.knobs import scan_module
from tests.ladderfab import vl

SPEC = vl.FamilySpec(
    family="toy",
    entry_points=("toy_fwd",),
    package="kernel_fun.toy",
    modules={"001-a": {"kernel": "a"}},
    target_device="H200",
)


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def freeze(text: str, **values: Any) -> tuple[str, Any]:
    """The freeze pass alone: (code, the Freezer) with the knobs at ``values`` (by key) or
    their defaults."""
    module = cst.parse_module(src(text))
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    sites = scan_module(wrapper, "k.py", "toy")
    vals = {s.knob.key: values.get(s.knob.key, s.knob.default) for s in sites}
    freezer = vl.freeze.Freezer(wrapper, sites, vals, "k.py")
    return module.visit(freezer).code, freezer


def freeze_and_prune(text: str, **values: Any) -> str:
    """The freeze, then the prune of one module whose entry point is ``toy_fwd``."""
    code, _ = freeze(text, **values)
    mod = SimpleNamespace(original=cst.parse_module(src(text)), frozen=cst.parse_module(code))
    key = ("001-a", "kernel")
    return vl.prune.prune({key: mod}, SPEC, key)[key].code
