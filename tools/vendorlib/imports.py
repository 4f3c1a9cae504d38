"""Imports between ideas: found, checked, and rewritten into package-relative imports.

An idea may import another idea's module as ``ladder.kernels.<family>.ideas.i<NNN>.<module>``
(or its own with ``from . import``); the vendor maps each such module to its package name
(``family.VENDOR["modules"]``) and refuses any other reference to ``ladder``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import libcst as cst

from .common import IDEA_MODULE, VendorError
from .gitread import list_tree
from .spec import FamilySpec, idea_folders

if TYPE_CHECKING:
    from .build import SourceModule

ModKey = tuple[str, str]  # (idea folder, module stem)


@dataclass
class IdeaImport:
    """One import of an idea module (or of names from one) inside a vendored module.

    kind "module": ``alias`` is bound to module ``target``; kind "names": ``names`` (as
    written, ImportAlias nodes) are imported from ``target``.
    """

    stmt: cst.Import | cst.ImportFrom
    kind: str
    target: ModKey
    alias: str = ""


def dotted_name(node: cst.BaseExpression | None) -> str:
    if node is None:
        return ""
    return cst.Module([]).code_for_node(node)


class ImportResolver:
    """Recognises imports of idea modules of one family at one commit."""

    def __init__(self, repo: Path, commit: str, spec: FamilySpec) -> None:
        self.repo = repo
        self.commit = commit
        self.spec = spec
        self.folders = idea_folders(repo, commit, spec)
        self._stems: dict[str, set[str]] = {}

    def stems(self, folder: str) -> set[str]:
        if folder not in self._stems:
            self._stems[folder] = {
                name[:-3]
                for name, kind in list_tree(
                    self.repo, self.commit, f"{self.spec.ideas_dir}/{folder}"
                )
                if kind == "blob" and name.endswith(".py")
            }
        return self._stems[folder]

    def folder_of(self, number: str, where: str) -> str:
        matches = [f for f in self.folders if f[:3] == number]
        if len(matches) != 1:
            raise VendorError(
                f"{where}: imports idea i{number}, but {len(matches)} idea folders of "
                f"{self.spec.family} are numbered {number} at {self.commit[:12]}"
            )
        return matches[0]

    def _package(self, dotted: str, relative: int, own: str, where: str) -> tuple[str, str | None]:
        """(folder, stem or None) for an idea package/module reference, else raise."""
        if relative:
            if relative != 1:
                raise VendorError(f"{where}: relative import above the idea folder; cannot vendor")
            return own, (dotted or None)
        m = IDEA_MODULE.match(dotted)
        if not m:
            raise VendorError(
                f"{where}: imports {dotted}, which the vendor cannot rewrite into the package; "
                "only idea modules (ladder.kernels.<family>.ideas.iNNN[.module]) can be vendored"
            )
        if m.group(1) != self.spec.family:
            raise VendorError(
                f"{where}: imports an idea of family {m.group(1)}; a family vendors its own ideas"
            )
        return self.folder_of(m.group(2), where), m.group(3)

    def _module(self, folder: str, stem: str, where: str) -> ModKey:
        if stem not in self.stems(folder):
            raise VendorError(f"{where}: idea {folder} has no module {stem}.py")
        return (folder, stem)

    def analyse(
        self, module: cst.Module, own: str, where_of: Callable[[cst.CSTNode], str]
    ) -> list[IdeaImport]:
        """Idea imports of a module (own: its idea folder). Raises VendorError for a
        reference to ``ladder`` that cannot be rewritten, with ``where_of(stmt)``."""
        found: list[IdeaImport] = []
        resolver = self

        class V(cst.CSTVisitor):
            def visit_Import(self, node: cst.Import) -> None:  # noqa: N802
                hits = [a for a in node.names if dotted_name(a.name).split(".")[0] == "ladder"]
                if not hits:
                    return
                where = where_of(node)
                if len(hits) != len(node.names):
                    raise VendorError(f"{where}: put the idea import on a line of its own")
                for alias in hits:
                    dotted = dotted_name(alias.name)
                    folder, stem = resolver._package(dotted, 0, own, where)
                    if alias.asname is None:
                        raise VendorError(
                            f"{where}: `import {dotted}` binds `ladder`; write "
                            f"`import {dotted} as <name>` or a from-import"
                        )
                    if stem is None:
                        raise VendorError(f"{where}: import a module of the idea, not the idea")
                    found.append(
                        IdeaImport(
                            stmt=node,
                            kind="module",
                            target=resolver._module(folder, stem, where),
                            alias=dotted_name(alias.asname.name),
                        )
                    )

            def visit_ImportFrom(self, node: cst.ImportFrom) -> None:  # noqa: N802
                dotted = dotted_name(node.module)
                relative = len(node.relative)
                if not relative and dotted.split(".")[0] != "ladder":
                    return
                if dotted == "__future__":
                    return
                where = where_of(node)
                folder, stem = resolver._package(dotted, relative, own, where)
                if isinstance(node.names, cst.ImportStar):
                    raise VendorError(f"{where}: `import *` from an idea; import names")
                if stem is None:
                    for alias in node.names:
                        name = dotted_name(alias.name)
                        found.append(
                            IdeaImport(
                                stmt=node,
                                kind="module",
                                target=resolver._module(folder, name, where),
                                alias=dotted_name(alias.asname.name) if alias.asname else name,
                            )
                        )
                else:
                    found.append(
                        IdeaImport(
                            stmt=node, kind="names", target=resolver._module(folder, stem, where)
                        )
                    )

        module.visit(V())
        return found


def import_bound(alias: cst.ImportAlias) -> str:
    if alias.asname is not None:
        return dotted_name(alias.asname.name)
    return dotted_name(alias.name).split(".")[0]


def target_names(node: cst.BaseExpression) -> list[str]:
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, cst.Tuple | cst.List):
        out: list[str] = []
        for el in node.elements:
            out.extend(target_names(el.value))
        return out
    if isinstance(node, cst.StarredElement):
        return target_names(node.value)
    return []


def syntactic_imports(
    module: cst.Module, key: ModKey, modules: Mapping[ModKey, SourceModule]
) -> list[IdeaImport]:
    """Idea imports of a module whose targets are among the vendored modules."""
    found: list[IdeaImport] = []
    own = key[0]
    folders = {k[0] for k in modules}

    def target(dotted: str, relative: int, name: str | None) -> ModKey | None:
        if relative == 1:
            folder, stem = own, (dotted or None)
        else:
            m = IDEA_MODULE.match(dotted)
            if not m:
                return None
            folder = next((f for f in folders if f[:3] == m.group(2)), "")
            stem = m.group(3)
        if stem is None:
            stem = name
        return (folder, stem) if (folder, stem) in modules else None

    class V(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:  # noqa: N802
            for alias in node.names:
                if alias.asname is None:
                    continue
                t = target(dotted_name(alias.name), 0, None)
                if t is not None:
                    found.append(IdeaImport(node, "module", t, dotted_name(alias.asname.name)))

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:  # noqa: N802
            if isinstance(node.names, cst.ImportStar):
                return
            dotted, relative = dotted_name(node.module), len(node.relative)
            if relative == 0 and not dotted.startswith("ladder."):
                return
            if relative > 1:
                return
            is_package = (relative == 1 and not dotted) or (
                relative == 0 and (m := IDEA_MODULE.match(dotted)) is not None and not m.group(3)
            )
            if is_package:
                for alias in node.names:
                    t = target(dotted, relative, dotted_name(alias.name))
                    if t is not None:
                        found.append(IdeaImport(node, "module", t, import_bound(alias)))
            else:
                t = target(dotted, relative, None)
                if t is not None:
                    found.append(IdeaImport(node, "names", t))

    module.visit(V())
    return found


def rewrite_imports(
    module: cst.Module,
    mod: SourceModule,
    resolver: ImportResolver,
    package_names: Mapping[ModKey, str],
) -> cst.Module:
    """Idea imports -> package-relative imports. Anything else naming ``ladder`` was refused
    before (ImportResolver.analyse on the frozen module)."""
    imports = resolver.analyse(module, mod.key[0], lambda node: mod.relpath)
    by_stmt: dict[int, list[IdeaImport]] = {}
    for imp in imports:
        by_stmt.setdefault(id(imp.stmt), []).append(imp)

    class T(cst.CSTTransformer):
        def _replace(self, original: cst.CSTNode, updated: Any) -> Any:
            imps = by_stmt.get(id(original))
            if not imps:
                return updated
            dot = [cst.Dot()]
            if imps[0].kind == "names":
                name = package_names[imps[0].target]
                return cst.ImportFrom(
                    module=cst.Name(name),
                    relative=dot,
                    names=updated.names,
                    lpar=updated.lpar,
                    rpar=updated.rpar,
                )
            aliases = []
            for imp in imps:
                name = package_names[imp.target]
                asname = None if imp.alias == name else cst.AsName(name=cst.Name(imp.alias))
                aliases.append(cst.ImportAlias(name=cst.Name(name), asname=asname))
            return cst.ImportFrom(module=None, relative=dot, names=aliases)

        def leave_Import(self, original_node, updated_node):  # noqa: N802
            return self._replace(original_node, updated_node)

        def leave_ImportFrom(self, original_node, updated_node):  # noqa: N802
            return self._replace(original_node, updated_node)

    return module.visit(T())
