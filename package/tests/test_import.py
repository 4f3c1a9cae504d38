"""`import kernel_fun` stays cheap, and its lazy attributes resolve to the right objects."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import kernel_fun
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("torch", "triton", "cutlass", "fla", "cuda")


def _imported_after(code: str) -> dict:
    """Run `code` in a fresh interpreter on this source tree; report the heavy modules loaded."""
    probe = (
        "import json, sys\n"
        f"{code}\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(json.dumps({'heavy': heavy, 'file': __import__('kernel_fun').__file__}))\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_kernel_fun_loads_no_torch_triton_cutlass_or_fla():
    out = _imported_after("import kernel_fun\nkernel_fun.__version__\ndir(kernel_fun)")
    assert Path(out["file"]).resolve() == SRC / "kernel_fun" / "__init__.py"
    assert out["heavy"] == []


def test_importing_common_modules_loads_nothing_heavy():
    # compat must not import fla at import time: its probe runs from warmup.
    out = _imported_after(
        "import kernel_fun._common.support, kernel_fun._common.compat, kernel_fun._common.cache"
    )
    assert out["heavy"] == []


def test_lazy_attribute_resolves_from_its_module_and_is_cached(monkeypatch):
    fake = types.ModuleType("kernel_fun_lazy_probe")

    def target():
        return "resolved"

    fake.target = target
    monkeypatch.setitem(sys.modules, "kernel_fun_lazy_probe", fake)
    monkeypatch.setitem(kernel_fun._LAZY_ATTRS, "target", "kernel_fun_lazy_probe")
    monkeypatch.delitem(vars(kernel_fun), "target", raising=False)
    try:
        assert kernel_fun.target is target
        assert vars(kernel_fun)["target"] is target  # cached: later accesses skip __getattr__
        assert "target" in dir(kernel_fun)
    finally:
        vars(kernel_fun).pop("target", None)


def test_unknown_attribute_raises_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="no_such_thing"):
        kernel_fun.no_such_thing  # noqa: B018


@pytest.mark.parametrize("name", ["patch_fla", "unpatch_fla", "patched_fla"])
def test_patch_entry_points_resolve_lazily_to_kernel_fun_patch(name):
    vars(kernel_fun).pop(name, None)
    assert name in dir(kernel_fun)
    if importlib.util.find_spec("kernel_fun._patch") is None:
        with pytest.raises(ModuleNotFoundError, match="kernel_fun._patch"):
            getattr(kernel_fun, name)
        return
    patch_module = importlib.import_module("kernel_fun._patch")
    assert getattr(kernel_fun, name) is getattr(patch_module, name)


def test_family_subpackage_is_reachable_as_an_attribute():
    if importlib.util.find_spec("kernel_fun.cconv") is None:
        with pytest.raises(ModuleNotFoundError):
            kernel_fun.cconv  # noqa: B018
        return
    assert kernel_fun.cconv is importlib.import_module("kernel_fun.cconv")


def test_fla_drift_error_is_public_and_the_one_warmup_raises():
    import kernel_fun
    from kernel_fun._common import compat

    assert "FlaDriftError" in kernel_fun.__all__
    assert kernel_fun.FlaDriftError is compat.FlaDriftError
    assert issubclass(kernel_fun.FlaDriftError, RuntimeError)


def test_patch_error_is_public_and_the_one_patch_fla_raises():
    import kernel_fun
    from kernel_fun import _patch

    assert "PatchError" in kernel_fun.__all__
    assert kernel_fun.PatchError is _patch.PatchError
    assert issubclass(kernel_fun.PatchError, RuntimeError)
