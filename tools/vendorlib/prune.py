"""The prune pass: module-level definitions that the freeze made unused are removed.

"Made unused": used before the freeze (in its module or by another vendored module), unused
after it; repeated across modules to a fixed point. Own-line comments above a removed
statement move to the next statement that stays (:mod:`.comments`).
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


def prune(modules: Mapping[ModKey, SourceModule], spec: FamilySpec) -> dict[ModKey, cst.Module]:
    """Remove module-level definitions that became unused, across modules, to a fixed point.

    "Became unused": used before the freeze (in its module or by another vendored module),
    unused after it. Never removed: entry points, ``__all__`` names, dunders, ``__future__``
    imports, assignments whose value may have effects (calls other than constructors and
    the module's own functions), and anything of a module another module uses as a whole.
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
            protected = (
                set(spec.entry_points)
                | info.all_names
                | info.future
                | {n for n in info.bound if n.startswith("__") and n.endswith("__")}
            )
            live = info.used | used_ext | protected
            new_body: list[cst.BaseStatement] = []
            gone: set[int] = set()  # removed whole: their own-line comments move on
            for i, stmt in enumerate(module.body):
                names = info.defs.get(i)
                if not names or not info.removable.get(i):
                    new_body.append(stmt)
                    continue
                dead = {n for n in names if n not in live and n in before}
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
            return current
