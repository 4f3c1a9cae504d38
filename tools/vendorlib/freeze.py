"""The freeze pass: knob assignments become literals and the conditions they settle are decided.

1. every knob assignment's right-hand side becomes the record's value (or the default when the
   record lacks the key) as a literal, kept inside ``tl.constexpr(...)`` when it was wrapped;
2. conditions that use knobs are evaluated three-valued (:mod:`.evaluate`). ``if``/``elif``/
   ``else`` chains lose decided-false branches and everything after a decided-true one;
   conditional expressions, ``and``/``or``/``not`` and comparisons are folded where the result
   is determined; unknown parts are left as written.

Own-line comments above a removed ``if`` move to what replaces it (:mod:`.comments`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import libcst as cst
from libcst.metadata import (
    GlobalScope,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    ScopeProvider,
)

from ladder.knobs import KnobSite

from .comments import carry_leading_lines, has_comment, with_footer
from .common import VendorError
from .evaluate import UNKNOWN, Evaluator, literal_expr

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


class Freezer(cst.CSTTransformer):
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
        self.lines = wrapper.module.code.splitlines()
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
        self._carriers: set[int] = set()  # ids of the stand-ins for removed commented `if`s
        self._inlined: set[int] = set()  # ids of the statements of decided branches, inlined
        self.origin_end: dict[int, int] = {}  # a kept statement's last line in the source

    # -- bookkeeping ---------------------------------------------------------------------
    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        result = super().on_leave(original_node, updated_node)
        if isinstance(result, cst.CSTNode):
            self.updated[id(original_node)] = result
            if isinstance(result, _STATEMENTS):
                self.origin_line[id(result)] = self.positions[original_node].start.line
                self.origin_end[id(result)] = self.positions[original_node].end.line
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

    def _drop(self, owner: cst.If | cst.Else) -> None:
        """Record the lines of ``owner``'s body as removed: from the line after its header
        to the body's end, own-line comments indented under the header included."""
        head = self.positions[owner].start
        end = self.positions[owner.body].end.line
        # comment lines indented under the header after the last statement belong to it too
        while end < len(self.lines):
            text = self.lines[end]
            indent = len(text) - len(text.lstrip())
            if text.strip() and not (text.lstrip().startswith("#") and indent > head.column):
                break
            end += 1
        while end > head.line and not self.lines[end - 1].strip():
            end -= 1  # blank lines after it are nobody's
        self.dropped.append((head.line + 1, end))

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
            self._drop(o)
        if not decided:
            return updated_node
        if terminated_at is not None:
            for o, _ in chain[terminated_at + 1 :]:
                self._drop(o)
            if else_o is not None:
                self._drop(else_o)
        elif else_u is not None:
            final_body = else_u.body
            final_else = else_u
        if self._only_filler(final_body):
            final_body = final_else = None
        if not kept:
            if final_body is None:
                if not has_comment(updated_node.leading_lines):
                    return cst.RemovalSentinel.REMOVE
                # A stand-in that carries the comments above the `if` to the next statement
                # (leave_IndentedBlock / leave_Module fold it away).
                carrier = cst.SimpleStatementLine(
                    body=[cst.Pass()], leading_lines=updated_node.leading_lines
                )
                self._carriers.add(id(carrier))
                return carrier
            stmts = _body_statements(final_body)
            first = stmts[0].with_changes(
                leading_lines=[*updated_node.leading_lines, *stmts[0].leading_lines]
            )
            if id(stmts[0]) in self.origin_line:
                self.origin_line[id(first)] = self.origin_line[id(stmts[0])]
                self.origin_end[id(first)] = self.origin_end[id(stmts[0])]
            stmts[0] = first
            self._keep.append(first)
            self._inlined.update(id(st) for st in stmts)
            return cst.FlattenSentinel(stmts)
        tail: cst.If | cst.Else | None = None
        if final_body is not None:
            tail = final_else if final_else is not None else cst.Else(body=final_body)
        for _, u in reversed(kept[1:]):
            tail = u.with_changes(orelse=tail)
        return kept[0][1].with_changes(orelse=tail, leading_lines=updated_node.leading_lines)

    def _fold_carriers(self, block: Any) -> Any:
        if not any(id(stmt) in self._carriers for stmt in block.body):
            return block

        def replaced(old: cst.CSTNode, new: cst.CSTNode) -> None:
            if id(old) in self.origin_line:
                self.origin_line[id(new)] = self.origin_line[id(old)]
            self._keep.append(new)

        body, left = carry_leading_lines(block.body, self._carriers, replaced)
        return with_footer(block.with_changes(body=body), left)

    def leave_Module(self, original_node, updated_node):  # noqa: N802
        return self._fold_carriers(updated_node)

    def _drop_unreachable(self, block: Any) -> Any:
        """``block`` without the statements after an inlined branch's return, raise, break
        or continue (a decided ``if KNOB: return ...`` leaves the rest of the block dead)."""
        for i, stmt in enumerate(block.body[:-1]):
            if id(stmt) not in self._inlined or not isinstance(stmt, cst.SimpleStatementLine):
                continue
            if not isinstance(stmt.body[-1], cst.Return | cst.Raise | cst.Break | cst.Continue):
                continue
            # the lines after the flow's end, comments above the dead statements included
            ends = [self.origin_end.get(id(d)) for d in block.body[i:]]
            if None not in ends:
                self.dropped.append((ends[0] + 1, max(ends[1:])))
            return block.with_changes(body=block.body[: i + 1])
        return block

    def leave_IndentedBlock(self, original_node, updated_node):  # noqa: N802
        updated_node = self._drop_unreachable(self._fold_carriers(updated_node))
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
