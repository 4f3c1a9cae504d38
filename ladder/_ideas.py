"""The idea import finder: ``ladder.kernels.<family>.ideas.i<NNN>`` -> ``ideas/<NNN>-*/``.

Idea folders are named ``NNN-kebab-slug``, which is not a Python identifier, so an idea that
uses another idea's module imports it by number:

    from ladder.kernels.cconv.ideas.i001 import kernel as strip
    from ladder.kernels.cconv.ideas.i001.kernel import cconv_fwd

``import ladder`` appends :class:`IdeaFinder` to ``sys.meta_path``. It answers only the names
the normal path machinery cannot: the ``i<NNN>`` packages (one per idea folder; their modules
are the folder's ``.py`` files, found by the normal machinery through the package path) and
the ``ladder.kernels.<family>`` package of a family bound from another folder (test fixture
trees), see :func:`bind_family`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["IdeaFinder", "bind_family", "install"]

_IDEA_PKG = re.compile(r"^ladder\.kernels\.([a-z][a-z0-9_]*)\.ideas\.i([0-9]{3})\Z")
_FAMILY_PKG = re.compile(r"^ladder\.kernels\.([a-z][a-z0-9_]*)\Z")
_FOLDER = re.compile(r"^[0-9]{3}-[a-z0-9]+(?:-[a-z0-9]+)*\Z")

# family name -> folder, for families that do not live in this checkout's ladder/kernels.
_BOUND: dict[str, Path] = {}


class _FolderPackageLoader(importlib.abc.Loader):
    """A package with no code of its own: a folder whose modules are its ``.py`` files."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        return None


def _package_spec(fullname: str, folder: Path) -> importlib.machinery.ModuleSpec:
    init = folder / "__init__.py"
    if init.is_file():
        spec = importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[str(folder)]
        )
        assert spec is not None
        return spec
    spec = importlib.machinery.ModuleSpec(fullname, _FolderPackageLoader(), is_package=True)
    spec.submodule_search_locations = [str(folder)]
    return spec


class IdeaFinder(importlib.abc.MetaPathFinder):
    """Maps idea packages to idea folders (see the module docstring)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        m = _IDEA_PKG.match(fullname)
        if m:
            number = m.group(2)
            for base in list(path or []):
                base_dir = Path(base)
                if not base_dir.is_dir():
                    continue
                folders = sorted(
                    p
                    for p in base_dir.iterdir()
                    if p.is_dir() and p.name.startswith(number + "-") and _FOLDER.match(p.name)
                )
                if len(folders) > 1:
                    names = ", ".join(p.name for p in folders)
                    raise ImportError(
                        f"{fullname}: several idea folders numbered {number}: {names}"
                    )
                if folders:
                    return _package_spec(fullname, folders[0])
            return None
        m = _FAMILY_PKG.match(fullname)
        if m and m.group(1) in _BOUND:
            return _package_spec(fullname, _BOUND[m.group(1)])
        return None


_FINDER = IdeaFinder()


def install() -> None:
    """Append the finder to ``sys.meta_path`` once (idempotent)."""
    if not any(isinstance(f, IdeaFinder) for f in sys.meta_path):
        sys.meta_path.append(_FINDER)


def bind_family(family: str, folder: Path) -> None:
    """Serve package ``ladder.kernels.<family>`` from ``folder`` (a family outside this
    checkout's ``ladder/kernels``, e.g. a test fixture). Modules of the family already
    imported from another folder are dropped from ``sys.modules`` so the next import reads
    the new folder."""
    folder = Path(folder).resolve()
    install()
    if _BOUND.get(family) == folder:
        return
    _BOUND[family] = folder
    prefix = f"ladder.kernels.{family}"
    for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
        del sys.modules[name]
    importlib.invalidate_caches()
