"""The family protocol: what ``ladder/kernels/<family>/family.py`` must define, checked on load.

The harness (check, bench, board, winner, new) talks to a family only through these names
(docs/DESIGN.md "The family contract"):

Required
    FAMILY            str, the folder name
    ENTRY_POINTS      tuple[str, ...], the names every idea's kernel.py exports
    ENTRY_POINT_ARGS  {entry point: tuple of argument names} (what the scaffold writes)
    TARGET_DEVICE     str, a device-name substring the winner is chosen on
    TOLERANCES        {output: max relative L2 error vs the reference}; its order is the order
                      of the outputs everywhere
    ERR_RATIO_MAX     float >= 1: how much worse than the baseline's error a candidate may be
    SHAPES            {set name: [shape, ...]} with SHAPES["prod"] == [one shape named "prod"];
                      a shape is a frozen dataclass with ``name: str`` and optionally
                      ``case: str`` (default "dense")
    make_inputs(shape, device, seed) -> tuple        fresh random inputs
    reference(*inputs) -> tuple                      one output per TOLERANCES key
    BASELINE          an object with every entry point as an attribute (fla's kernels)
    run(impl, inputs, poison) -> tuple               forward then backward, once, outputs in
                                                     TOLERANCES order; poison(specs) first
    timed(impl, inputs) -> {"fwd", "bwd", "fwdbwd": zero-argument callables}
    min_bytes(shape, direction) -> int               for "fwd" and "bwd"
Optional
    CASES {case: description}, PROMOTE_CASES (tuple of case names: the cases an idea must
    implement to be promoted, i.e. what the package ships; default: any idea may win),
    RANK_SHAPES (tuple of distinct names of the prod and sweep shapes, "prod" among them: the
    shapes whose fwd+bwd ratios, geometric mean, rank the family's ideas; default ("prod",)),
    baseline_retune(), contract_problems(outs, inputs), strided(inputs), shape_fields(shape),
    KNOB_RULES, INTERPRET_KNOBS, BASELINE_ON_INTERPRETER; RATIO_MIN_ELEMENTS (int >= 2) with
    RATIO_POOL_SEEDS (int >= 2), both or neither: an output whose reference has fewer values
    than RATIO_MIN_ELEMENTS takes its error-ratio test on errors pooled over RATIO_POOL_SEEDS
    seeds (ladder.check); NO_INTERPRETER (str: why the family's ``run`` cannot run on
    Triton's CPU interpreter; ``check --interpret`` then refuses with it); an idea's
    kernel.py may set
    CASES = ("dense", ...), as a literal tuple (the winner reads it without importing).
    (A family with PROMOTE_CASES therefore needs it literal in every idea that may win.)

:func:`validate_family` raises :class:`BadFamily` (one line: the file, the attribute, what it
must be). Board and winner need only the core (FAMILY, ENTRY_POINTS, TARGET_DEVICE), so a
family still being written can be listed; check and bench need the whole protocol.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ladder.paths import BadFamily, BadIdea

__all__ = [
    "CORE",
    "DEFAULT_CASES",
    "DIRECTIONS",
    "REQUIRED",
    "TIMED_KEYS",
    "family_cases",
    "idea_cases",
    "missing_promote_cases",
    "promote_cases",
    "static_idea_cases",
    "shape_case",
    "shape_fields",
    "validate_family",
]

DEFAULT_CASES = {"dense": "the plain call: no optional arguments"}
DIRECTIONS = ("fwd", "bwd")
TIMED_KEYS = ("fwd", "bwd", "fwdbwd")

CORE = ("FAMILY", "ENTRY_POINTS", "TARGET_DEVICE")
REQUIRED = (
    *CORE,
    "ENTRY_POINT_ARGS",
    "TOLERANCES",
    "ERR_RATIO_MAX",
    "SHAPES",
    "make_inputs",
    "reference",
    "BASELINE",
    "run",
    "timed",
    "min_bytes",
)
_OPTIONAL_CALLABLES = ("baseline_retune", "contract_problems", "strided", "shape_fields")


def _identifier_tuple(val: Any) -> bool:
    return (
        isinstance(val, tuple)
        and bool(val)
        and all(isinstance(v, str) and v.isidentifier() for v in val)
    )


def _is_shape(val: Any) -> bool:
    if not dataclasses.is_dataclass(val) or isinstance(val, type):
        return False
    params = getattr(type(val), "__dataclass_params__", None)
    return bool(getattr(params, "frozen", False)) and isinstance(getattr(val, "name", None), str)


def _problem(mod: ModuleType, name: str) -> str | None:
    """What is wrong with attribute ``name`` of a family module (it exists), or None."""
    val = getattr(mod, name)
    if name == "FAMILY":
        return None if isinstance(val, str) and val else "a non-empty str (the folder name)"
    if name == "TARGET_DEVICE":
        return None if isinstance(val, str) and val else "a non-empty str, e.g. 'H200'"
    if name == "ENTRY_POINTS":
        if _identifier_tuple(val) and len(set(val)) == len(val):
            return None
        return "a non-empty tuple of distinct identifier strings, e.g. ('cconv_fwd', 'cconv_bwd')"
    if name == "ENTRY_POINT_ARGS":
        eps = getattr(mod, "ENTRY_POINTS", ())
        ok = isinstance(val, dict) and all(
            isinstance(val.get(ep), tuple)
            and all(isinstance(a, str) and a.isidentifier() for a in val[ep])
            for ep in eps
        )
        return None if ok else "a dict giving each entry point a tuple of argument names"
    if name == "TOLERANCES":
        ok = (
            isinstance(val, dict)
            and bool(val)
            and all(
                isinstance(k, str)
                and k
                and isinstance(v, (int, float))
                and not isinstance(v, bool)
                and math.isfinite(v)
                and v > 0
                for k, v in val.items()
            )
        )
        return None if ok else "a non-empty dict {output name: positive float}"
    if name == "ERR_RATIO_MAX":
        ok = isinstance(val, (int, float)) and not isinstance(val, bool) and val >= 1
        return None if ok and math.isfinite(val) else "a finite number >= 1, e.g. 1.10"
    if name == "NO_INTERPRETER":
        return None if isinstance(val, str) and val.strip() else "a non-empty str: why not"
    if name in ("RATIO_MIN_ELEMENTS", "RATIO_POOL_SEEDS"):
        other = "RATIO_POOL_SEEDS" if name == "RATIO_MIN_ELEMENTS" else "RATIO_MIN_ELEMENTS"
        if not hasattr(mod, other):
            return f"set together with {other} (or neither)"
        ok = isinstance(val, int) and not isinstance(val, bool) and val >= 2
        return None if ok else "an int >= 2"
    if name == "SHAPES":
        return _shapes_problem(mod, val)
    if name == "CASES":
        ok = isinstance(val, dict) and bool(val)
        ok = ok and all(isinstance(k, str) and k and isinstance(v, str) for k, v in val.items())
        return None if ok else "a non-empty dict {case name: one-line description}"
    if name == "BASELINE":
        eps = getattr(mod, "ENTRY_POINTS", ())
        missing = [ep for ep in eps if not callable(getattr(val, ep, None))]
        if missing:
            return f"an object with the entry points as attributes (missing {', '.join(missing)})"
        return None
    if name == "RANK_SHAPES":
        return _rank_shapes_problem(mod, val)
    if name == "PROMOTE_CASES":
        known = family_cases(mod) if _valid_cases(mod) else DEFAULT_CASES
        ok = isinstance(val, tuple) and bool(val) and all(c in known for c in val)
        return None if ok else f"a non-empty tuple of the family's cases ({', '.join(known)})"
    if name in ("KNOB_RULES", "INTERPRET_KNOBS"):
        return None if isinstance(val, dict) else "a dict"
    if name in ("make_inputs", "reference", "run", "timed", "min_bytes", *_OPTIONAL_CALLABLES):
        return None if callable(val) else "a function"
    return None


def _shapes_problem(mod: ModuleType, val: Any) -> str | None:
    what = (
        'a dict {set name: [shape, ...]} with SHAPES["prod"] a list of exactly one shape named '
        '"prod"; a shape is a frozen dataclass with a name: str field'
    )
    if not isinstance(val, dict) or not all(
        isinstance(k, str) and isinstance(v, (list, tuple)) for k, v in val.items()
    ):
        return what
    prod = val.get("prod")
    if not prod or len(prod) != 1 or not _is_shape(prod[0]) or prod[0].name != "prod":
        return what
    cases = family_cases(mod) if _valid_cases(mod) else DEFAULT_CASES
    seen: set[str] = set()
    for set_name, shapes in val.items():
        for s in shapes:
            if not _is_shape(s):
                return f"{what} (SHAPES[{set_name!r}] holds {s!r})"
            if s.name in seen:
                return f"{what}; shape names are unique (got {s.name!r} twice)"
            seen.add(s.name)
            case = shape_case(s)
            if not isinstance(case, str) or case not in cases:
                return (
                    f"{what}; shape {s.name!r} has case {case!r}, not one of CASES "
                    f"({', '.join(cases)})"
                )
    return None


def _rank_shapes_problem(mod: ModuleType, val: Any) -> str | None:
    what = (
        'a non-empty tuple of distinct names of shapes of SHAPES["prod"] and SHAPES["sweep"] '
        '(what `--shapes all` benches) with "prod" among them, e.g. ("prod", "<a sweep '
        'shape>"); the winner ranks ideas on the geometric mean of their fwd+bwd ratios at '
        "those shapes (leave RANK_SHAPES out to rank on prod alone)"
    )
    if not isinstance(val, tuple) or not val or not all(isinstance(v, str) for v in val):
        return what
    dup = sorted({v for v in val if val.count(v) > 1})
    if dup:
        return f"{what}; {', '.join(map(repr, dup))} appears more than once"
    if "prod" not in val:
        return f'{what}; "prod" is missing: add it (the winner must beat fla at prod)'
    shapes = getattr(mod, "SHAPES", None)
    if shapes is None:
        return f"{what}; the family defines no SHAPES to name them from: define SHAPES"
    known = [s.name for group in shapes.values() for s in group]
    unknown = [v for v in val if v not in known]
    if unknown:
        return (
            f"{what}; {', '.join(map(repr, unknown))} names no shape of SHAPES ({', '.join(known)})"
        )
    timed = [s.name for key in ("prod", "sweep") for s in shapes.get(key, ())]
    other = [v for v in val if v not in timed]
    if other:
        return (
            f"{what}; {', '.join(map(repr, other))} is not in the prod or sweep set (benched "
            f"sets: {', '.join(timed)})"
        )
    return None


def _valid_cases(mod: ModuleType) -> bool:
    return not hasattr(mod, "CASES") or _problem(mod, "CASES") is None


def validate_family(mod: ModuleType, path: Path, folder: str, *, complete: bool) -> None:
    """Check a family module against the protocol (module docstring).

    Always: the core attributes exist and are well formed, FAMILY equals ``folder``, and any
    other protocol attribute present is well formed. ``complete``: every required attribute
    exists (what check and bench need). Raises BadFamily: ``<path>: <attribute>: must be
    <what>`` (or ``missing; define it as <what>``)."""
    names = REQUIRED if complete else CORE
    for name in names:
        if not hasattr(mod, name):
            raise BadFamily(f"{path}: {name}: missing; define it as {_WHAT[name]}")
    order = [*REQUIRED, "CASES", "PROMOTE_CASES", "RANK_SHAPES", "KNOB_RULES",
             "INTERPRET_KNOBS", "RATIO_MIN_ELEMENTS", "RATIO_POOL_SEEDS", "NO_INTERPRETER",
             *_OPTIONAL_CALLABLES]  # fmt: skip
    for name in order:
        if name in ("ENTRY_POINT_ARGS", "BASELINE") and not _valid_entry_points(mod):
            continue
        if hasattr(mod, name):
            why = _problem(mod, name)
            if why is not None:
                raise BadFamily(f"{path}: {name}: must be {why}; got {_short(getattr(mod, name))}")
    if mod.FAMILY != folder:
        raise BadFamily(f"{path}: FAMILY: must be {folder!r} (the folder name); got {mod.FAMILY!r}")


def _valid_entry_points(mod: ModuleType) -> bool:
    return hasattr(mod, "ENTRY_POINTS") and _problem(mod, "ENTRY_POINTS") is None


def _short(val: Any) -> str:
    text = repr(val).replace("\n", " ")
    return text if len(text) <= 80 else text[:77] + "..."


_WHAT = {
    "FAMILY": "the family name (the folder name), a str",
    "ENTRY_POINTS": "a tuple of the entry point names every idea exports",
    "TARGET_DEVICE": "a device-name substring, e.g. 'H200'",
    "ENTRY_POINT_ARGS": "{entry point: tuple of argument names}",
    "TOLERANCES": "{output name: max relative L2 error}, in output order",
    "ERR_RATIO_MAX": "a float >= 1 (candidate error / baseline error allowed)",
    "SHAPES": '{"prod": [Shape("prod", ...)], "sweep": [...], "small": [...]}',
    "make_inputs": "a function (shape, device, seed) -> tuple of inputs",
    "reference": "a function (*inputs) -> one output per TOLERANCES key",
    "BASELINE": "an object exposing the entry points (fla's kernels)",
    "run": "a function (impl, inputs, poison) -> outputs in TOLERANCES order",
    "timed": 'a function (impl, inputs) -> {"fwd", "bwd", "fwdbwd": callables}',
    "min_bytes": 'a function (shape, direction) -> int, for "fwd" and "bwd"',
}


def family_cases(fam: ModuleType) -> dict[str, str]:
    """The family's CASES (default: dense only)."""
    return dict(getattr(fam, "CASES", DEFAULT_CASES))


def promote_cases(fam: ModuleType) -> tuple[str, ...]:
    """The cases a promotable idea must implement (the family's PROMOTE_CASES; () when the
    family sets none: any idea may win)."""
    return tuple(getattr(fam, "PROMOTE_CASES", ()))


def missing_promote_cases(required: tuple[str, ...], declared: tuple | None) -> list[str]:
    """The cases of ``required`` (a family's PROMOTE_CASES) an idea declaring ``declared``
    lacks, in ``required``'s order; all of them when ``declared`` is None (unreadable)."""
    return [c for c in required if c not in (declared or ())]


def static_idea_cases(source: bytes | str) -> tuple[str, ...] | None:
    """The cases an idea's kernel.py declares, read without importing it: its module-level
    ``CASES = (...)`` as a literal tuple (or list) of strings, ("dense",) when it assigns
    none at module level, None when CASES is not such a literal (or the file does not
    parse)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found: tuple[str, ...] | None = ("dense",)
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == "CASES" for t in targets):
            continue
        try:
            val = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        ok = isinstance(val, (tuple, list)) and val and all(isinstance(c, str) for c in val)
        found = tuple(val) if ok else None
    return found


def shape_case(shape: Any) -> str:
    """A shape's case (``shape.case``, default "dense")."""
    return getattr(shape, "case", "dense")


def idea_cases(fam: ModuleType, idea: ModuleType, where: str) -> tuple[str, ...]:
    """The cases an idea module implements (its ``CASES``, default ("dense",)); the BASELINE
    implements every case of the family. Raises BadIdea (naming ``where``) when CASES is not
    a tuple of the family's case names."""
    if idea is getattr(fam, "BASELINE", None):
        return tuple(family_cases(fam))
    cases = getattr(idea, "CASES", ("dense",))
    known = family_cases(fam)
    if (
        not isinstance(cases, (tuple, list))
        or not cases
        or not all(isinstance(c, str) and c in known for c in cases)
    ):
        raise BadIdea(
            f"{where}: CASES must be a tuple of the family's cases ({', '.join(known)}); "
            f"got {_short(cases)}"
        )
    return tuple(cases)


def shape_fields(fam: ModuleType, shape: Any) -> dict[str, Any]:
    """The shape's fields as stored in a record: ``fam.shape_fields(shape)`` when the family
    defines it, else ``dataclasses.asdict(shape)``; ``name`` first. Tuples become lists."""
    hook: Callable[[Any], dict] | None = getattr(fam, "shape_fields", None)
    raw = dict(hook(shape)) if hook is not None else dataclasses.asdict(shape)
    out: dict[str, Any] = {"name": shape.name}
    for k, v in raw.items():
        if k != "name":
            out[k] = list(v) if isinstance(v, tuple) else v
    return out
