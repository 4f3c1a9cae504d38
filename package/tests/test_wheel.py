"""The kernel-fun wheel: built from this tree, installed alone into a bare virtual environment."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PACKAGE = Path(__file__).resolve().parents[1]
SRC = PACKAGE / "src"

pytestmark = pytest.mark.slow


def _source_version() -> str:
    tree = ast.parse((SRC / "kernel_fun" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("kernel_fun/__init__.py assigns no literal __version__")


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel from a copy of package/ (the build writes build/ and *.egg-info)."""
    work = tmp_path_factory.mktemp("wheel")
    tree = work / "package"
    shutil.copytree(
        PACKAGE,
        tree,
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".*"),
    )
    out = work / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(tree),
        ]
    )
    (built,) = out.glob("kernel_fun-*.whl")
    return built


def _metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(zf.read(name).decode())


def test_wheel_name_and_version_match_the_source(wheel):
    meta = _metadata(wheel)
    assert meta["Name"] == "kernel-fun"
    assert meta["Version"] == str(Version(_source_version()))
    assert wheel.name.startswith(f"kernel_fun-{meta['Version']}-py3-none-any")


def test_wheel_ships_every_source_module_and_nothing_else(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    sources = {
        p.relative_to(SRC).as_posix()
        for p in (SRC / "kernel_fun").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    for required in (
        "kernel_fun/__init__.py",
        "kernel_fun/_common/__init__.py",
        "kernel_fun/_common/support.py",
        "kernel_fun/_common/compat.py",
        "kernel_fun/_common/cache.py",
    ):
        assert required in sources and required in names
    # Every module of the tree, generated kernels and provenance included: a folder that
    # lacks an __init__.py would silently drop out of the wheel.
    assert sources <= names, sorted(sources - names)
    stray = {n for n in names if not n.startswith(("kernel_fun/", "kernel_fun-"))}
    assert stray == set()


def test_wheel_requirements_have_floors_the_fla_cap_and_optional_cute(wheel):
    meta = _metadata(wheel)
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    hard = {r.name: r for r in reqs if r.marker is None}
    assert set(hard) == {"torch", "triton", "fla-core", "packaging"}
    for name in ("torch", "triton"):
        assert any(s.operator == ">=" for s in hard[name].specifier), hard[name]
    fla = hard["fla-core"].specifier
    assert fla.contains("0.5.2") and fla.contains("0.6.0") and fla.contains("0.6.9")
    assert not fla.contains("0.5.1") and not fla.contains("0.7.0")

    assert {"cu12", "cu13"} <= set(meta.get_all("Provides-Extra"))
    for extra, cuda_major, other_major in (("cu12", "12.8", "13.0"), ("cu13", "13.0", "12.9")):
        in_extra = {r.name: r for r in reqs if r.marker and r.marker.evaluate({"extra": extra})}
        assert set(in_extra) == {"nvidia-cutlass-dsl", "cuda-python"}, extra
        cuda_python = in_extra["cuda-python"].specifier
        assert cuda_python.contains(cuda_major) and not cuda_python.contains(other_major)
    cu13 = [r for r in reqs if r.marker and r.marker.evaluate({"extra": "cu13"})]
    assert any(r.name == "nvidia-cutlass-dsl" and "cu13" in r.extras for r in cu13)
    # fla's layers (patch_fla's targets) under the same cap as fla-core
    layers = {r.name: r for r in reqs if r.marker and r.marker.evaluate({"extra": "layers"})}
    assert set(layers) == {"flash-linear-attention"}, layers
    spec = layers["flash-linear-attention"].specifier
    assert spec.contains("0.6.0") and not spec.contains("0.7.0") and not spec.contains("0.5.1")


def test_wheel_installs_and_imports_in_a_bare_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=False, clear=True).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    # Without this tree's PYTHONPATH: a kernel_fun.egg-info left in package/src by a plain
    # `pip install ./package` would make pip think the wheel is installed already.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            str(wheel),
        ],
        env=env,
    )
    probe = (
        "import importlib.metadata as md, json, sys\n"
        "import kernel_fun\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'triton', 'fla', 'cutlass'))\n"
        "print(json.dumps({'version': kernel_fun.__version__, 'file': kernel_fun.__file__,"
        " 'dist': md.version('kernel-fun'), 'versions': kernel_fun.versions(),"
        " 'heavy': heavy}))\n"
    )
    proc = _run([str(python), "-c", probe], cwd=tmp_path, env=env)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).resolve().is_relative_to(env_dir.resolve())
    assert out["version"] == out["dist"] == out["versions"]["kernel_fun"] == _source_version()
    assert out["heavy"] == []
    # Nothing but the wheel is installed there: versions() must still answer, without torch.
    for key in ("torch", "triton", "fla", "cutlass", "cuda-python"):
        assert out["versions"][key] == "not installed"
    assert "device" not in out["versions"]
