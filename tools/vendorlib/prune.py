"""The prune pass: module-level definitions nothing live uses are removed.

In the idea's own kernel module (the root), what goes is what the freeze made unused: used
before the freeze (in its module or by another vendored module), unused after it. In a module
the root imports, directly or through another (its own helpers or another idea's), only what
the root reaches stays: a definition no kept code uses goes, whether or not anything used it
before the freeze, and that module's ``__all__`` is cut to the names left. There, as in the
root, only what the freeze made unused goes of: imports (one may be kept for its effect),
defs and classes whose decorator may register them, and all of a module that reads its
namespace by name (globals(), vars(), eval, exec, __import__). Repeated
across modules to a fixed point. Own-line comments above a removed statement move to the next
statement that stays (:mod:`.comments`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import libcst as cst

from .comments import carry_leading_lines, with_footer
from .imports import IdeaImport, ModKey, dotted_name, import_bound, syntactic_imports, target_names
from .spec import FamilySpec
from .usage import ModuleInfo, analyse_module

if TYPE_CHECKING:
    from .build import SourceModule


def remove_names(module: cst.Module, index: int, dead: set[str]) -> list[cst.BaseStatement]:
    """Top-level statement ``index`` without the bindings in ``dead`` ([] if nothing is left)."""
    stmt = module.body[index]
    if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
        return [] if stmt.name.value in dead else [stmt]
    assert isinstance(stmt, cst.SimpleStatementLine)
    smalls: list[cst.BaseSmallStatement] = []
    for small in stmt.body:
        if isinstance(small, cst.Import | cst.ImportFrom) and not isinstance(
            getattr(small, "names", None), cst.ImportStar
        ):
            aliases = [a for a in small.names if import_bound(a) not in dead]
            if not aliases:
                continue
            aliases[-1] = aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            if len(aliases) != len(small.names):
                small = small.with_changes(names=aliases)
                if (
                    isinstance(small, cst.ImportFrom)
                    and small.lpar is not None
                    and len(aliases) == 1
                ):
                    small = small.with_changes(lpar=None, rpar=None)
            smalls.append(small)
        elif isinstance(small, cst.Assign | cst.AnnAssign):
            names = (
                [n for t in small.targets for n in target_names(t.target)]
                if isinstance(small, cst.Assign)
                else target_names(small.target)
            )
            if names and all(n in dead for n in names):
                continue
            smalls.append(small)
        else:
            smalls.append(small)
    if not smalls:
        return []
    smalls[-1] = smalls[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
    return [stmt.with_changes(body=smalls)]


def _external_uses(
    infos: Mapping[ModKey, ModuleInfo], imports: Mapping[ModKey, list[IdeaImport]]
) -> dict[ModKey, set[str] | None]:
    """{module key: names other modules use from it; None when a module object is used as a
    whole (passed around, not just ``alias.name``), which keeps all of it}."""
    uses: dict[ModKey, set[str] | None] = {k: set() for k in infos}
    for key, info in infos.items():
        for imp in imports[key]:
            have = uses.get(imp.target)
            if have is None:
                continue
            if imp.kind == "names":
                assert isinstance(imp.stmt, cst.ImportFrom)
                assert not isinstance(imp.stmt.names, cst.ImportStar)
                # Every name still imported counts (an unused import goes first, in the
                # importer; the name it imported follows in the next round).
                for alias in imp.stmt.names:
                    have.add(dotted_name(alias.name))
            elif imp.alias in info.used:
                if imp.alias in info.whole_module_use:
                    uses[imp.target] = None
                else:
                    have.update(info.attr_uses.get(imp.alias, set()))
    return uses


def prune(
    modules: Mapping[ModKey, SourceModule], spec: FamilySpec, root: ModKey
) -> dict[ModKey, cst.Module]:
    """Remove module-level definitions nothing live uses, across modules, to a fixed point.

    In ``root`` (the idea's kernel module) only what became unused goes: used before the
    freeze (in its module or by another vendored module), unused after it; its entry points
    and ``__all__`` names stay. In every other module, anything neither that module's kept code
    nor another module uses goes (imports, registering decorators and modules that read their
    namespace by name excepted: the root's rule holds for those), and ``__all__`` there keeps
    only the names left. Never
    removed: dunders, ``__future__`` imports, assignments whose value may have effects (calls
    other than constructors and the module's own functions), and anything of a module another
    module uses as a whole.
    """
    orig_infos = {k: analyse_module(m.original) for k, m in modules.items()}
    # Idea imports as found in the originals (dropped branches included: an import that is
    # gone after the freeze cannot make a name "originally used" by a module it no longer
    # imports, but keeping them only makes pruning more conservative).
    orig_imports = {k: syntactic_imports(m.original, k, modules) for k, m in modules.items()}
    orig_ext = _external_uses(orig_infos, orig_imports)
    originally_used: dict[ModKey, set[str] | None] = {}
    for key, info in orig_infos.items():
        ext = orig_ext[key]
        originally_used[key] = None if ext is None else info.used | ext
    current = {k: cst.parse_module(m.frozen.code) for k, m in modules.items()}
    while True:
        infos = {k: analyse_module(m) for k, m in current.items()}
        imports = {k: syntactic_imports(m, k, modules) for k, m in current.items()}
        ext = _external_uses(infos, imports)
        changed = False
        for key, module in current.items():
            info = infos[key]
            used_ext = ext[key]
            before = originally_used[key]
            if used_ext is None or before is None:
                continue  # the whole module object is used elsewhere: keep everything
            protected = info.future | {
                n for n in info.bound if n.startswith("__") and n.endswith("__")
            }
            if key == root:
                protected |= set(spec.entry_points) | info.all_names
            live = info.used | used_ext | protected
            new_body: list[cst.BaseStatement] = []
            gone: set[int] = set()  # removed whole: their own-line comments move on
            for i, stmt in enumerate(module.body):
                names = info.defs.get(i)
                if not names or not info.removable.get(i):
                    new_body.append(stmt)
                    continue
                # Reachability decides in an imported module, except where a use may be out
                # of sight: an import (kept for its effect), a def/class whose decorator may
                # register it, and any module that reads globals()/vars()/eval/exec.
                reach = (
                    key != root
                    and not info.dynamic
                    and i not in info.registering
                    and not _imports(stmt)
                )
                dead = {n for n in names if n not in live and (reach or n in before)}
                if isinstance(stmt, cst.SimpleStatementLine) and any(
                    isinstance(s, cst.Assign | cst.AnnAssign) for s in stmt.body
                ):
                    # An assignment goes only when every name it binds is dead.
                    assigned = [
                        n
                        for s in stmt.body
                        if isinstance(s, cst.Assign | cst.AnnAssign)
                        for n in (
                            [x for t in s.targets for x in target_names(t.target)]
                            if isinstance(s, cst.Assign)
                            else target_names(s.target)
                        )
                    ]
                    if not all(n in dead for n in assigned):
                        dead -= set(assigned)
                if not dead:
                    new_body.append(stmt)
                    continue
                kept = remove_names(module, i, dead)
                if len(kept) != 1 or kept[0] is not stmt:
                    changed = True
                if not kept:
                    gone.add(id(stmt))
                new_body.extend(kept or [stmt])
            if changed:
                body, left = carry_leading_lines(new_body, gone)
                updated = with_footer(module.with_changes(body=body), left)
                current[key] = cst.parse_module(updated.code)
        if not changed:
            return {
                k: m if k == root else _cut_all(m, analyse_module(m).bound)
                for k, m in current.items()
            }


def _imports(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, cst.Import | cst.ImportFrom) for s in stmt.body
    )


def _cut_all(module: cst.Module, bound: set[str]) -> cst.Module:
    """``module`` with the string literals of its module-level ``__all__`` (``=``, annotated
    or ``+=``, a list or tuple) that name nothing it binds removed. Own-line comments and the
    layout of the names that stay are kept; a cut tuple is written as a list (cut to one name
    or none, it would need other commas and parentheses)."""

    def cut(value: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(value, cst.List | cst.Tuple):
            return value
        elements = list(value.elements)
        kept = [
            e
            for e in elements
            if not isinstance(e.value, cst.SimpleString | cst.ConcatenatedString)
            or e.value.evaluated_value in bound
        ]
        if len(kept) == len(elements):
            return value
        last = kept[-1].comma if kept else None
        if isinstance(last, cst.Comma) and isinstance(
            last.whitespace_after, cst.SimpleWhitespace
        ):  # on one line: the new last name takes the old last one's comma (or none)
            kept[-1] = kept[-1].with_changes(comma=elements[-1].comma)
        # (a comma followed by a line break or comment stays, and the comment with it)
        if isinstance(value, cst.List):
            return value.with_changes(elements=kept)
        if value.lpar:
            return cst.List(
                elements=kept,
                lbracket=cst.LeftSquareBracket(whitespace_after=value.lpar[0].whitespace_after),
                rbracket=cst.RightSquareBracket(whitespace_before=value.rpar[0].whitespace_before),
            )
        return cst.List(elements=[e.with_changes(comma=cst.MaybeSentinel.DEFAULT) for e in kept])

    def names_all(target: cst.BaseExpression) -> bool:
        return isinstance(target, cst.Name) and target.value == "__all__"

    class Cut(cst.CSTTransformer):
        def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
            if any(names_all(t.target) for t in updated.targets):
                return updated.with_changes(value=cut(updated.value))
            return updated

        def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign) -> cst.AnnAssign:
            if names_all(updated.target) and updated.value is not None:
                return updated.with_changes(value=cut(updated.value))
            return updated

        def leave_AugAssign(self, original: cst.AugAssign, updated: cst.AugAssign) -> cst.AugAssign:
            if names_all(updated.target):
                return updated.with_changes(value=cut(updated.value))
            return updated

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False  # only the module level's __all__

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

    return cst.parse_module(module.visit(Cut()).code)
