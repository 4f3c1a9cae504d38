"""The family contract as the vendor reads it: literals of ``family.py`` at a commit.

``FAMILY``, ``ENTRY_POINTS``, ``VENDOR`` and ``TARGET_DEVICE`` are read with
``ast.literal_eval`` (the module is never imported), so a commit's family.py decides what that
commit vendors. See docs/DESIGN.md, "The family contract".
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import IDEA_RE, IDENT, VendorError
from .gitread import list_tree, read_blob


@dataclass(frozen=True)
class FamilySpec:
    """What the vendor needs from ``ladder/kernels/<family>/family.py``.

    modules: {idea folder: {module stem: package module name}} (``VENDOR["modules"]``);
    package_dir: repo-relative folder of the family's package (``package/src/kernel_fun/F``).
    """

    family: str
    entry_points: tuple[str, ...]
    package: str
    modules: dict[str, dict[str, str]]
    target_device: str

    @property
    def family_dir(self) -> str:
        return f"ladder/kernels/{self.family}"

    @property
    def ideas_dir(self) -> str:
        return f"ladder/kernels/{self.family}/ideas"

    @property
    def package_dir(self) -> str:
        return "package/src/" + self.package.replace(".", "/")

    @property
    def kernels_dir(self) -> str:
        return self.package_dir + "/_kernels"

    @property
    def provenance_path(self) -> str:
        return self.package_dir + "/_provenance.py"


def parse_family_spec(source: bytes, family: str, relpath: str) -> FamilySpec:
    """Read FAMILY, ENTRY_POINTS, VENDOR and TARGET_DEVICE from family.py's source as literals.

    Raises VendorError when one is missing, not a literal or malformed.
    """
    try:
        tree = ast.parse(source, filename=relpath)
    except SyntaxError as exc:
        raise VendorError(f"{relpath}:{exc.lineno}: syntax error: {exc.msg}") from exc
    wanted = {"FAMILY", "ENTRY_POINTS", "VENDOR", "TARGET_DEVICE"}
    found: dict[str, Any] = {}
    for stmt in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if isinstance(target, ast.Name) and target.id in wanted and value is not None:
                try:
                    found[target.id] = ast.literal_eval(value)
                except ValueError:
                    raise VendorError(
                        f"{relpath}:{stmt.lineno}: {target.id} must be a literal for the "
                        "vendor to read it; write it out"
                    ) from None
    missing = sorted(wanted - set(found))
    if missing:
        examples = {
            "FAMILY": f"FAMILY = {family!r}",
            "ENTRY_POINTS": 'ENTRY_POINTS = ("<name>_fwd", "<name>_bwd")',
            "TARGET_DEVICE": 'TARGET_DEVICE = "H200"',
            "VENDOR": (
                f'VENDOR = {{"package": "kernel_fun.{family}", '
                '"modules": {"NNN-slug": {"kernel": "<package module>"}}}'
            ),
        }
        raise VendorError(
            f"{relpath}: defines no {', '.join(missing)}; add "
            + "; ".join(examples[m] for m in missing)
            + ' (docs/DESIGN.md, "The family contract")'
        )
    if found["FAMILY"] != family:
        raise VendorError(f"{relpath}: FAMILY is {found['FAMILY']!r}, not {family!r}")
    eps = found["ENTRY_POINTS"]
    if (
        not isinstance(eps, tuple | list)
        or not eps
        or not all(isinstance(e, str) and IDENT.match(e) for e in eps)
    ):
        raise VendorError(f"{relpath}: ENTRY_POINTS must be a tuple of function names")
    vendor = found["VENDOR"]
    if (
        not isinstance(vendor, dict)
        or not isinstance(vendor.get("package"), str)
        or not isinstance(vendor.get("modules"), dict)
    ):
        raise VendorError(f"{relpath}: VENDOR must be {{'package': str, 'modules': {{...}}}}")
    package = vendor["package"]
    if not re.match(r"^kernel_fun(\.[a-z_][a-z0-9_]*)+$", package):
        raise VendorError(f"{relpath}: VENDOR['package'] {package!r} is not kernel_fun.<name>")
    modules: dict[str, dict[str, str]] = {}
    taken: dict[str, str] = {}
    for folder, mapping in vendor["modules"].items():
        if (
            not isinstance(folder, str)
            or not IDEA_RE.match(folder)
            or not isinstance(mapping, dict)
        ):
            raise VendorError(
                f"{relpath}: VENDOR['modules'] maps idea folders (NNN-slug) to "
                f"{{module stem: package module}}; {folder!r} is not one"
            )
        for stem, name in mapping.items():
            if not (isinstance(stem, str) and IDENT.match(stem)) or not (
                isinstance(name, str) and IDENT.match(name)
            ):
                raise VendorError(f"{relpath}: VENDOR['modules'][{folder!r}]: bad entry {stem!r}")
            if name.startswith("__") or name == "_provenance":
                raise VendorError(f"{relpath}: VENDOR module name {name!r} is reserved")
            if name in taken:
                raise VendorError(
                    f"{relpath}: VENDOR module name {name!r} is used by {taken[name]} and "
                    f"{folder}/{stem}; give each its own name"
                )
            taken[name] = f"{folder}/{stem}"
        modules[folder] = dict(mapping)
    return FamilySpec(
        family=family,
        entry_points=tuple(eps),
        package=package,
        modules=modules,
        target_device=str(found["TARGET_DEVICE"]),
    )


def load_family_spec(repo: Path, commit: str, family: str) -> FamilySpec:
    """:func:`parse_family_spec` of ``ladder/kernels/<family>/family.py`` at ``commit``.

    Raises VendorError for an unknown family.
    """
    relpath = f"ladder/kernels/{family}/family.py"
    source = read_blob(repo, commit, relpath) if re.match(r"^[a-z][a-z0-9_]*$", family) else None
    if source is None:
        known = [
            name
            for name, kind in list_tree(repo, commit, "ladder/kernels")
            if kind == "tree" and read_blob(repo, commit, f"ladder/kernels/{name}/family.py")
        ]
        raise VendorError(
            f"unknown family {family!r} at {commit[:12]} (families: {', '.join(known) or 'none'})"
        )
    return parse_family_spec(source, family, relpath)


def idea_folders(repo: Path, commit: str, spec: FamilySpec) -> list[str]:
    """Idea folder names of the family in ``commit``'s tree."""
    if read_blob(repo, commit, spec.family_dir + "/family.py") is None:
        return []
    return [
        name
        for name, kind in list_tree(repo, commit, spec.ideas_dir)
        if kind == "tree" and IDEA_RE.match(name)
    ]


def resolve_idea_ref(repo: Path, commit: str, spec: FamilySpec, ref: str) -> str:
    """The idea folder for ``"1"``, ``"001"``, ``"001-slug"`` or the slug, at ``commit``."""
    folders = idea_folders(repo, commit, spec)
    ref = ref.strip()
    if ref in folders:
        return ref
    if ref.isascii() and ref.isdigit():  # "²" and other non-ASCII digits are no idea numbers
        matches = [f for f in folders if int(f[:3]) == int(ref)]
    else:
        matches = [f for f in folders if f[4:] == ref]
    if len(matches) == 1:
        return matches[0]
    raise VendorError(
        f"no single idea {ref!r} in {spec.family} at {commit[:12]} "
        f"(ideas: {', '.join(folders) or 'none'})"
    )


def unmapped_idea(spec: FamilySpec, folder: str, stem: str = "kernel", by: str = "") -> VendorError:
    """The refusal for an idea module that ``VENDOR["modules"]`` does not map (``by``: the
    ``path:line`` of the import that needs it, if any)."""
    where = f"{by}: " if by else ""
    what = f"idea module {folder}/{stem}.py, imported here," if by else f"idea {folder}"
    if not by and folder in spec.modules:
        what = f"idea module {folder}/{stem}.py"
    return VendorError(
        f"{where}{what} is not in the VENDOR['modules'] map of {spec.family_dir}/family.py "
        f"(mapped: {', '.join(sorted(spec.modules)) or 'none'}); add "
        f"{folder!r}: {{{stem!r}: '<package module>'}} to it and commit"
    )
