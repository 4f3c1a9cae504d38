"""tools/wheelcheck.py: the release wheel is built from a clean copy and ships exactly the
package's source files."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("wheelcheck", ROOT / "tools" / "wheelcheck.py")
wheelcheck = importlib.util.module_from_spec(_spec)
sys.modules["wheelcheck"] = wheelcheck
_spec.loader.exec_module(wheelcheck)

SOURCES = {
    "kernel_fun/__init__.py": b'__version__ = "1.0"\n',
    "kernel_fun/fam/__init__.py": b"",
    "kernel_fun/fam/_kernels/k.py": b"K = 1\n",
}


def fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for name, data in SOURCES.items():
        path = root / "package" / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    cache = root / "package" / "src" / "kernel_fun" / "__pycache__"
    cache.mkdir()
    (cache / "x.cpython-312.pyc").write_bytes(b"\0")
    return root


def fake_wheel(tmp_path: Path, files: dict[str, bytes]) -> Path:
    wheel = tmp_path / "kernel_fun-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("kernel_fun-1.0.dist-info/METADATA", "Name: kernel-fun\n")
    return wheel


def test_the_exact_sources_pass(tmp_path):
    root = fake_root(tmp_path)
    wheelcheck.check_wheel(fake_wheel(tmp_path, SOURCES), root)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda f: {**f, "kernel_fun/fam/_kernels/old.py": b"x = 1\n"}, "ships kernel_fun/fam"),
        (lambda f: {**f, "stray/top.py": b""}, "ships stray/top.py"),
        (lambda f: {k: v for k, v in f.items() if "_kernels" not in k}, "lacks kernel_fun/fam/"),
        (lambda f: {**f, "kernel_fun/__init__.py": b'__version__ = "0.9"\n'}, "differs from"),
    ],
)
def test_anything_else_is_refused(tmp_path, change, fragment):
    root = fake_root(tmp_path)
    with pytest.raises(wheelcheck.WheelError, match=fragment.replace(".", r"\.")) as err:
        wheelcheck.check_wheel(fake_wheel(tmp_path, change(dict(SOURCES))), root)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_a_stale_build_folder_does_not_reach_the_wheel(tmp_path):
    """setuptools keeps what it once copied in package/build/lib; the release build must not
    ship a module that is no longer in the source."""
    root = tmp_path / "repo"
    shutil.copytree(
        ROOT / "package",
        root / "package",
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
    )
    stale = root / "package" / "build" / "lib" / "kernel_fun" / "removed_long_ago.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("GONE = True\n")
    wheel = wheelcheck.build_wheel(root, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert "kernel_fun/removed_long_ago.py" not in names
    assert "kernel_fun/cconv/_provenance.py" in names
    wheelcheck.check_wheel(wheel, root)
    assert stale.is_file()  # the build never touched the tree
