"""Environment knobs of an idea: find them and refuse every other environment read.

A knob is a module-level ALL-CAPS name assigned once from a literal-key environment read
(docs/DESIGN.md "Ideas and knobs"):

    TARGET_PROGRAMS = int(os.environ.get("CCONV_TARGET_PROGRAMS", "2048"))     # int
    SCALE = float(os.getenv("CCONV_SCALE", "0.5"))                             # float
    FAST_SIGMOID = os.environ.get("CCONV_FAST_SIGMOID", "1") == "1"            # bool (or != "0")
    MODE = os.environ.get("CCONV_MODE", "strip")                               # str
    FAST = tl.constexpr(os.environ.get("CCONV_FAST", "1") == "1")              # any of these,
                                                                               # as a constexpr

The reads are recognised by qualified name (``import os``, ``import os as o``,
``from os import environ, getenv``; ``import triton.language as tl``), never by text. Any
other way of touching the environment is refused with ``relpath:line``, because the vendor
must be able to freeze every knob to one literal and decide the branches it controls.

The bench harness uses :func:`scan_idea` and :func:`effective_values` to record the knobs in
effect; ``tools/vendor.py`` uses :func:`scan_module` to find the assignments it freezes. What a
knob is and how its values convert live in :mod:`ladder.knobvalues` (re-exported here).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import (
    GlobalScope,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    QualifiedName,
    QualifiedNameProvider,
    QualifiedNameSource,
    ScopeProvider,
)

from ladder.knobvalues import (
    Knob,
    KnobError,
    KnobKind,
    KnobValue,
    convert,
    effective_values,
    parse_value,
)

__all__ = [
    "Knob",
    "KnobError",
    "KnobKind",
    "KnobSite",
    "KnobValue",
    "effective_values",
    "parse_value",
    "scan_idea",
    "scan_module",
    "scan_source",
]

# Qualified names that reach the process environment. Touching any of them outside the knob
# forms is refused.
_ENV_ROOTS = frozenset(
    {
        "os.environ",
        "os.environb",
        "os.getenv",
        "os.getenvb",
        "os.putenv",
        "os.unsetenv",
        "posix.environ",
        "nt.environ",
    }
)
_GETTERS = frozenset({"os.environ.get", "os.getenv"})
# Ways to reach the environment, or the os module, that are never a knob and are refused
# wherever they appear (each hides a read the vendor could not freeze).
_OS_MODULES = frozenset({"os", "posix", "nt"})
_ENV_ATTRS = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
_PATH_EXPANDERS = frozenset({"expandvars", "expanduser"})
_DYNAMIC_IMPORTS = frozenset(
    {"builtins.__import__", "importlib.import_module", "importlib.__import__"}
)
_REFLECTIVE_ATTRS = frozenset({"__dict__", "__getattribute__", "__getattr__"})
_ATTR_FUNCS = frozenset(
    {"builtins.getattr", "builtins.hasattr", "builtins.setattr", "builtins.delattr"}
)
_HIDDEN_ATTR_NAMES = (
    _OS_MODULES
    | _ENV_ATTRS
    | _PATH_EXPANDERS
    | _REFLECTIVE_ATTRS
    | {"modules", "__import__", "import_module", "home"}
)
_CONSTEXPR = frozenset({"triton.language.constexpr", "triton.language.core.constexpr"})
_CASTS: dict[str, KnobKind] = {"builtins.int": "int", "builtins.float": "float"}
_NAME_RE = re.compile(r"^_?[A-Z][A-Z0-9_]*$")
_EXAMPLE = 'NAME = int(os.environ.get("{fam}_NAME", "2048"))'


@dataclass(frozen=True)
class KnobSite:
    """A knob together with the CST nodes that define it (for source transforms).

    statement: the module-level line; assign: its single ``Assign``; constexpr_func: the
    ``tl.constexpr`` callee expression as written when the read is wrapped, else None.
    """

    knob: Knob
    statement: cst.SimpleStatementLine
    assign: cst.Assign
    constexpr_func: cst.BaseExpression | None


def _string_literal(node: cst.BaseExpression) -> str | None:
    """The value of a plain (non-f, non-concatenated, non-bytes) string literal, else None."""
    if isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower():
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


class _Scanner:
    """Finds knob assignments and every other environment access of one module."""

    def __init__(self, wrapper: MetadataWrapper, relpath: str, family: str) -> None:
        self.wrapper = wrapper
        self.module = wrapper.module
        self.relpath = relpath
        self.prefix = family.upper() + "_"
        self.example = _EXAMPLE.format(fam=family.upper())
        self.qnames = wrapper.resolve(QualifiedNameProvider)
        self.positions = wrapper.resolve(PositionProvider)
        self.parents = wrapper.resolve(ParentNodeProvider)
        self.scopes = wrapper.resolve(ScopeProvider)

    def _qn(self, node: cst.CSTNode) -> set[str]:
        return {q.name for q in self._qualified(node)}

    def _imported_qn(self, node: cst.CSTNode) -> set[str]:
        """Qualified names of ``node`` that come from an import or a builtin (not local)."""
        return {q.name for q in self._qualified(node) if q.source != QualifiedNameSource.LOCAL}

    def _qualified(self, node: cst.CSTNode) -> set[QualifiedName]:
        names = self.qnames.get(node)
        if names is None:
            return set()
        if callable(names):  # lazily computed metadata
            names = names()
        return set(names)

    def _line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def _fail(self, node: cst.CSTNode, what: str) -> KnobError:
        return KnobError(f"{self.relpath}:{self._line(node)}: {what}")

    def _is_env_anchor(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Name | cst.Attribute) and bool(self._qn(node) & _ENV_ROOTS)

    def _anchors(self, root: cst.CSTNode) -> list[cst.CSTNode]:
        """Every Name/Attribute under root that denotes an environment object or function."""
        found: list[cst.CSTNode] = []
        scanner = self

        class V(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                if isinstance(node, cst.Import | cst.ImportFrom):
                    return False
                if scanner._is_env_anchor(node):
                    found.append(node)
                    return False
                return True

        root.visit(V())
        return found

    def _inside_function(self, node: cst.CSTNode) -> bool:
        cur: cst.CSTNode | None = node
        while cur is not None:
            if isinstance(cur, cst.FunctionDef | cst.Lambda | cst.ClassDef):
                return True
            cur = self.parents.get(cur)
        return False

    def _match_read(self, call: cst.BaseExpression, stmt: cst.CSTNode) -> tuple[str, str]:
        """(key, default) of ``os.environ.get("KEY", "default")`` / ``os.getenv(...)``."""
        if isinstance(call, cst.Subscript):
            text = cst.Module([]).code_for_node(call.value)
            raise self._fail(
                stmt,
                f"{text}[...] is not a knob form (no default); write it as " + self.example,
            )
        if not isinstance(call, cst.Call) or not (self._qn(call.func) & _GETTERS):
            raise self._fail(
                stmt,
                "environment read in an unsupported form; write it as " + self.example,
            )
        positional = [a for a in call.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
        if any(a.star for a in call.args) or set(keywords) - {"default"}:
            raise self._fail(stmt, "environment read with */** or unknown keyword arguments")
        if not positional:
            raise self._fail(stmt, "environment read without a key; write " + self.example)
        key = _string_literal(positional[0].value)
        if key is None:
            raise self._fail(
                stmt, "environment key is not a string literal; spell the key out literally"
            )
        if len(positional) >= 2:
            default_node = positional[1].value
        elif "default" in keywords:
            default_node = keywords["default"].value
        else:
            raise self._fail(
                stmt, f"knob {key} has no default; give a string default as in " + self.example
            )
        if len(positional) > 2 or (len(positional) == 2 and "default" in keywords):
            raise self._fail(stmt, f"knob {key}: too many arguments to the environment read")
        default = _string_literal(default_node)
        if default is None:
            raise self._fail(
                stmt,
                f"knob {key}: the default is not a string literal; the environment holds "
                'strings, so write e.g. "2048"',
            )
        if not key.startswith(self.prefix) or len(key) == len(self.prefix):
            raise self._fail(
                stmt, f"knob key {key!r} does not start with {self.prefix!r}; rename it"
            )
        return key, default

    def _match_knob(self, stmt: cst.SimpleStatementLine) -> KnobSite:
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
            raise self._fail(
                stmt, "environment read outside a single knob assignment; write " + self.example
            )
        assign = stmt.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            raise self._fail(stmt, "a knob must be assigned to exactly one plain name")
        name = assign.targets[0].target.value
        if not _NAME_RE.match(name):
            raise self._fail(stmt, f"knob target {name!r} is not an ALL-CAPS name; rename it")
        expr: cst.BaseExpression = assign.value
        constexpr_func: cst.BaseExpression | None = None
        if isinstance(expr, cst.Call) and self._qn(expr.func) & _CONSTEXPR:
            if len(expr.args) != 1 or expr.args[0].keyword or expr.args[0].star:
                raise self._fail(stmt, "tl.constexpr(...) around a knob takes one argument")
            constexpr_func = expr.func
            expr = expr.args[0].value
        kind: KnobKind
        compare_op: str | None = None
        compare_literal: str | None = None
        if isinstance(expr, cst.Call) and self._qn(expr.func) & set(_CASTS):
            kind = _CASTS[next(iter(self._qn(expr.func) & set(_CASTS)))]
            if len(expr.args) != 1 or expr.args[0].keyword or expr.args[0].star:
                raise self._fail(stmt, f"{kind}(...) around a knob takes one argument")
            read = expr.args[0].value
        elif isinstance(expr, cst.Comparison):
            if len(expr.comparisons) != 1 or not isinstance(
                expr.comparisons[0].operator, cst.Equal | cst.NotEqual
            ):
                raise self._fail(
                    stmt,
                    'a bool knob compares the read with one string: == "1" or != "0"',
                )
            target = expr.comparisons[0]
            compare_literal = _string_literal(target.comparator)
            if compare_literal is None:
                raise self._fail(stmt, "a bool knob compares the read with a string literal")
            compare_op = "==" if isinstance(target.operator, cst.Equal) else "!="
            kind = "bool"
            read = expr.left
        else:
            kind = "str"
            read = expr
        key, default_str = self._match_read(read, stmt)
        # The read must be exactly the pieces above: no other environment access inside.
        pieces = self._anchors(assign.value)
        if len(pieces) != 1:
            raise self._fail(stmt, "more than one environment access in one knob assignment")
        try:
            default = convert(kind, default_str, compare_op, compare_literal)
        except ValueError:
            raise self._fail(
                stmt, f"knob {key}: default {default_str!r} is not a valid {kind}; fix it"
            ) from None
        knob = Knob(
            key=key,
            name=name,
            kind=kind,
            default=default,
            file=self.relpath,
            line=self._line(stmt),
            constexpr=constexpr_func is not None,
            source_default=default_str,
            compare_op=compare_op,
            compare_literal=compare_literal,
        )
        return KnobSite(knob=knob, statement=stmt, assign=assign, constexpr_func=constexpr_func)

    def scan(self) -> list[KnobSite]:
        for node in self._walk_imports():
            if (
                isinstance(node, cst.ImportFrom)
                and isinstance(node.names, cst.ImportStar)
                and node.module is not None
                and cst.Module([]).code_for_node(node.module) in {"os", "posix", "nt"}
            ):
                raise self._fail(node, "`from os import *` hides environment reads; import names")
        sites: list[KnobSite] = []
        matched: set[int] = set()
        for stmt in self.module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            anchors = self._anchors(stmt)
            if not anchors:
                continue
            site = self._match_knob(stmt)
            sites.append(site)
            matched.update(id(a) for a in anchors)
        errors: list[KnobError] = []
        for anchor in self._anchors(self.module):
            if id(anchor) in matched:
                continue
            errors.append(self._refuse_anchor(anchor))
        errors.extend(self._refuse_os_module_values())
        errors.extend(self._refuse_hidden_access())
        if errors:
            raise min(errors, key=_error_line)
        self._check_single_assignment(sites)
        return sites

    def _walk_imports(self) -> list[cst.CSTNode]:
        found: list[cst.CSTNode] = []

        class V(cst.CSTVisitor):
            def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
                found.append(node)

        self.module.visit(V())
        return found

    def _refuse_anchor(self, anchor: cst.CSTNode) -> KnobError:
        text = cst.Module([]).code_for_node(anchor)
        parent = self.parents.get(anchor)
        if isinstance(parent, cst.Subscript) and parent.value is anchor:
            return self._fail(
                anchor,
                f"{text}[...] is not a knob form; read it once at module level as " + self.example,
            )
        if self._inside_function(anchor):
            return self._fail(
                anchor,
                f"environment access ({text}) inside a function or class; read it once at "
                "module level as " + self.example,
            )
        return self._fail(
            anchor,
            f"environment access ({text}) outside a module-level knob assignment; "
            "write it as " + self.example,
        )

    def _refuse_os_module_values(self) -> list[KnobError]:
        """The os module used as a value (getattr(os, ...), passed around) hides reads."""
        errors: list[KnobError] = []
        scanner = self

        class V(cst.CSTVisitor):
            def visit_Import(self, node: cst.Import) -> bool:
                return False

            def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
                return False

            def visit_Name(self, node: cst.Name) -> None:
                if not (scanner._qn(node) & {"os", "posix", "nt"}):
                    return
                parent = scanner.parents.get(node)
                if isinstance(parent, cst.Attribute) and parent.value is node:
                    return
                errors.append(
                    scanner._fail(
                        node,
                        f"the os module is used as a value ({node.value}), which can reach "
                        "the environment unseen; use os.<attribute> directly",
                    )
                )

        self.module.visit(V())
        return errors

    def _refuse_hidden_access(self) -> list[KnobError]:
        """Roads to the environment that bypass ``os.environ`` / ``os.getenv`` by name.

        Refused wherever they appear: dynamic imports (``__import__``,
        ``importlib.import_module``), ``sys.modules``, the os module reached through another
        module (``shutil.os``, ``os.path.os``), environment attributes reached through any other
        name (``p.environ``), path expansion (``os.path.expandvars``/``expanduser``,
        ``Path.expanduser``, ``Path.home``), reflection (``m.__dict__``, ``vars(m)``) and
        ``getattr``/``hasattr``/``setattr``/``delattr`` with one of those names as a string.
        One error per offending expression, the root cause first on a line.
        """
        found: list[tuple[int, int, KnobError]] = []  # (line, rank, error)
        scanner = self
        use_knob = "; read the environment only through a knob: " + self.example

        def why(node: cst.Name | cst.Attribute) -> tuple[int, str] | None:
            text = _short(cst.Module([]).code_for_node(node))
            imported = scanner._imported_qn(node)
            last = {q.rsplit(".", 1)[-1] for q in imported}
            attr = node.attr.value if isinstance(node, cst.Attribute) else None
            name = node.value if isinstance(node, cst.Name) else None
            if imported & _DYNAMIC_IMPORTS or {attr, name} & {"__import__", "import_module"}:
                return 0, (
                    f"{text} imports a module at run time, which can reach the environment "
                    "unseen; use an import statement"
                )
            if name == "__builtins__":
                return 0, f"{text} reaches __import__ and the builtins unseen; do not use it"
            if any(q == "sys.modules" or q.endswith(".sys.modules") for q in imported):
                return 1, (
                    f"{text} hands out any module (os too), which can reach the environment "
                    "unseen; use an import statement"
                )
            if attr in _REFLECTIVE_ATTRS:
                return 2, (
                    f"{text} reflects on an object, which can reach the environment unseen; "
                    "name the attribute directly"
                )
            if attr in _OS_MODULES or (
                name is not None and last & _OS_MODULES and not imported & _OS_MODULES
            ):
                return 3, (
                    f"{text} reaches the os module through another module, which can read the "
                    "environment unseen; `import os` and use os.<attribute> directly"
                )
            if last & _PATH_EXPANDERS or attr in _PATH_EXPANDERS:
                return 4, f"{text} reads the environment (HOME, $VARS){use_knob}"
            if any(q.endswith("Path.home") for q in imported):
                return 4, f"{text} reads the environment (HOME){use_knob}"
            if attr in _ENV_ATTRS or (name is not None and last & _ENV_ATTRS):
                # (os.environ, os.getenv and their aliases are anchors, never seen here)
                return 5, f"{text} reaches the environment, but not as a knob{use_knob}"
            return None

        def why_call(node: cst.Call) -> tuple[int, str] | None:
            func = scanner._imported_qn(node.func)
            args = [a for a in node.args if a.keyword is None and not a.star]
            if func & _ATTR_FUNCS and len(args) >= 2:
                attr = _string_literal(args[1].value)
                if attr in _HIDDEN_ATTR_NAMES:
                    fn = cst.Module([]).code_for_node(node.func)
                    return 2, (
                        f"{fn}(..., {attr!r}) can reach the environment unseen; name the "
                        "attribute directly"
                    )
            if "builtins.vars" in func and args:
                return 2, (
                    "vars(...) reflects on an object, which can reach the environment unseen; "
                    "name the attribute directly"
                )
            return None

        class V(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                if isinstance(node, cst.Import | cst.ImportFrom):
                    return False
                if scanner._is_env_anchor(node):
                    return False  # knob reads and their refusals are handled elsewhere
                hit: tuple[int, str] | None = None
                if isinstance(node, cst.Name | cst.Attribute):
                    hit = why(node)
                elif isinstance(node, cst.Call):
                    hit = why_call(node)
                if hit is not None:
                    err = scanner._fail(node, hit[1])
                    found.append((scanner._line(node), hit[0], err))
                return True

        self.module.visit(V())
        return [err for _, _, err in sorted(found, key=lambda f: (f[0], f[1]))]

    def _check_single_assignment(self, sites: list[KnobSite]) -> None:
        global_scope = next((s for s in self.scopes.values() if isinstance(s, GlobalScope)), None)
        seen_keys: dict[str, KnobSite] = {}
        for site in sites:
            knob = site.knob
            if knob.key in seen_keys:
                raise self._fail(
                    site.statement,
                    f"knob {knob.key} is read twice (also line {seen_keys[knob.key].knob.line}); "
                    "read it once and reuse the name",
                )
            seen_keys[knob.key] = site
            if global_scope is None:
                continue
            target = site.assign.targets[0].target
            for assignment in global_scope.assignments[knob.name]:
                bound = getattr(assignment, "node", None)
                if bound is target:
                    continue
                where = bound if bound is not None else site.statement
                reason = self._binding_reason(where)
                try:
                    line = self._line(where)
                except KeyError:
                    line = knob.line
                raise KnobError(
                    f"{self.relpath}:{line}: knob {knob.name} ({knob.key}) is {reason}; "
                    "a knob is assigned exactly once, at module level"
                )

    def _binding_reason(self, node: cst.CSTNode) -> str:
        cur: cst.CSTNode | None = node
        while cur is not None:
            if isinstance(cur, cst.AugAssign):
                return "changed by augmented assignment"
            if isinstance(cur, cst.FunctionDef | cst.Lambda):
                return "assigned through `global` in a function"
            cur = self.parents.get(cur)
        return "assigned twice"


def _short(text: str, limit: int = 60) -> str:
    """One line of source text, cut to ``limit`` characters for a message."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_line(err: KnobError) -> int:
    match = re.match(r"^[^:]*:(\d+):", str(err))
    return int(match.group(1)) if match else 0


def scan_module(wrapper: MetadataWrapper, relpath: str, family: str) -> list[KnobSite]:
    """Knob sites of a parsed module, in source order.

    wrapper: a ``MetadataWrapper`` of the module (its ``.module`` holds the returned nodes);
    relpath: the file's path as it should appear in messages; family: e.g. ``"cconv"``.
    Raises KnobError for any environment access that is not a knob, a malformed knob, a knob
    assigned more than once (including ``global`` and augmented assignment) or a default the
    conversion rejects.
    """
    return _Scanner(wrapper, relpath, family).scan()


def scan_source(source: str, relpath: str, family: str) -> list[Knob]:
    """Knobs of one module's source text, in source order.

    Raises KnobError (``relpath:line: ...``) on a syntax error or any refused environment
    access (see :func:`scan_module`).
    """
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        import ast

        try:
            ast.parse(source)
        except SyntaxError as err:
            raise KnobError(f"{relpath}:{err.lineno}: syntax error: {err.msg}") from exc
        raise KnobError(f"{relpath}:{exc.raw_line}: syntax error: {exc.message}") from exc
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    return [site.knob for site in scan_module(wrapper, relpath, family)]


def scan_idea(files: Mapping[str, bytes], family: str) -> dict[str, Knob]:
    """All knobs of an idea folder, keyed by environment key.

    files: {path relative to the idea folder: bytes} (non-``.py`` files are ignored).
    Raises KnobError for a refused read in any module, a file that is not UTF-8, or one key
    read by two modules (read it in one and import the name).
    """
    knobs: dict[str, Knob] = {}
    for relpath in sorted(files):
        if not relpath.endswith(".py"):
            continue
        try:
            source = files[relpath].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KnobError(f"{relpath}:1: not UTF-8 text ({exc.reason})") from exc
        for knob in scan_source(source, relpath, family):
            if knob.key in knobs:
                other = knobs[knob.key]
                raise KnobError(
                    f"{relpath}:{knob.line}: knob {knob.key} is also read in "
                    f"{other.file}:{other.line}; read it in one module and import the name"
                )
            knobs[knob.key] = knob
    return knobs
