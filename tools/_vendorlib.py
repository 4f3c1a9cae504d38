"""What tools/vendor.py and tools/drift.py share: reading a commit, freezing an idea, writing.

The vendor is a pure function of (repository objects at a commit, one bench record, the tool's
own code, libcst and ruff): :func:`build` reads every input with git from the commit, so the
working tree never leaks into the package, and drift can re-run it in memory to check that the
package is exactly what its recorded source produces.

The transform, per vendored module:

1. freeze: every knob assignment's right-hand side becomes the record's value (or the
   default when the record lacks the key) as a literal, kept inside ``tl.constexpr(...)``
   when it was wrapped;
2. decide: conditions that use knobs are evaluated three-valued (known true, known false,
   unknown). ``if``/``elif``/``else`` chains lose decided-false branches and everything after
   a decided-true one; conditional expressions, ``and``/``or``/``not`` and comparisons are
   folded where the result is determined; unknown parts are left as written;
3. prune: module-level functions, classes, assignments and imports that were used before the
   freeze and are not any more (in the module or in another vendored module) are removed,
   repeatedly, never an entry point, a name in ``__all__`` or a ``from __future__`` import;
4. rewrite imports between ideas into package-relative ones (``family.VENDOR["modules"]``);
5. format with ``ruff format`` under the repository's ``pyproject.toml`` at the commit.

Every refusal is a :class:`VendorError` with a one-line message (``path:line: ...`` where a
source line is at fault).
"""

from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import operator
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import libcst as cst
from libcst.metadata import (
    GlobalScope,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    ScopeProvider,
)

TOOL_ROOT = Path(__file__).resolve().parents[1]
if str(TOOL_ROOT) not in sys.path:
    sys.path.insert(0, str(TOOL_ROOT))

from ladder.knobs import Knob, KnobError, KnobSite, scan_idea, scan_module  # noqa: E402

# The files whose code decides the vendor's output (hashed into VENDOR["tool_sha256"]).
TOOL_FILES = ("ladder/knobs.py", "tools/_vendorlib.py", "tools/vendor.py")
PROVENANCE_KEYS = ("SOURCE_COMMIT", "RECORD", "KNOBS", "SOURCE_FILES", "OUTPUT_FILES", "VENDOR")
IDEA_RE = re.compile(r"^(\d{3})-[a-z0-9]+(?:-[a-z0-9]+)*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IDEA_MODULE = re.compile(r"^ladder\.kernels\.([a-z][a-z0-9_]*)\.ideas\.i(\d{3})(?:\.(\w+))?$")


class VendorError(Exception):
    """A refusal or configuration error; ``str(err)`` is one line saying what and what to do."""

    exit_code = 2


# ------------------------------------------------------------------------------------------
# git
# ------------------------------------------------------------------------------------------


def git(repo: Path, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
    """Run ``git -C repo args`` and return stdout. Raises VendorError when it fails."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], input=input, capture_output=True, check=False
        )
    except FileNotFoundError as exc:
        raise VendorError("git is not installed; install git") from exc
    if check and proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        raise VendorError(f"git {' '.join(args[:3])}: {lines[-1] if lines else proc.returncode}")
    return proc.stdout


def resolve_commit(repo: Path, rev: str) -> str:
    """The full sha of ``rev`` (a commit). Raises VendorError when it is not a local commit."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise VendorError(
            f"{rev!r} is not a commit of {repo}; pass a commit sha or ref (a shallow clone "
            "needs `git fetch --unshallow`)"
        )
    return proc.stdout.decode().strip()


def read_blob(repo: Path, commit: str, path: str) -> bytes | None:
    """The bytes of ``path`` (repo-relative, posix) in ``commit``'s tree, or None if absent."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "blob", f"{commit}:{path}"],
        capture_output=True,
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else None


def list_tree(repo: Path, commit: str, folder: str) -> list[tuple[str, str]]:
    """[(name, "blob"|"tree")] directly under ``folder`` in ``commit``'s tree (sorted)."""
    out = git(repo, "ls-tree", "-z", "--full-tree", commit, "--", folder.rstrip("/") + "/")
    entries: list[tuple[str, str]] = []
    for item in out.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        entries.append((PurePosixPath(path.decode("utf-8")).name, meta.split()[1].decode()))
    return sorted(entries)


def dirty_paths(repo: Path, paths: Iterable[str]) -> list[str]:
    """Paths (repo-relative) under ``paths`` with uncommitted changes or untracked files."""
    paths = list(paths)
    if not paths:
        return []
    out = git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *paths)
    found: list[str] = []
    items = out.split(b"\0")
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if not item:
            continue
        status, path = item[:2].decode(), item[3:].decode("utf-8")
        if status[0] in "RC":  # a rename carries the old path as the next item
            i += 1
        found.append(path)
    return sorted(set(found))


def sha256(data: bytes) -> str:
    """sha256 hex of bytes."""
    return hashlib.sha256(data).hexdigest()


def tool_sha256() -> str:
    """sha256 over the vendor's own source files (sorted ``relpath NUL sha256 LF``)."""
    h = hashlib.sha256()
    for rel in sorted(TOOL_FILES):
        h.update(rel.encode() + b"\0" + sha256((TOOL_ROOT / rel).read_bytes()).encode() + b"\n")
    return h.hexdigest()


def libcst_version() -> str:
    """The installed libcst version."""
    return importlib.metadata.version("libcst")


def ruff_version() -> str:
    """The installed ruff version (the formatter decides the output bytes too)."""
    try:
        return importlib.metadata.version("ruff")
    except importlib.metadata.PackageNotFoundError:
        return "missing"


# ------------------------------------------------------------------------------------------
# the family contract, read as literals from family.py at a commit
# ------------------------------------------------------------------------------------------


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
        raise VendorError(f"{relpath}: defines no {', '.join(missing)}; add it (see INTERFACES)")
    if found["FAMILY"] != family:
        raise VendorError(f"{relpath}: FAMILY is {found['FAMILY']!r}, not {family!r}")
    eps = found["ENTRY_POINTS"]
    if (
        not isinstance(eps, tuple | list)
        or not eps
        or not all(isinstance(e, str) and _IDENT.match(e) for e in eps)
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
            if not (isinstance(stem, str) and _IDENT.match(stem)) or not (
                isinstance(name, str) and _IDENT.match(name)
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
    if ref.isdigit():
        matches = [f for f in folders if int(f[:3]) == int(ref)]
    else:
        matches = [f for f in folders if f[4:] == ref]
    if len(matches) == 1:
        return matches[0]
    raise VendorError(
        f"no single idea {ref!r} in {spec.family} at {commit[:12]} "
        f"(ideas: {', '.join(folders) or 'none'})"
    )


# ------------------------------------------------------------------------------------------
# expression evaluation (three-valued)
# ------------------------------------------------------------------------------------------


class _UnknownType:
    _instance: _UnknownType | None = None

    def __new__(cls) -> _UnknownType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _UnknownType()

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.Divide: operator.truediv,
    cst.FloorDivide: operator.floordiv,
    cst.Modulo: operator.mod,
    cst.Power: operator.pow,
    cst.BitAnd: operator.and_,
    cst.BitOr: operator.or_,
    cst.BitXor: operator.xor,
    cst.LeftShift: operator.lshift,
    cst.RightShift: operator.rshift,
}
_CMPOPS: dict[type, Callable[[Any, Any], Any]] = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThan: operator.gt,
    cst.GreaterThanEqual: operator.ge,
    cst.In: lambda a, b: a in b,
    cst.NotIn: lambda a, b: a not in b,
}
_SINGLETONS = {"True": True, "False": False, "None": None}


def _safe_binop(op: cst.BaseBinaryOp, a: Any, b: Any) -> Any:
    fn = _BINOPS.get(type(op))
    if fn is None:
        return UNKNOWN
    big = 10_000
    if isinstance(op, cst.Multiply) and (
        (isinstance(a, str | bytes | tuple | list) and isinstance(b, int) and b > big)
        or (isinstance(b, str | bytes | tuple | list) and isinstance(a, int) and a > big)
    ):
        return UNKNOWN
    if isinstance(op, cst.Power) and (not isinstance(b, int | float) or abs(b) > 256):
        return UNKNOWN
    if isinstance(op, cst.LeftShift) and (not isinstance(b, int) or b > 4096):
        return UNKNOWN
    return fn(a, b)


class Evaluator:
    """Values of expressions over literals and knobs; UNKNOWN where anything else is read.

    refs: {id(Name node): knob value} for the Name nodes that denote a knob.
    """

    def __init__(self, refs: Mapping[int, Any]) -> None:
        self.refs = refs

    def value(self, node: cst.BaseExpression) -> Any:
        try:
            return self._value(node)
        except Exception:  # any error while folding means "not decided here"
            return UNKNOWN

    def _value(self, node: cst.CSTNode) -> Any:
        if isinstance(node, cst.Name):
            if id(node) in self.refs:
                return self.refs[id(node)]
            return _SINGLETONS.get(node.value, UNKNOWN) if node.value in _SINGLETONS else UNKNOWN
        if isinstance(node, cst.Integer | cst.Float | cst.Imaginary):
            return node.evaluated_value
        if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
            v = node.evaluated_value
            return UNKNOWN if v is None else v
        if isinstance(node, cst.Tuple | cst.List):
            items = []
            for el in node.elements:
                if not isinstance(el, cst.Element):
                    return UNKNOWN
                v = self._value(el.value)
                if v is UNKNOWN:
                    return UNKNOWN
                items.append(v)
            return tuple(items) if isinstance(node, cst.Tuple) else items
        if isinstance(node, cst.UnaryOperation):
            v = self._value(node.expression)
            if v is UNKNOWN:
                return UNKNOWN
            if isinstance(node.operator, cst.Not):
                return not v
            if isinstance(node.operator, cst.Minus):
                return -v
            if isinstance(node.operator, cst.Plus):
                return +v
            return ~v
        if isinstance(node, cst.BinaryOperation):
            a = self._value(node.left)
            b = self._value(node.right) if a is not UNKNOWN else UNKNOWN
            return UNKNOWN if b is UNKNOWN else _safe_binop(node.operator, a, b)
        if isinstance(node, cst.BooleanOperation):
            left = self._value(node.left)
            if left is UNKNOWN:
                return UNKNOWN
            if isinstance(node.operator, cst.And):
                return left if not left else self._value(node.right)
            return left if left else self._value(node.right)
        if isinstance(node, cst.Comparison):
            cur = self._value(node.left)
            if cur is UNKNOWN:
                return UNKNOWN
            for target in node.comparisons:
                rhs = self._value(target.comparator)
                if rhs is UNKNOWN:
                    return UNKNOWN
                op = target.operator
                if isinstance(op, cst.Is | cst.IsNot):
                    if not any(cur is s or rhs is s for s in (None, True, False)):
                        return UNKNOWN
                    ok = (cur is rhs) if isinstance(op, cst.Is) else (cur is not rhs)
                else:
                    fn = _CMPOPS.get(type(op))
                    if fn is None:
                        return UNKNOWN
                    ok = bool(fn(cur, rhs))
                if not ok:
                    return False
                cur = rhs
            return True
        if isinstance(node, cst.IfExp):
            t = self._value(node.test)
            if t is UNKNOWN:
                return UNKNOWN
            return self._value(node.body if t else node.orelse)
        return UNKNOWN


def literal_expr(value: Any) -> cst.BaseExpression | None:
    """A CST literal for None/bool/int/finite float/str, else None."""
    if value is None or isinstance(value, bool):
        return cst.Name(str(value))
    if isinstance(value, int):
        return cst.parse_expression(repr(value))
    if isinstance(value, float):
        return cst.parse_expression(repr(value)) if math.isfinite(value) else None
    if isinstance(value, str):
        return cst.parse_expression(repr(value))
    return None


# ------------------------------------------------------------------------------------------
# freezing one module
# ------------------------------------------------------------------------------------------

_COND = (cst.BooleanOperation, cst.Comparison, cst.IfExp)
_STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.BaseSmallStatement)


def _is_cond(node: cst.CSTNode | None) -> bool:
    return isinstance(node, _COND) or (
        isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not)
    )


def _pure(node: cst.CSTNode) -> bool:
    """No calls, awaits, yields or walrus below node (dropping it cannot drop an effect)."""
    found = False

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            if isinstance(
                n, cst.Call | cst.Await | cst.Yield | cst.NamedExpr | cst.Lambda | cst.GeneratorExp
            ):
                found = True
            return not found

    node.visit(V())
    return not found


def _paren_like(orig: cst.BaseExpression, new: cst.BaseExpression) -> cst.BaseExpression:
    """new in place of orig, keeping orig's parentheses (so precedence cannot change)."""
    if orig.lpar and not new.lpar and not isinstance(new, cst.Name | cst.Integer):
        return new.with_changes(lpar=orig.lpar, rpar=orig.rpar)
    return new


def _body_statements(body: cst.BaseSuite) -> list[cst.BaseStatement]:
    if isinstance(body, cst.IndentedBlock):
        return list(body.body)
    assert isinstance(body, cst.SimpleStatementSuite)
    return [cst.SimpleStatementLine(body=list(body.body))]


class _Freezer(cst.CSTTransformer):
    """Freeze knob assignments and decide the conditions they settle (see module docstring)."""

    def __init__(
        self,
        wrapper: MetadataWrapper,
        sites: list[KnobSite],
        values: Mapping[str, Any],
        relpath: str,
    ) -> None:
        super().__init__()
        self.relpath = relpath
        self.positions = wrapper.resolve(PositionProvider)
        parents = wrapper.resolve(ParentNodeProvider)
        scopes = wrapper.resolve(ScopeProvider)
        self.values = values
        self.sites = {id(s.assign): s for s in sites}
        refs: dict[int, Any] = {}
        global_scope = next((s for s in scopes.values() if isinstance(s, GlobalScope)), None)
        for site in sites:
            target = site.assign.targets[0].target
            if global_scope is None:
                continue
            for assignment in global_scope.assignments[site.knob.name]:
                if getattr(assignment, "node", None) is target:
                    for access in assignment.references:
                        refs[id(access.node)] = values[site.knob.key]
        self.refs = refs
        self.ev = Evaluator(refs)
        self.roots: set[int] = set()
        self.bool_roots: set[int] = set()
        self.elifs: set[int] = set()
        freezer = self

        class Pre(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                if _is_cond(node) and not _is_cond(parents.get(node)):
                    freezer.roots.add(id(node))
                if isinstance(node, cst.If | cst.While):
                    freezer.bool_roots.add(id(node.test))
                if isinstance(node, cst.CompIf):
                    freezer.bool_roots.add(id(node.test))
                if isinstance(node, cst.If) and isinstance(node.orelse, cst.If):
                    freezer.elifs.add(id(node.orelse))
                return True

        wrapper.module.visit(Pre())
        self._has_knob: dict[int, bool] = {}
        self.updated: dict[int, cst.CSTNode] = {}
        self.origin_line: dict[int, int] = {}
        self._keep: list[cst.CSTNode] = []
        self.dropped: list[tuple[int, int]] = []
        self._fillers: set[int] = set()  # ids of the `pass` lines put into emptied blocks

    # -- bookkeeping ---------------------------------------------------------------------
    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        result = super().on_leave(original_node, updated_node)
        if isinstance(result, cst.CSTNode):
            self.updated[id(original_node)] = result
            if isinstance(result, _STATEMENTS):
                self.origin_line[id(result)] = self.positions[original_node].start.line
                self._keep.append(result)
        return result

    def upd(self, node: cst.CSTNode) -> Any:
        return self.updated.get(id(node), node)

    def has_knob(self, node: cst.CSTNode) -> bool:
        key = id(node)
        if key not in self._has_knob:
            found = False
            refs = self.refs

            class V(cst.CSTVisitor):
                def on_visit(self, n: cst.CSTNode) -> bool:
                    nonlocal found
                    if id(n) in refs:
                        found = True
                    return not found

            node.visit(V())
            self._has_knob[key] = found
        return self._has_knob[key]

    def _drop(self, node: cst.CSTNode) -> None:
        pos = self.positions[node]
        self.dropped.append((pos.start.line, pos.end.line))

    # -- expressions ---------------------------------------------------------------------
    def rewrite(self, orig: cst.BaseExpression, boolctx: bool) -> cst.BaseExpression:
        """orig (an original node) with knob-decided parts folded; children from self.upd."""
        if not self.has_knob(orig):
            return self.upd(orig)
        v = self.ev.value(orig)
        if v is not UNKNOWN:
            try:
                lit = literal_expr(bool(v) if boolctx else v)
            except Exception:
                lit = None
            if lit is not None:
                return lit
        if isinstance(orig, cst.BooleanOperation):
            is_and = isinstance(orig.operator, cst.And)
            lv = self.ev.value(orig.left)
            if lv is not UNKNOWN:
                if bool(lv) == is_and:  # True and X -> X ; False or X -> X
                    return _paren_like(orig, self.rewrite(orig.right, boolctx))
            else:
                rv = self.ev.value(orig.right)
                if boolctx and rv is not UNKNOWN:
                    if bool(rv) == is_and:  # X and True -> X ; X or False -> X (as a truth)
                        return _paren_like(orig, self.rewrite(orig.left, True))
                    if _pure(orig.left):  # X and False -> False ; X or True -> True
                        return cst.Name(str(not is_and))
            return self.upd(orig).with_changes(
                left=self.rewrite(orig.left, boolctx), right=self.rewrite(orig.right, boolctx)
            )
        if isinstance(orig, cst.UnaryOperation) and isinstance(orig.operator, cst.Not):
            return self.upd(orig).with_changes(expression=self.rewrite(orig.expression, True))
        if isinstance(orig, cst.IfExp):
            t = self.ev.value(orig.test)
            if t is not UNKNOWN:
                return _paren_like(orig, self.rewrite(orig.body if t else orig.orelse, boolctx))
            return self.upd(orig).with_changes(
                test=self.rewrite(orig.test, True),
                body=self.rewrite(orig.body, boolctx),
                orelse=self.rewrite(orig.orelse, boolctx),
            )
        if isinstance(orig, cst.Comparison):
            return self.upd(orig).with_changes(
                left=self.rewrite(orig.left, False),
                comparisons=[
                    c.with_changes(comparator=self.rewrite(o.comparator, False))
                    for c, o in zip(self.upd(orig).comparisons, orig.comparisons, strict=True)
                ],
            )
        return self.upd(orig)

    def _leave_cond(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> Any:
        if id(original) in self.roots and self.has_knob(original):
            return self.rewrite(original, id(original) in self.bool_roots)
        return updated

    def leave_BooleanOperation(self, original_node, updated_node):  # noqa: N802
        return self._leave_cond(original_node, updated_node)

    def leave_Comparison(self, original_node, updated_node):  # noqa: N802
        return self._leave_cond(original_node, updated_node)

    def leave_UnaryOperation(self, original_node, updated_node):  # noqa: N802
        return self._leave_cond(original_node, updated_node)

    def leave_IfExp(self, original_node, updated_node):  # noqa: N802
        return self._leave_cond(original_node, updated_node)

    # -- statements ----------------------------------------------------------------------
    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> Any:  # noqa: N802
        site = self.sites.get(id(original_node))
        if site is None:
            return updated_node
        value = self.values[site.knob.key]
        lit = literal_expr(value)
        if lit is None:
            raise VendorError(
                f"{self.relpath}:{site.knob.line}: cannot write {site.knob.key}={value!r} "
                "as a literal"
            )
        if site.constexpr_func is not None:
            lit = cst.Call(func=site.constexpr_func, args=[cst.Arg(value=lit)])
        return updated_node.with_changes(value=lit)

    def _truth(self, orig_test: cst.BaseExpression, upd_test: cst.BaseExpression) -> Any:
        if not self.has_knob(orig_test):
            return UNKNOWN
        v = self.ev.value(orig_test)
        if v is not UNKNOWN:
            try:
                return bool(v)
            except Exception:
                return UNKNOWN
        if isinstance(upd_test, cst.Name) and upd_test.value in ("True", "False"):
            return upd_test.value == "True"
        return UNKNOWN

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> Any:  # noqa: N802
        if id(original_node) in self.elifs:
            return updated_node
        chain: list[tuple[cst.If, cst.If]] = []
        o: Any = original_node
        u: Any = updated_node
        while True:
            chain.append((o, u))
            if isinstance(o.orelse, cst.If):
                o, u = o.orelse, u.orelse
            else:
                break
        else_o, else_u = o.orelse, u.orelse
        kept: list[tuple[cst.If, cst.If]] = []
        final_body: cst.BaseSuite | None = None
        final_else: cst.Else | None = None
        decided = False
        terminated_at: int | None = None
        for i, (o, u) in enumerate(chain):
            t = self._truth(o.test, u.test)
            if t is UNKNOWN:
                kept.append((o, u))
                continue
            decided = True
            if t:
                final_body = u.body
                terminated_at = i
                break
            self._drop(o.body)
        if not decided:
            return updated_node
        if terminated_at is not None:
            for o, _ in chain[terminated_at + 1 :]:
                self._drop(o.body)
            if else_o is not None:
                self._drop(else_o.body)
        elif else_u is not None:
            final_body = else_u.body
            final_else = else_u
        if self._only_filler(final_body):
            final_body = final_else = None
        if not kept:
            if final_body is None:
                return cst.RemovalSentinel.REMOVE
            stmts = _body_statements(final_body)
            stmts[0] = stmts[0].with_changes(
                leading_lines=[*updated_node.leading_lines, *stmts[0].leading_lines]
            )
            return cst.FlattenSentinel(stmts)
        tail: cst.If | cst.Else | None = None
        if final_body is not None:
            tail = final_else if final_else is not None else cst.Else(body=final_body)
        for _, u in reversed(kept[1:]):
            tail = u.with_changes(orelse=tail)
        return kept[0][1].with_changes(orelse=tail, leading_lines=updated_node.leading_lines)

    def leave_IndentedBlock(self, original_node, updated_node):  # noqa: N802
        if not updated_node.body:
            filler = cst.SimpleStatementLine(body=[cst.Pass()])
            self._fillers.add(id(filler))
            self._keep.append(filler)
            return updated_node.with_changes(body=[filler])
        return updated_node

    def _only_filler(self, body: cst.BaseSuite | None) -> bool:
        return (
            isinstance(body, cst.IndentedBlock)
            and len(body.body) == 1
            and id(body.body[0]) in self._fillers
        )


# ------------------------------------------------------------------------------------------
# module analysis: definitions, uses, imports of idea modules
# ------------------------------------------------------------------------------------------

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


def _dotted(node: cst.BaseExpression | None) -> str:
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
        m = _IDEA_MODULE.match(dotted)
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
                hits = [a for a in node.names if _dotted(a.name).split(".")[0] == "ladder"]
                if not hits:
                    return
                where = where_of(node)
                if len(hits) != len(node.names):
                    raise VendorError(f"{where}: put the idea import on a line of its own")
                for alias in hits:
                    dotted = _dotted(alias.name)
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
                            alias=_dotted(alias.asname.name),
                        )
                    )

            def visit_ImportFrom(self, node: cst.ImportFrom) -> None:  # noqa: N802
                dotted = _dotted(node.module)
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
                        name = _dotted(alias.name)
                        found.append(
                            IdeaImport(
                                stmt=node,
                                kind="module",
                                target=resolver._module(folder, name, where),
                                alias=_dotted(alias.asname.name) if alias.asname else name,
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


def _import_bound(alias: cst.ImportAlias) -> str:
    if alias.asname is not None:
        return _dotted(alias.asname.name)
    return _dotted(alias.name).split(".")[0]


def _target_names(node: cst.BaseExpression) -> list[str]:
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, cst.Tuple | cst.List):
        out: list[str] = []
        for el in node.elements:
            out.extend(_target_names(el.value))
        return out
    if isinstance(node, cst.StarredElement):
        return _target_names(node.value)
    return []


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
                    full = _dotted(a.name)
                    if a.asname is not None:
                        aliases[_dotted(a.asname.name)] = full
                    else:
                        aliases[full.split(".")[0]] = full.split(".")[0]
            elif (
                isinstance(small, cst.ImportFrom)
                and not small.relative
                and not isinstance(small.names, cst.ImportStar)
            ):
                for a in small.names:
                    full = f"{_dotted(small.module)}.{_dotted(a.name)}"
                    aliases[_import_bound(a)] = full

    def qn(node: cst.CSTNode) -> set[str]:
        if not isinstance(node, cst.Name | cst.Attribute):
            return set()
        dotted = _dotted(node)
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
        elif isinstance(stmt, cst.SimpleStatementLine):
            names: list[str] = []
            removable = True
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        names.extend(_target_names(t.target))
                        if not isinstance(t.target, cst.Name | cst.Tuple | cst.List):
                            removable = False
                    removable = removable and pure_value(small.value)
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    names.extend(_target_names(small.target))
                    removable = removable and pure_value(small.value)
                elif isinstance(small, cst.Import):
                    names.extend(_import_bound(a) for a in small.names)
                elif isinstance(small, cst.ImportFrom) and not isinstance(
                    small.names, cst.ImportStar
                ):
                    bound = [_import_bound(a) for a in small.names]
                    names.extend(bound)
                    if _dotted(small.module) == "__future__":
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
                        value = ast.literal_eval(_dotted(small.value))
                    except (ValueError, SyntaxError):
                        value = ()
                    if isinstance(value, list | tuple):
                        info.all_names.update(v for v in value if isinstance(v, str))

    global_scope = next((s for s in scopes.values() if isinstance(s, GlobalScope)), None)
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


def _remove_names(module: cst.Module, index: int, dead: set[str]) -> list[cst.BaseStatement]:
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
            aliases = [a for a in small.names if _import_bound(a) not in dead]
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
                [n for t in small.targets for n in _target_names(t.target)]
                if isinstance(small, cst.Assign)
                else _target_names(small.target)
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


# ------------------------------------------------------------------------------------------
# the build
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InventoryRow:
    """One knob of the vendored code: its frozen value and where the value came from."""

    key: str
    name: str
    file: str
    value: Any
    source: str  # "record" | "default"


@dataclass
class VendorResult:
    """Everything one vendor run produces (nothing written yet).

    outputs: {repo-relative package path: bytes}, including ``_provenance.py``.
    """

    spec: FamilySpec
    commit: str
    idea: str
    record_id: str
    record_path: str
    outputs: dict[str, bytes]
    provenance: dict[str, Any]
    inventory: list[InventoryRow]
    sources: dict[str, str]  # ladder path -> sha256


@dataclass
class _Module:
    key: ModKey
    relpath: str
    source: bytes
    original: cst.Module
    sites: list[KnobSite]
    freezer: _Freezer
    frozen: cst.Module
    wrapper: MetadataWrapper
    imports: list[IdeaImport] = field(default_factory=list)


def _coerce(knob: Knob, value: Any, where: str) -> Any:
    """A record's knob value as the Python value the code would have computed."""
    if isinstance(value, str) and knob.kind != "str":
        try:
            from ladder.knobs import parse_value

            return parse_value(knob, value)
        except KnobError as exc:
            raise VendorError(f"{where}: {exc}") from None
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "str": isinstance(value, str),
    }[knob.kind]
    if not ok:
        raise VendorError(
            f"{where}: knob {knob.key} is a {knob.kind} in {knob.file}:{knob.line}, but the record "
            f"holds {value!r}; re-bench the idea"
        )
    return float(value) if knob.kind == "float" else value


def record_relpath(spec: FamilySpec, idea: str, record_id: str) -> str:
    """Repo-relative path of a record file."""
    return f"{spec.ideas_dir}/{idea}/records/{record_id}.json"


def rebench_hint(spec: FamilySpec, idea: str) -> str:
    return f"`make bench FAMILY={spec.family} IDEA={idea[:3]}`"


def check_record(
    repo: Path, commit: str, spec: FamilySpec, idea: str, rec: dict, where: str
) -> None:
    """Refuse a record that is not promotable at ``commit`` (status, dirty, code_sha)."""
    from ladder.codehash import CodeHashError, code_sha, idea_files_at_commit

    if rec.get("family") != spec.family or rec.get("idea") != idea:
        raise VendorError(f"{where}: the record is of {rec.get('family')}/{rec.get('idea')}")
    if rec.get("status") != "passed":
        raise VendorError(f"{where}: status is {rec.get('status')!r}; only a passed record vendors")
    if rec.get("dirty") is not False:
        raise VendorError(
            f"{where}: benched on a dirty tree; commit, then {rebench_hint(spec, idea)}"
        )
    try:
        current = code_sha(idea_files_at_commit(repo, commit, f"{spec.ideas_dir}/{idea}"))
    except CodeHashError as exc:
        raise VendorError(f"{where}: {exc}") from None
    if rec.get("code_sha") != current:
        raise VendorError(
            f"record {rec.get('record_id')} of {idea} was benched on code "
            f"{str(rec.get('code_sha'))[:12]}, but the idea's code at {commit[:12]} is "
            f"{current[:12]}; re-bench it: {rebench_hint(spec, idea)}"
        )


def build(
    repo: Path,
    spec: FamilySpec,
    commit: str,
    idea: str,
    record_id: str,
) -> VendorResult:
    """Vendor ``idea`` of ``spec.family`` at ``commit`` with the knobs of record ``record_id``.

    Everything is read from git objects at ``commit`` (the record file too). Returns the output
    bytes; writes nothing. Raises VendorError for every refusal listed in tools/vendor.py.
    """
    commit = resolve_commit(repo, commit)
    if idea not in spec.modules:
        raise VendorError(
            f"idea {idea} is not in VENDOR['modules'] of {spec.family_dir}/family.py "
            f"(mapped: {', '.join(spec.modules) or 'none'}); map its modules there first"
        )
    rec_path = record_relpath(spec, idea, record_id)
    rec_bytes = read_blob(repo, commit, rec_path)
    if rec_bytes is None:
        raise VendorError(
            f"record {record_id} ({rec_path}) is not in commit {commit[:12]}; commit the record "
            "and vendor at a commit that holds it"
        )
    try:
        rec = json.loads(rec_bytes)
    except ValueError as exc:
        raise VendorError(f"{rec_path}: not JSON: {exc}") from None
    try:
        from ladder.records import RecordError, validate_record

        validate_record(rec)
    except RecordError as exc:
        raise VendorError(f"{rec_path}: {exc}") from None
    check_record(repo, commit, spec, idea, rec, rec_path)
    record_knobs: dict[str, Any] = dict(rec.get("knobs") or {})

    resolver = ImportResolver(repo, commit, spec)
    modules: dict[ModKey, _Module] = {}
    queue: list[tuple[ModKey, str]] = [((idea, "kernel"), "")]
    all_sites: dict[str, list[tuple[KnobSite, str]]] = {}

    def values_for(sites: list[KnobSite], relpath: str) -> dict[str, Any]:
        vals: dict[str, Any] = {}
        for site in sites:
            knob = site.knob
            if knob.key in record_knobs:
                vals[knob.key] = _coerce(knob, record_knobs[knob.key], rec_path)
            else:
                vals[knob.key] = knob.default
            all_sites.setdefault(knob.key, []).append((site, relpath))
        return vals

    while queue:
        key, importer = queue.pop(0)
        if key in modules:
            continue
        folder, stem = key
        if stem not in spec.modules.get(folder, {}):
            raise VendorError(
                f"{importer + ': ' if importer else ''}{spec.ideas_dir}/{folder}/{stem}.py is "
                f"needed but not in VENDOR['modules'] of {spec.family_dir}/family.py; add "
                f"{{{folder!r}: {{{stem!r}: <name>}}}}"
            )
        relpath = f"{spec.ideas_dir}/{folder}/{stem}.py"
        source = read_blob(repo, commit, relpath)
        if source is None:
            raise VendorError(f"{relpath} is not in commit {commit[:12]}")
        try:
            text = source.decode("utf-8")
        except UnicodeDecodeError:
            raise VendorError(f"{relpath}:1: not UTF-8 text") from None
        try:
            original = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            raise VendorError(syntax_error(text, relpath, exc)) from None
        wrapper = MetadataWrapper(original, unsafe_skip_copy=True)
        try:
            sites = scan_module(wrapper, relpath, spec.family)
        except KnobError as exc:
            raise VendorError(str(exc)) from None
        vals = values_for(sites, relpath)
        freezer = _Freezer(wrapper, sites, vals, relpath)
        frozen = original.visit(freezer)
        mod = _Module(key, relpath, source, original, sites, freezer, frozen, wrapper)

        def where_of(node: cst.CSTNode, _f: _Freezer = freezer, _r: str = relpath) -> str:
            return f"{_r}:{_f.origin_line.get(id(node), 0)}"

        mod.imports = resolver.analyse(frozen, folder, where_of)
        modules[key] = mod
        queue.extend((imp.target, where_of(imp.stmt)) for imp in mod.imports)

    unread = sorted(set(record_knobs) - set(all_sites))
    if unread:
        # Maybe a module of the idea that is not vendored reads them (then they do not matter).
        from ladder.codehash import idea_files_at_commit

        vendored = {mod.relpath for mod in modules.values()}
        others = {
            rel: data
            for rel, data in idea_files_at_commit(repo, commit, f"{spec.ideas_dir}/{idea}").items()
            if f"{spec.ideas_dir}/{idea}/{rel}" not in vendored
        }
        try:
            idea_knobs = scan_idea(others, spec.family)
        except KnobError as exc:
            raise VendorError(f"{spec.ideas_dir}/{idea}/{exc}") from None
        unread = [k for k in unread if k not in idea_knobs]
    if unread:
        raise VendorError(
            f"{rec_path}: knob {', '.join(unread)} is not read by the code at {commit[:12]}; "
            f"re-bench: {rebench_hint(spec, idea)}"
        )

    for mod in modules.values():
        _check_vanished(mod)

    main = modules[(idea, "kernel")]
    _check_entry_points(main, spec)
    pruned = _prune(modules, spec)

    package_names = {key: spec.modules[key[0]][key[1]] for key in modules}
    outputs: dict[str, bytes] = {}
    pyproject = read_blob(repo, commit, "pyproject.toml")
    for key, module in pruned.items():
        mod = modules[key]
        rewritten = _rewrite_imports(module, mod, resolver, package_names)
        out_path = f"{spec.kernels_dir}/{package_names[key]}.py"
        header = [
            f"# Generated by tools/vendor.py from {mod.relpath}",
            f"# at {commit}; do not edit: change the idea and re-vendor.",
        ]
        rewritten = rewritten.with_changes(
            header=[cst.EmptyLine(comment=cst.Comment(h)) for h in header] + list(rewritten.header)
        )
        outputs[out_path] = format_python(rewritten.code, out_path, pyproject)
    init_path = f"{spec.kernels_dir}/__init__.py"
    eps = sorted(spec.entry_points)
    init = (
        f"# Generated by tools/vendor.py for {spec.package} at {commit};\n"
        "# do not edit: change the idea and re-vendor.\n"
        f'"""Kernels vendored from ladder idea {spec.family}/{idea}."""\n\n'
        f"from .{package_names[(idea, 'kernel')]} import {', '.join(eps)}\n\n"
        f"__all__ = {list(spec.entry_points)!r}\n"
    )
    outputs[init_path] = format_python(init, init_path, pyproject)

    sources = {mod.relpath: sha256(mod.source) for mod in modules.values()}
    inventory: list[InventoryRow] = []
    knobs_frozen: dict[str, Any] = {}
    for key_name in sorted(all_sites):
        for site, relpath in all_sites[key_name]:
            value = modules_value(modules, key_name)
            inventory.append(
                InventoryRow(
                    key=key_name,
                    name=site.knob.name,
                    file=relpath,
                    value=value,
                    source="record" if key_name in record_knobs else "default",
                )
            )
            knobs_frozen[key_name] = value
    provenance = {
        "SOURCE_COMMIT": commit,
        "RECORD": {"idea": idea, "record_id": record_id, "sha256": sha256(rec_bytes)},
        "KNOBS": knobs_frozen,
        "SOURCE_FILES": dict(sorted(sources.items())),
        "OUTPUT_FILES": {p: sha256(b) for p, b in sorted(outputs.items())},
        "VENDOR": {
            "libcst": libcst_version(),
            "ruff": ruff_version(),
            "tool_sha256": tool_sha256(),
        },
    }
    outputs[spec.provenance_path] = render_provenance(provenance, spec, pyproject)
    return VendorResult(
        spec=spec,
        commit=commit,
        idea=idea,
        record_id=record_id,
        record_path=rec_path,
        outputs=dict(sorted(outputs.items())),
        provenance=provenance,
        inventory=inventory,
        sources=sources,
    )


def syntax_error(text: str, relpath: str, exc: cst.ParserSyntaxError) -> str:
    """'relpath:line: syntax error: ...' with Python's own line and message when it has one."""
    try:
        ast.parse(text)
    except SyntaxError as err:
        return f"{relpath}:{err.lineno}: syntax error: {err.msg}"
    return f"{relpath}:{exc.raw_line}: syntax error: {exc.message}"


def modules_value(modules: Mapping[ModKey, _Module], key: str) -> Any:
    for mod in modules.values():
        if key in mod.freezer.values:
            return mod.freezer.values[key]
    raise KeyError(key)


def _check_entry_points(main: _Module, spec: FamilySpec) -> None:
    defined = {
        stmt.name.value
        for stmt in main.frozen.body
        if isinstance(stmt, cst.FunctionDef | cst.ClassDef)
    }
    info = analyse_module(main.frozen)
    missing = [ep for ep in spec.entry_points if ep not in defined and ep not in info.bound]
    if missing:
        raise VendorError(
            f"{main.relpath}: defines no {', '.join(missing)} after freezing the knobs; "
            f"every idea's kernel.py exports {', '.join(spec.entry_points)}"
        )


def _check_vanished(mod: _Module) -> None:
    """Refuse when a name the freeze removed (its definition was in a decided-false branch)
    is still referenced: the reference sits under a condition the knobs do not decide."""
    before = analyse_module(mod.original)
    after = analyse_module(mod.frozen)
    still = (before.bound - after.bound) & after.unresolved
    if not still:
        return
    name = sorted(still)[0]
    # Report the surviving reference in the source: a use outside the dropped branches.
    positions = mod.wrapper.resolve(PositionProvider)
    scopes0 = mod.wrapper.resolve(ScopeProvider)
    ref_line = def_line = 0
    for scope in {id(s): s for s in scopes0.values() if s is not None}.values():
        for access in scope.accesses:
            node = access.node
            if isinstance(node, cst.Name) and node.value == name:
                line = positions[node].start.line
                if not any(a <= line <= b for a, b in mod.freezer.dropped) and not ref_line:
                    ref_line = line
        if isinstance(scope, GlobalScope):
            for assignment in scope.assignments[name]:
                node = getattr(assignment, "node", None)
                if node is not None and not def_line:
                    def_line = positions[node].start.line
    raise VendorError(
        f"{mod.relpath}:{ref_line or def_line}: {name} is used under a condition the frozen "
        f"knobs do not decide, but the freeze removes its definition (line {def_line}); guard "
        "the use with the same knob condition as the definition"
    )


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
                    have.add(_dotted(alias.name))
            elif imp.alias in info.used:
                if imp.alias in info.whole_module_use:
                    uses[imp.target] = None
                else:
                    have.update(info.attr_uses.get(imp.alias, set()))
    return uses


def _prune(modules: Mapping[ModKey, _Module], spec: FamilySpec) -> dict[ModKey, cst.Module]:
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
    orig_imports = {k: _syntactic_imports(m.original, k, modules) for k, m in modules.items()}
    orig_ext = _external_uses(orig_infos, orig_imports)
    originally_used: dict[ModKey, set[str] | None] = {}
    for key, info in orig_infos.items():
        ext = orig_ext[key]
        originally_used[key] = None if ext is None else info.used | ext
    current = {k: cst.parse_module(m.frozen.code) for k, m in modules.items()}
    while True:
        infos = {k: analyse_module(m) for k, m in current.items()}
        imports = {k: _syntactic_imports(m, k, modules) for k, m in current.items()}
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
                            [x for t in s.targets for x in _target_names(t.target)]
                            if isinstance(s, cst.Assign)
                            else _target_names(s.target)
                        )
                    ]
                    if not all(n in dead for n in assigned):
                        dead -= set(assigned)
                if not dead:
                    new_body.append(stmt)
                    continue
                kept = _remove_names(module, i, dead)
                if len(kept) != 1 or kept[0] is not stmt:
                    changed = True
                new_body.extend(kept)
            if changed:
                current[key] = cst.parse_module(module.with_changes(body=new_body).code)
        if not changed:
            return current


def _syntactic_imports(
    module: cst.Module, key: ModKey, modules: Mapping[ModKey, _Module]
) -> list[IdeaImport]:
    """Idea imports of a module whose targets are among the vendored modules."""
    found: list[IdeaImport] = []
    own = key[0]
    folders = {k[0] for k in modules}

    def target(dotted: str, relative: int, name: str | None) -> ModKey | None:
        if relative == 1:
            folder, stem = own, (dotted or None)
        else:
            m = _IDEA_MODULE.match(dotted)
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
                t = target(_dotted(alias.name), 0, None)
                if t is not None:
                    found.append(IdeaImport(node, "module", t, _dotted(alias.asname.name)))

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:  # noqa: N802
            if isinstance(node.names, cst.ImportStar):
                return
            dotted, relative = _dotted(node.module), len(node.relative)
            if relative == 0 and not dotted.startswith("ladder."):
                return
            if relative > 1:
                return
            is_package = (relative == 1 and not dotted) or (
                relative == 0 and (m := _IDEA_MODULE.match(dotted)) is not None and not m.group(3)
            )
            if is_package:
                for alias in node.names:
                    t = target(dotted, relative, _dotted(alias.name))
                    if t is not None:
                        found.append(IdeaImport(node, "module", t, _import_bound(alias)))
            else:
                t = target(dotted, relative, None)
                if t is not None:
                    found.append(IdeaImport(node, "names", t))

    module.visit(V())
    return found


def _rewrite_imports(
    module: cst.Module,
    mod: _Module,
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


# ------------------------------------------------------------------------------------------
# formatting, provenance
# ------------------------------------------------------------------------------------------


def format_python(code: str, relpath: str, pyproject: bytes | None) -> bytes:
    """``ruff format`` of generated code (stdin), under ``pyproject`` (the commit's
    pyproject.toml; ruff's defaults when None). Raises VendorError when ruff is missing or
    rejects the code."""
    if importlib.util.find_spec("ruff") is None:
        raise VendorError(
            f"ruff is not installed for {sys.executable}; the vendor formats its output with it "
            "(run `make setup`)"
        )
    with tempfile.TemporaryDirectory(prefix="vendor-ruff-") as tmp:
        args = [sys.executable, "-m", "ruff", "format", "--stdin-filename", relpath]
        if pyproject is not None:
            cfg = Path(tmp) / "pyproject.toml"
            cfg.write_bytes(pyproject)
            args += ["--config", str(cfg)]
        else:
            args += ["--isolated"]
        proc = subprocess.run(
            [*args, "-"], input=code.encode("utf-8"), capture_output=True, cwd=tmp, check=False
        )
    if proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip().splitlines()
        raise VendorError(f"ruff format rejected {relpath}: {msg[-1] if msg else proc.returncode}")
    out = proc.stdout
    try:
        ast.parse(out)
    except SyntaxError as exc:  # pragma: no cover - ruff only emits valid code
        raise VendorError(f"{relpath}:{exc.lineno}: generated code does not parse") from None
    return out


def render_provenance(prov: Mapping[str, Any], spec: FamilySpec, pyproject: bytes | None) -> bytes:
    """The text of ``_provenance.py``: a comment header, a docstring and one literal per key."""
    lines = [
        "# Generated by tools/vendor.py; do not edit: change the idea and re-vendor",
        f"# (`make vendor FAMILY={spec.family}`).",
        f'"""Where {spec.package}._kernels came from. Literals only: tools/drift.py reads them',
        'with ast.literal_eval and never imports this module."""',
        "",
    ]
    for key in PROVENANCE_KEYS:
        lines.append(f"{key} = {_py_literal(prov[key])}")
    text = "\n".join(lines) + "\n"
    return format_python(text, spec.provenance_path, pyproject)


def _py_literal(obj: Any) -> str:
    if isinstance(obj, dict):
        items = ", ".join(f"{_py_literal(k)}: {_py_literal(obj[k])}" for k in sorted(obj))
        return "{" + items + ",}" if obj else "{}"
    if isinstance(obj, list | tuple):
        return "[" + ", ".join(_py_literal(v) for v in obj) + "]"
    if isinstance(obj, float) and not math.isfinite(obj):
        raise VendorError(f"cannot write {obj!r} into _provenance.py")
    return repr(obj)


class ProvenanceError(VendorError):
    """_provenance.py is missing a key, not literal, or has the wrong types."""


_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_RECORD_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]*$")


def _provenance_problems(found: Mapping[str, Any]) -> list[tuple[str, str]]:
    """[(key, what is wrong)] for values of the wrong type or form, in PROVENANCE_KEYS order."""
    out: list[tuple[str, str]] = []
    commit = found["SOURCE_COMMIT"]
    if not (isinstance(commit, str) and re.match(r"^[0-9a-f]{40}$", commit)):
        out.append(
            (
                "SOURCE_COMMIT",
                f"SOURCE_COMMIT has the wrong type or form: {commit!r:.60} is not a 40-hex commit sha",
            )
        )
    record = found["RECORD"]
    if not isinstance(record, dict):
        out.append(
            ("RECORD", f"RECORD has the wrong type or form: a {type(record).__name__}, not a dict")
        )
    else:
        forms = {
            "idea": (IDEA_RE, "an idea folder NNN-slug"),
            "record_id": (_RECORD_ID, "a record_id"),
            "sha256": (_HEX64, "a 64-hex sha256"),
        }
        for key, (pattern, what) in forms.items():
            value = record.get(key)
            if not (isinstance(value, str) and pattern.match(value)):
                out.append(
                    (
                        "RECORD",
                        f"RECORD[{key!r}] has the wrong type or form: {value!r:.60} is not {what}",
                    )
                )
    knobs = found["KNOBS"]
    if not isinstance(knobs, dict) or not all(isinstance(k, str) for k in knobs):
        out.append(("KNOBS", "KNOBS has the wrong type or form: not a dict of knob keys"))
    for key in ("SOURCE_FILES", "OUTPUT_FILES"):
        files = found[key]
        if not isinstance(files, dict):
            out.append(
                (key, f"{key} has the wrong type or form: a {type(files).__name__}, not a dict")
            )
            continue
        for path, digest in files.items():
            if not (isinstance(path, str) and isinstance(digest, str) and _HEX64.match(digest)):
                out.append(
                    (
                        key,
                        f"{key}[{path!r}] has the wrong type or form: {digest!r:.60} is not a "
                        "64-hex sha256",
                    )
                )
                break
    if not isinstance(found["VENDOR"], dict):
        out.append(("VENDOR", "VENDOR has the wrong type or form: not a dict"))
    return out


def parse_provenance(text: bytes, relpath: str) -> dict[str, Any]:
    """The six literals of a ``_provenance.py`` (never imported). Raises ProvenanceError."""
    try:
        tree = ast.parse(text, filename=relpath)
    except SyntaxError as exc:
        raise ProvenanceError(f"{relpath}:{exc.lineno}: does not parse: {exc.msg}") from None
    found: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for i, stmt in enumerate(tree.body):
        if (
            i == 0
            and isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        ):
            continue
        if (
            not isinstance(stmt, ast.Assign)
            or len(stmt.targets) != 1
            or not isinstance(stmt.targets[0], ast.Name)
        ):
            raise ProvenanceError(
                f"{relpath}:{stmt.lineno}: only NAME = <literal> lines belong here (hand-edited?)"
            )
        name = stmt.targets[0].id
        if name not in PROVENANCE_KEYS or name in found:
            raise ProvenanceError(f"{relpath}:{stmt.lineno}: unexpected or repeated {name}")
        try:
            found[name] = ast.literal_eval(stmt.value)
        except ValueError:
            raise ProvenanceError(f"{relpath}:{stmt.lineno}: {name} is not a literal") from None
        lines[name] = stmt.lineno
    missing = [k for k in PROVENANCE_KEYS if k not in found]
    if missing:
        raise ProvenanceError(f"{relpath}: missing {', '.join(missing)}; re-vendor")
    problems = _provenance_problems(found)
    if problems:
        name, problem = problems[0]
        raise ProvenanceError(f"{relpath}:{lines[name]}: {problem} (hand-edited?)")
    return found


# ------------------------------------------------------------------------------------------
# writing: all files or none
# ------------------------------------------------------------------------------------------


def current_outputs(repo: Path, spec: FamilySpec) -> dict[str, bytes]:
    """{repo-relative path: bytes} of the files vendor owns, as they are on disk now
    (``_kernels/**`` except ``__pycache__/``, and ``_provenance.py``). A ``.pyc`` outside
    ``__pycache__`` counts: Python imports it when no ``.py`` of that name exists."""
    out: dict[str, bytes] = {}
    kdir = repo / spec.kernels_dir
    if kdir.is_dir():
        for path in sorted(kdir.rglob("*")):
            rel = path.relative_to(repo).as_posix()
            if path.is_file() and "__pycache__" not in path.relative_to(kdir).parts:
                out[rel] = path.read_bytes()
    prov = repo / spec.provenance_path
    if prov.is_file():
        out[spec.provenance_path] = prov.read_bytes()
    return out


def unified_diff(old: Mapping[str, bytes], new: Mapping[str, bytes]) -> str:
    """A unified diff from the files ``old`` to the files ``new`` (text, '' if equal)."""
    chunks: list[str] = []
    for path in sorted(set(old) | set(new)):
        a = old.get(path)
        b = new.get(path)
        if a == b:
            continue
        a_lines = a.decode("utf-8", "replace").splitlines(keepends=True) if a is not None else []
        b_lines = b.decode("utf-8", "replace").splitlines(keepends=True) if b is not None else []
        chunks.extend(
            difflib.unified_diff(
                a_lines,
                b_lines,
                fromfile=f"a/{path}" if a is not None else "/dev/null",
                tofile=f"b/{path}" if b is not None else "/dev/null",
            )
        )
    return "".join(chunks)


STAGING_PREFIX = ".vendor-"
# tempfile.mkdtemp(prefix=STAGING_PREFIX): eight characters of its random name alphabet.
_OWN_STAGING = re.compile(r"^\.vendor-[a-z0-9_]{8}$")


def staging_leftovers(repo: Path, spec: FamilySpec) -> list[str]:
    """Repo-relative paths of ``.vendor-*`` entries in the family's package folder: staging
    folders a vendor run killed outright (no ``finally``) left behind. Sorted."""
    pkg = repo / spec.package_dir
    if not pkg.is_dir():
        return []
    return sorted(
        p.relative_to(repo).as_posix() for p in pkg.iterdir() if p.name.startswith(STAGING_PREFIX)
    )


def remove_stale_staging(repo: Path, spec: FamilySpec) -> list[str]:
    """Delete the staging folders of the vendor's own naming (``.vendor-`` and eight
    characters, a real folder, not a link) from the package folder; the paths removed."""
    removed: list[str] = []
    for rel in staging_leftovers(repo, spec):
        path = repo / rel
        if _OWN_STAGING.match(path.name) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            removed.append(rel)
    return removed


def write_outputs(repo: Path, spec: FamilySpec, outputs: Mapping[str, bytes]) -> None:
    """Replace ``_kernels/`` and ``_provenance.py`` with ``outputs``: every file or none.

    The new tree is written to a staging folder beside the package first; then the old
    ``_kernels`` and ``_provenance.py`` are moved aside and the new ones moved in (renames on
    one file system). Any failure moves the old ones back, leaving the package untouched.
    Staging folders left by an earlier run that was killed outright are removed first.
    """
    kernels = repo / spec.kernels_dir
    prov = repo / spec.provenance_path
    for rel in outputs:
        if rel != spec.provenance_path and not rel.startswith(spec.kernels_dir + "/"):
            raise VendorError(f"refusing to write {rel}: outside {spec.kernels_dir}/")
    pkg = repo / spec.package_dir
    pkg.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(repo, spec)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=pkg))
    done: list[tuple[Path, Path]] = []  # (moved from, moved to), to undo in reverse
    try:
        new_kernels = staging / "new" / "_kernels"
        new_kernels.mkdir(parents=True)
        new_prov = staging / "new" / "_provenance.py"
        for rel, data in outputs.items():
            target = (
                new_prov
                if rel == spec.provenance_path
                else (new_kernels / PurePosixPath(rel).relative_to(spec.kernels_dir))
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        old = staging / "old"
        old.mkdir()
        moves: list[tuple[Path, Path]] = []
        if kernels.exists():
            moves.append((kernels, old / "_kernels"))
        moves.append((new_kernels, kernels))
        if prov.exists():
            moves.append((prov, old / "_provenance.py"))
        if new_prov.exists():
            moves.append((new_prov, prov))
        try:
            for src, dst in moves:
                os.replace(src, dst)
                done.append((src, dst))
        except BaseException:
            for src, dst in reversed(done):
                os.replace(dst, src)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def code_sha_lookup(
    repo: Path, commit: str, spec: FamilySpec, only: str | None = None
) -> Callable[[str], str]:
    """``code_sha_of(folder)`` for ``ladder.records.winner``: the idea folder's code_sha at
    ``commit`` (cached), "" for a folder that cannot be hashed, or that is not ``only``."""
    from ladder.codehash import CodeHashError, code_sha, idea_files_at_commit

    cache: dict[str, str] = {}

    def code_sha_of(folder: str) -> str:
        if only is not None and folder != only:
            return ""
        if folder not in cache:
            try:
                cache[folder] = code_sha(
                    idea_files_at_commit(repo, commit, f"{spec.ideas_dir}/{folder}")
                )
            except CodeHashError:
                cache[folder] = ""
        return cache[folder]

    return code_sha_of
