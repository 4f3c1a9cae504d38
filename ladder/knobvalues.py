"""Environment knobs as values: what a knob is, and how an environment string becomes its value.

:class:`Knob` describes one knob as :mod:`ladder.knobs` finds it in an idea's source
(docs/DESIGN.md "Ideas and knobs"); :func:`parse_value` converts a string exactly as the
knob's own code does, and :func:`effective_values` gives every knob's value in effect for an
environment. The bench records those values; ``tools/vendor.py`` freezes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Knob",
    "KnobError",
    "KnobKind",
    "KnobValue",
    "convert",
    "effective_values",
    "parse_value",
]

KnobKind = Literal["int", "float", "bool", "str"]
KnobValue = int | float | bool | str


class KnobError(ValueError):
    """An idea reads the environment in a way the knob contract does not allow.

    The message is one line: ``relpath:line: what is wrong; what to do``.
    """


@dataclass(frozen=True)
class Knob:
    """One environment knob of an idea module.

    key: the environment variable (``<FAMILY>_...``); name: the module-level constant it is
    assigned to; kind: the Python type the code converts the string to; default: the value
    when the variable is unset, already converted; file: path relative to the idea folder;
    line: 1-based line of the assignment; constexpr: wrapped in ``tl.constexpr(...)``;
    source_default: the default string literal as written. For ``bool`` knobs,
    compare_op (``"=="`` or ``"!="``) and compare_literal say how the string becomes a bool.
    """

    key: str
    name: str
    kind: KnobKind
    default: KnobValue
    file: str
    line: int
    constexpr: bool
    source_default: str
    compare_op: str | None = None
    compare_literal: str | None = None


def convert(
    kind: KnobKind, raw: str, compare_op: str | None, compare_literal: str | None
) -> KnobValue:
    """``raw`` converted as a knob of this kind converts it (bool: ``raw == compare_literal``
    for ``"=="``, else ``raw != compare_literal``). Raises ValueError when int/float reject it."""
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "bool":
        return (raw == compare_literal) if compare_op == "==" else (raw != compare_literal)
    return raw


def parse_value(knob: Knob, raw: str) -> KnobValue:
    """Convert an environment string exactly as the knob's code does.

    int -> ``int(raw)``, float -> ``float(raw)``, bool -> ``raw == lit`` / ``raw != lit``,
    str -> raw. Raises KnobError when the code's conversion would raise.
    """
    try:
        return convert(knob.kind, raw, knob.compare_op, knob.compare_literal)
    except ValueError as exc:
        raise KnobError(
            f"{knob.file}:{knob.line}: {knob.key}={raw!r} is not a valid {knob.kind}; "
            f"unset it or give {'an' if knob.kind[0] in 'aeiou' else 'a'} {knob.kind}"
        ) from exc


def effective_values(
    knobs: Mapping[str, Knob] | Iterable[Knob], environ: Mapping[str, str]
) -> dict[str, KnobValue]:
    """{key: value in effect}: the environment's value when set (converted), else the default.

    knobs: as returned by :func:`scan_idea` (or any iterable of Knob). Raises KnobError when a
    set variable does not convert.
    """
    items = knobs.values() if isinstance(knobs, Mapping) else knobs
    out: dict[str, KnobValue] = {}
    for knob in sorted(items, key=lambda k: k.key):
        raw = environ.get(knob.key)
        out[knob.key] = knob.default if raw is None else parse_value(knob, raw)
    return out
