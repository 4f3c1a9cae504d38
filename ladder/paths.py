"""Where families, ideas and records live, and how they are loaded.

Every function takes an optional ``root``: the repository root (the folder holding
``ladder/kernels/``). ``None`` means this checkout. A folder that holds ``kernels/<family>/``
directly (the ``ladder`` package folder itself, or a test fixture tree) is accepted too.

Errors are :class:`LadderError` subclasses whose message is one line saying what is wrong and
which command fixes it; the CLI prints it and exits 2.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from ladder import _ideas

__all__ = [
    "BadFamily",
    "BadIdea",
    "LadderError",
    "NoGpu",
    "UnknownFamily",
    "UnknownIdea",
    "family_dir",
    "idea_dir",
    "idea_module_name",
    "idea_number",
    "kernels_dir",
    "list_families",
    "list_ideas",
    "load_family",
    "load_idea",
    "repo_root",
    "resolve_idea",
]

# Anchored with \Z (``$`` would also accept a trailing newline) and ASCII digits only.
IDEA_RE = re.compile(r"^([0-9]{3})-([a-z0-9]+(?:-[a-z0-9]+)*)\Z")
FAMILY_RE = re.compile(r"^[a-z][a-z0-9_]*\Z")
_NUMBER_RE = re.compile(r"[0-9]+")

_PACKAGE_DIR = Path(__file__).resolve().parent


class LadderError(Exception):
    """A usage or configuration error; ``str(err)`` is one line: what is wrong, what to do."""

    exit_code = 2


class UnknownFamily(LadderError):
    """No ``kernels/<family>/family.py`` under the root."""


class UnknownIdea(LadderError):
    """No idea folder matches the reference."""


class BadFamily(LadderError):
    """``family.py`` lacks a protocol attribute or has a malformed one (ladder.contract)."""


class BadIdea(LadderError):
    """The idea folder exists but cannot be used (missing entry points, import failure)."""


class NoGpu(LadderError):
    """A GPU command ran where no CUDA GPU is visible."""


def repo_root() -> Path:
    """The repository root of this checkout (the folder holding ``ladder/``)."""
    return _PACKAGE_DIR.parent


def kernels_dir(root: Path | None = None) -> Path:
    """The ``kernels`` folder under ``root`` (repository root or ladder package folder).

    Raises LadderError when neither ``root/ladder/kernels`` nor ``root/kernels`` exists.
    """
    if root is None:
        return _PACKAGE_DIR / "kernels"
    root = Path(root).resolve()
    for cand in (root / "ladder" / "kernels", root / "kernels"):
        if cand.is_dir():
            return cand
    raise LadderError(
        f"no ladder/kernels folder under {root}; pass the repository root with --root "
        f"(or set LADDER_ROOT to it)"
    )


def _is_default(kdir: Path) -> bool:
    return kdir.resolve() == (_PACKAGE_DIR / "kernels").resolve()


def list_families(root: Path | None = None) -> list[str]:
    """Names of the families under root (folders holding a ``family.py``), sorted."""
    kdir = kernels_dir(root)
    return sorted(
        p.name for p in kdir.iterdir() if (p / "family.py").is_file() and FAMILY_RE.match(p.name)
    )


def family_dir(family: str, root: Path | None = None) -> Path:
    """``kernels/<family>/``. Raises UnknownFamily when it has no ``family.py``."""
    kdir = kernels_dir(root)
    if not FAMILY_RE.match(family) or not (kdir / family / "family.py").is_file():
        known = ", ".join(list_families(root)) or "none"
        raise UnknownFamily(
            f"unknown family {family!r} (known: {known}); a family is "
            f"ladder/kernels/<family>/family.py"
        )
    return kdir / family


def list_ideas(family: str, root: Path | None = None) -> list[str]:
    """Idea folder names (``NNN-slug``) of a family, sorted by number."""
    ideas = family_dir(family, root) / "ideas"
    if not ideas.is_dir():
        return []
    return sorted(p.name for p in ideas.iterdir() if p.is_dir() and IDEA_RE.match(p.name))


def idea_number(folder: str) -> int:
    """The NNN of an idea folder name. Raises LadderError for a malformed name."""
    m = IDEA_RE.match(folder)
    if not m:
        raise LadderError(f"{folder!r} is not an idea folder name (NNN-kebab-slug)")
    return int(m.group(1))


def resolve_idea(family: str, ref: str, root: Path | None = None) -> str:
    """The idea folder name for ``ref``: ``"1"``, ``"001"``, ``"001-strip-onepass"`` or the
    slug alone. Raises UnknownIdea when nothing (or more than one folder) matches."""
    ideas = list_ideas(family, root)
    ref = str(ref).strip()
    if ref in ideas:
        return ref
    if _NUMBER_RE.fullmatch(ref):
        matches = [f for f in ideas if int(f[:3]) == int(ref)]
    else:
        matches = [f for f in ideas if f[4:] == ref]
    if len(matches) == 1:
        return matches[0]
    have = ", ".join(ideas) or "none"
    if len(matches) > 1:
        raise UnknownIdea(
            f"idea {ref!r} of {family} is ambiguous ({', '.join(matches)}); "
            f"rename one folder so each number is used once"
        )
    raise UnknownIdea(
        f"no idea {ref!r} in family {family} (ideas: {have}); "
        f"scaffold one with `python -m ladder new {family} <slug>`"
    )


def idea_dir(family: str, ref: str, root: Path | None = None) -> Path:
    """``kernels/<family>/ideas/<NNN-slug>/`` for a reference (see :func:`resolve_idea`)."""
    return family_dir(family, root) / "ideas" / resolve_idea(family, ref, root)


def idea_module_name(family: str, folder: str) -> str:
    """The import name of an idea folder: ``ladder.kernels.<family>.ideas.i<NNN>``."""
    return f"ladder.kernels.{family}.ideas.i{idea_number(folder):03d}"


_PRIVATE_FAMILIES: dict[Path, ModuleType] = {}


def load_family(family: str, root: Path | None = None, *, complete: bool = False) -> ModuleType:
    """Import ``kernels/<family>/family.py``, check it against the family protocol
    (:func:`ladder.contract.validate_family`) and return the module.

    For this checkout (or a root whose family is not one of this checkout's) the module is
    ``ladder.kernels.<family>.family``. A family of this checkout read from another root is
    loaded from its file under a private name. ``complete``: require every attribute check
    and bench use (else only FAMILY, ENTRY_POINTS, TARGET_DEVICE, plus well-formed values for
    whatever else is defined). Raises UnknownFamily, BadIdea when the module fails to import,
    or BadFamily naming the attribute that is missing or malformed.
    """
    from ladder.contract import validate_family

    module = _import_family(family, root)
    fdir = family_dir(family, root)
    validate_family(module, fdir / "family.py", family, complete=complete)
    return module


def _import_family(family: str, root: Path | None) -> ModuleType:
    fdir = family_dir(family, root)
    kdir = fdir.parent
    if root is not None and not _is_default(kdir) and (_PACKAGE_DIR / "kernels" / family).is_dir():
        path = (fdir / "family.py").resolve()
        if path not in _PRIVATE_FAMILIES:
            tag = hashlib.sha256(str(path).encode()).hexdigest()[:12]
            spec = importlib.util.spec_from_file_location(f"_ladder_family_{tag}_{family}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # dataclasses and pickling look modules up here
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[spec.name]
                raise BadIdea(f"{path}: import failed: {type(exc).__name__}: {exc}") from exc
            _PRIVATE_FAMILIES[path] = module
        return _PRIVATE_FAMILIES[path]
    if not _is_default(kdir):
        _ideas.bind_family(family, fdir)
    try:
        return importlib.import_module(f"ladder.kernels.{family}.family")
    except Exception as exc:
        raise BadIdea(f"{fdir / 'family.py'}: import failed: {type(exc).__name__}: {exc}") from exc


def load_idea(
    family: str, ref: str, root: Path | None = None, *, module: str = "kernel"
) -> ModuleType:
    """Import an idea's module (default ``kernel``) through the idea finder and check that it
    defines the family's ENTRY_POINTS.

    Set any env knobs in ``os.environ`` before calling: knobs are read at import. Raises
    UnknownIdea, BadIdea (import failure, missing entry points) or LadderError.
    """
    fdir = family_dir(family, root)
    folder = resolve_idea(family, ref, root)
    if not _is_default(fdir.parent):
        if (_PACKAGE_DIR / "kernels" / family).is_dir():
            raise LadderError(
                f"family {family} of this checkout cannot import ideas from {fdir}; "
                f"run the command from that checkout"
            )
        _ideas.bind_family(family, fdir)
    fam = load_family(family, root)
    path = fdir / "ideas" / folder / f"{module}.py"
    if not path.is_file():
        raise BadIdea(
            f"{path.relative_to(fdir.parent)} does not exist; an idea exports "
            f"{', '.join(fam.ENTRY_POINTS)} from kernel.py "
            f"(`python -m ladder new {family} <slug>` scaffolds one)"
        )
    name = f"{idea_module_name(family, folder)}.{module}"
    try:
        mod = importlib.import_module(name)
    except Exception as exc:
        raise BadIdea(
            f"ideas/{folder}/{module}.py: import failed: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
    missing = [ep for ep in fam.ENTRY_POINTS if not callable(getattr(mod, ep, None))]
    if missing:
        raise BadIdea(
            f"ideas/{folder}/{module}.py does not define {', '.join(missing)}; add "
            f"{'it' if len(missing) == 1 else 'them'} (`python -m ladder new {family} <slug>` "
            f"shows the entry points)"
        )
    if module == "kernel":
        from ladder.contract import idea_cases

        idea_cases(fam, mod, f"ideas/{folder}/{module}.py")
    return mod


def loaded_idea_modules(family: str) -> list[str]:
    """Names of idea modules of ``family`` already imported in this process."""
    prefix = f"ladder.kernels.{family}.ideas."
    return sorted(n for n in sys.modules if n.startswith(prefix))
