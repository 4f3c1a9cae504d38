"""kernel_fun.versions(): the right keys, and values that agree with the installed packages."""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import platform
import sys
from pathlib import Path

import kernel_fun
import pytest
import torch
from packaging.version import Version

BASE_KEYS = {"kernel_fun", "torch", "triton", "fla", "cutlass", "cuda-python", "python"}


SRC = Path(kernel_fun.__file__).resolve().parent


def _family_keys() -> set[str]:
    return {
        f"{p.parent.name}.{key}"
        for p in SRC.glob("*/_provenance.py")
        for key in ("record", "source_commit")
    }


def test_keys_are_the_documented_ones():
    keys = set(kernel_fun.versions())
    expected = BASE_KEYS | _family_keys() | ({"device"} if torch.cuda.is_available() else set())
    assert keys == expected
    assert "cconv.record" in keys  # cconv is vendored in this tree


def test_vendored_families_name_their_record_and_source_commit():
    v = kernel_fun.versions()
    for path in SRC.glob("*/_provenance.py"):
        tree = ast.parse(path.read_text())
        values = {
            n.targets[0].id: ast.literal_eval(n.value)
            for n in tree.body
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
        }
        family = path.parent.name
        record = values["RECORD"]
        assert v[f"{family}.record"] == f"{record['idea']}/{record['record_id']}"
        assert v[f"{family}.source_commit"] == values["SOURCE_COMMIT"]
        assert len(v[f"{family}.source_commit"]) == 40


def test_a_damaged_provenance_is_reported_not_raised(tmp_path, monkeypatch):
    fake = tmp_path / "kernel_fun"
    (fake / "good").mkdir(parents=True)
    (fake / "bad").mkdir()
    (fake / "good" / "_provenance.py").write_text(
        'SOURCE_COMMIT = "' + "a" * 40 + '"\nRECORD = {"idea": "001-x", "record_id": "r1"}\n'
    )
    (fake / "bad" / "_provenance.py").write_text("RECORD = {\n")
    monkeypatch.setattr(kernel_fun, "__file__", str(fake / "__init__.py"))
    v = kernel_fun.versions()
    assert v["good.record"] == "001-x/r1" and v["good.source_commit"] == "a" * 40
    assert v["bad.record"] == v["bad.source_commit"] == "unreadable"


def test_version_is_a_valid_pep440_string():
    assert str(Version(kernel_fun.__version__)) == kernel_fun.__version__
    assert kernel_fun.versions()["kernel_fun"] == kernel_fun.__version__


def test_installed_versions_agree_with_metadata_and_the_modules_themselves():
    import fla
    import triton

    v = kernel_fun.versions()
    assert v["torch"] == md.version("torch") == torch.__version__
    assert v["triton"] == triton.__version__
    assert v["fla"] == md.version("fla-core") == fla.__version__
    assert v["python"] == platform.python_version()
    assert v["python"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")


@pytest.mark.parametrize(
    ("key", "module", "dist"),
    [("cutlass", "cutlass", "nvidia-cutlass-dsl"), ("cuda-python", "cuda.bindings", None)],
)
def test_optional_packages_report_version_or_not_installed(key, module, dist):
    value = kernel_fun.versions()[key]
    try:
        present = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # parent package `cuda` absent
        present = False
    if not present:
        assert value == "not installed"
        return
    if dist is None:  # cuda-python: the metapackage when installed, else cuda-bindings
        try:
            expected = md.version("cuda-python")
        except md.PackageNotFoundError:
            expected = md.version("cuda-bindings")
    else:
        expected = md.version(dist)
    assert value == expected


def test_candidate_distributions_are_tried_in_order(monkeypatch):
    monkeypatch.setitem(kernel_fun._DISTRIBUTIONS, "torch", ("kernel-fun-no-such-dist", "torch"))
    monkeypatch.setitem(kernel_fun._DISTRIBUTIONS, "triton", ("kernel-fun-no-such-dist",))
    v = kernel_fun.versions()
    assert v["torch"] == torch.__version__
    assert v["triton"] == "not installed"


def test_device_entry_names_the_gpu_and_its_sm(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    assert kernel_fun.versions()["device"] == "NVIDIA H200 sm90"


def test_no_device_entry_without_cuda_or_when_the_driver_query_fails(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "device" not in kernel_fun.versions()

    def broken(*args):
        raise RuntimeError("driver gone")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", broken)
    assert "device" not in kernel_fun.versions()


@pytest.mark.gpu
def test_device_entry_on_a_real_gpu():
    major, minor = torch.cuda.get_device_capability()
    device = kernel_fun.versions()["device"]
    assert device == f"{torch.cuda.get_device_name()} sm{major}{minor}"
