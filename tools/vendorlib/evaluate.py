"""Three-valued evaluation of expressions over literals and frozen knobs.

A value is known (a Python object) or :data:`UNKNOWN`. Anything that reads a name other than
a frozen knob, calls, or raises while folding is UNKNOWN, so a decision is only ever taken
where Python itself would take it for every run with these knob values.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst


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
