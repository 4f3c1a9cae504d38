"""Module-level definitions and uses of one module: what the prune pass reasons about."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import GlobalScope, MetadataWrapper, ParentNodeProvider, ScopeProvider

from .imports import dotted_name, import_bound, target_names

_PURE_CALLS = frozenset(
    {
        "builtins.int",
        "builtins.float",
        "builtins.str",
        "builtins.bool",
        "builtins.tuple",
        "builtins.list",
        "builtins.dict",
        "builtins.set",
        "builtins.frozenset",
        "triton.language.constexpr",
        "triton.language.core.constexpr",
        "triton.Config",
        "triton.jit",
        "triton.autotune",
        "triton.heuristics",
    }
)


_QUIET_DECORATORS = frozenset(
    {
        "triton.jit",
        "triton.autotune",
        "triton.heuristics",
        "functools.cache",
        "functools.lru_cache",
    }
)


_DYNAMIC = frozenset({"globals", "vars", "eval", "exec", "__import__"})


@dataclass
class ModuleInfo:
    """Module-level definitions and uses of one module (for pruning)."""

    module: cst.Module
    # top-level statement index -> names it binds (removable kinds only)
    defs: dict[int, list[str]] = field(default_factory=dict)
    removable: dict[int, bool] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    unresolved: set[str] = field(default_factory=set)  # names read that nothing binds
    all_names: set[str] = field(default_factory=set)
    future: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)
    whole_module_use: set[str] = field(default_factory=set)  # aliases used other than .attr
    attr_uses: dict[str, set[str]] = field(default_factory=dict)  # alias -> attributes
    # top-level defs/classes with a decorator that may register them somewhere (anything but
    # Triton's jit/autotune/heuristics and functools' caches): a use nothing here can see
    registering: set[int] = field(default_factory=set)
    # reads its namespace by name (globals(), vars(), eval, exec, __import__): uses unseen
    dynamic: bool = False


def analyse_module(module: cst.Module) -> ModuleInfo:
    """Definitions, uses (excluding a def/class's references to itself) and module aliases.

    Cached by source text: the analysis of equal code is equal (indices, names)."""
    return _analyse_code(module.code)


@functools.lru_cache(maxsize=32)
def _analyse_code(code: str) -> ModuleInfo:
    module = cst.parse_module(code)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes = wrapper.resolve(ScopeProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    info = ModuleInfo(module=module)
    top_index = {id(stmt): i for i, stmt in enumerate(module.body)}
    local_funcs = {stmt.name.value for stmt in module.body if isinstance(stmt, cst.FunctionDef)}

    def top_of(node: cst.CSTNode) -> int | None:
        cur: cst.CSTNode | None = node
        while cur is not None and id(cur) not in top_index:
            cur = parents.get(cur)
        return None if cur is None else top_index[id(cur)]

    # Qualified names of call targets, from the module-level imports (enough for the
    # constructor whitelist; anything unresolved counts as a call with effects).
    aliases: dict[str, str] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for a in small.names:
                    full = dotted_name(a.name)
                    if a.asname is not None:
                        aliases[dotted_name(a.asname.name)] = full
                    else:
                        aliases[full.split(".")[0]] = full.split(".")[0]
            elif (
                isinstance(small, cst.ImportFrom)
                and not small.relative
                and not isinstance(small.names, cst.ImportStar)
            ):
                for a in small.names:
                    full = f"{dotted_name(small.module)}.{dotted_name(a.name)}"
                    aliases[import_bound(a)] = full

    def qn(node: cst.CSTNode) -> set[str]:
        if not isinstance(node, cst.Name | cst.Attribute):
            return set()
        dotted = dotted_name(node)
        head, _, rest = dotted.partition(".")
        if head in aliases:
            return {aliases[head] + ("." + rest if rest else "")}
        if not rest and head not in local_funcs:
            return {f"builtins.{head}"}
        return set()

    def pure_value(node: cst.CSTNode) -> bool:
        ok = True

        class V(cst.CSTVisitor):
            def on_visit(self, n: cst.CSTNode) -> bool:
                nonlocal ok
                if isinstance(n, cst.Await | cst.Yield | cst.NamedExpr):
                    ok = False
                if isinstance(n, cst.Call):
                    names = qn(n.func)
                    local = isinstance(n.func, cst.Name) and n.func.value in local_funcs
                    if not (names & _PURE_CALLS) and not local:
                        ok = False
                return ok

        node.visit(V())
        return ok

    for i, stmt in enumerate(module.body):
        if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
            info.defs[i] = [stmt.name.value]
            info.removable[i] = True
            for dec in stmt.decorators:
                target = (
                    dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
                )
                if not qn(target) & _QUIET_DECORATORS:
                    info.registering.add(i)
        elif isinstance(stmt, cst.SimpleStatementLine):
            names: list[str] = []
            removable = True
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        names.extend(target_names(t.target))
                        if not isinstance(t.target, cst.Name | cst.Tuple | cst.List):
                            removable = False
                    removable = removable and pure_value(small.value)
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    names.extend(target_names(small.target))
                    removable = removable and pure_value(small.value)
                elif isinstance(small, cst.Import):
                    names.extend(import_bound(a) for a in small.names)
                elif isinstance(small, cst.ImportFrom) and not isinstance(
                    small.names, cst.ImportStar
                ):
                    bound = [import_bound(a) for a in small.names]
                    names.extend(bound)
                    if dotted_name(small.module) == "__future__":
                        info.future.update(bound)
                else:
                    removable = False
            if names:
                info.defs[i] = names
                info.removable[i] = removable
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if (
                    isinstance(small, cst.Assign | cst.AugAssign)
                    and any(
                        isinstance(t.target, cst.Name) and t.target.value == "__all__"
                        for t in getattr(small, "targets", [])
                    )
                    or (
                        isinstance(small, cst.AugAssign)
                        and isinstance(small.target, cst.Name)
                        and small.target.value == "__all__"
                    )
                ):
                    try:
                        value = ast.literal_eval(dotted_name(small.value))
                    except (ValueError, SyntaxError):
                        value = ()
                    if isinstance(value, list | tuple):
                        info.all_names.update(v for v in value if isinstance(v, str))

    global_scope = next((s for s in scopes.values() if isinstance(s, GlobalScope)), None)
    top_defs = {id(stmt) for stmt in module.body if isinstance(stmt, cst.FunctionDef)}

    def may_be_builtin(ref) -> bool:
        """Whether a referent of globals/vars/eval/exec/__import__ may hold the builtin: any
        binding but an unconditional top-level def (a parameter may be passed it, a local or
        global import or assignment may take it from builtins)."""
        return id(getattr(ref, "node", None)) not in top_defs

    if global_scope is None:
        return info
    info.bound = {name for name in _assigned_names(global_scope)}
    seen_scopes = {id(s): s for s in scopes.values() if s is not None}
    for scope in seen_scopes.values():
        for access in scope.accesses:
            node = access.node
            name = node.value if isinstance(node, cst.Name) else None
            if name is not None and not access.referents:
                info.unresolved.add(name)
            if name in _DYNAMIC and any(may_be_builtin(r) for r in access.referents):
                info.dynamic = True  # the builtin, or a name that may hold it
            if name is None:
                # a string annotation: count the names it resolves to
                for ref in access.referents:
                    if getattr(ref, "scope", None) is global_scope:
                        info.used.add(ref.name)
                continue
            if not any(getattr(r, "scope", None) is global_scope for r in access.referents):
                continue
            top = top_of(node)
            if (
                top is not None
                and isinstance(module.body[top], cst.FunctionDef | cst.ClassDef)
                and module.body[top].name.value == name
            ):
                continue  # a function or class referring to itself
            info.used.add(name)
            parent = parents.get(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                info.attr_uses.setdefault(name, set()).add(parent.attr.value)
            else:
                info.whole_module_use.add(name)
    return info


def _assigned_names(scope: GlobalScope) -> set[str]:
    names: set[str] = set()
    for assignment in scope.assignments:
        names.add(assignment.name)
    return names
