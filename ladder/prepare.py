"""Getting an idea ready to run: its knobs (validated ``--knob`` values) and its module.

Knobs are read at import, so ``--knob KEY=VALUE`` goes into ``os.environ`` before the idea is
imported. The knobs an idea reads are its own modules' plus those of the ideas it imports
(``ladder.kernels.<family>.ideas.i<NNN>``): of another idea, only the modules the code imports.
They are found by ``ladder.knobs.scan_idea``.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ladder import codehash, knobs, paths
from ladder.paths import LadderError

__all__ = [
    "SEED_LIMIT",
    "PreparedIdea",
    "MAX_SWEEP_POINTS",
    "check_seed",
    "idea_knobs",
    "knob_rows",
    "parse_knob_value",
    "parse_knob_args",
    "prepare_idea",
    "related_ideas",
    "sweep_points",
]

_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*\Z")

# Seeds are drawn from [0, SEED_LIMIT). The commands derive a few seeds from one by adding
# small offsets (shape index, timing set); torch generators take up to 2**64 - 1, so the
# margin keeps every derived seed valid.
SEED_LIMIT = 2**63


# bool knob values as a record prints them, and the 1 / 0 the knob's code compares with
_BOOL_WORDS = {"True": "1", "true": "1", "False": "0", "false": "0"}


def check_seed(seed: int | None) -> None:
    """Refuse a ``--seed`` outside [0, 2**63) with a one-line LadderError, before anything
    runs (an out-of-range seed would otherwise fail every shape and blame the idea). None
    (draw a fresh seed) is accepted."""
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise LadderError(
            f"--seed {seed} is out of range; pass an integer from 0 to {SEED_LIMIT - 1}, or "
            f"leave it out for a fresh one"
        )


def parse_knob_args(items: Sequence[str]) -> dict[str, str]:
    """{KEY: VALUE} from ``--knob KEY=VALUE`` strings. Raises LadderError on a malformed item
    or a key given twice."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not _KEY_RE.match(key):
            raise LadderError(
                f"--knob takes KEY=VALUE with an upper-case key, got {item!r}; "
                f"e.g. --knob CCONV_TARGET_PROGRAMS=4096"
            )
        if key in out:
            raise LadderError(f"--knob {key} given twice; keep one")
        out[key] = value
    return out


def parse_knob_value(knob: knobs.Knob, raw: str) -> knobs.KnobValue:
    """``knobs.parse_value``, and a float must be finite: nan and inf pass the code's
    ``float()`` but no record can hold them and no vendored literal can freeze them. Raises
    KnobError (``file:line: ...``, naming the knob)."""
    value = knobs.parse_value(knob, raw)
    if knob.kind == "float" and not math.isfinite(value):
        raise knobs.KnobError(
            f"{knob.file}:{knob.line}: {knob.key}={raw!r} is not a finite float (nan and inf "
            f"are refused); give a finite number"
        )
    return value


def _check_defaults(found: Mapping[str, knobs.Knob]) -> None:
    """Refuse an idea whose float knob defaults to nan or inf."""
    for key, knob in sorted(found.items()):
        if knob.kind == "float" and not math.isfinite(knob.default):
            raise LadderError(
                f"{knob.file}:{knob.line}: knob {key}: default {knob.source_default!r} is not "
                f"a finite float (nan and inf are refused); give a finite number"
            )


def related_ideas(family: str, folder: str, root: Path | None = None) -> list[str]:
    """Idea folders of the same family that ``folder``'s code imports, transitively (by the
    ``ladder.kernels.<family>.ideas.i<NNN>`` names in its modules). Excludes ``folder``."""
    fdir = paths.family_dir(family, root)
    pat = re.compile(rf"ladder\.kernels\.{re.escape(family)}\.ideas\.i([0-9]{{3}})")
    seen = {folder}
    todo = [folder]
    while todo:
        cur = todo.pop()
        files = codehash.idea_files_all(fdir / "ideas" / cur)
        for rel, data in files.items():
            if not rel.endswith(".py"):
                continue
            for num in pat.findall(data.decode("utf-8", errors="replace")):
                try:
                    other = paths.resolve_idea(family, num, root)
                except paths.UnknownIdea:
                    continue
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
    return sorted(seen - {folder})


def _imports_of(source: str, family: str, here: str) -> list[tuple[str, str | None]]:
    """(idea number, module stem or None for the idea's package) of every import of an idea
    of ``family`` in ``source`` (absolute ``ladder.kernels.<family>.ideas.i<NNN>[.<mod>]``
    imports, and relative ones from the module's own idea ``here``). Unparsable source:
    []."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    prefix = f"ladder.kernels.{family}.ideas.i"
    out: list[tuple[str, str | None]] = []

    def split(dotted: str) -> tuple[str, str | None] | None:
        if not dotted.startswith(prefix):
            return None
        rest = dotted[len(prefix) :].split(".")
        if not re.fullmatch(r"[0-9]{3}", rest[0]):
            return None
        return rest[0], (rest[1] if len(rest) > 1 else None)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                hit = split(alias.name)
                if hit:
                    out.append(hit)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: a sibling module of the same idea
                if node.level == 1 and node.module:
                    out.append((here, node.module.split(".")[0]))
                elif node.level == 1:
                    out += [(here, alias.name) for alias in node.names]
                continue
            hit = split(node.module or "")
            if hit is None:
                continue
            num, stem = hit
            if stem is not None:
                out.append((num, stem))
            else:  # from ...iNNN import a, b: modules of that idea, or names of its package
                out += [(num, alias.name) for alias in node.names]
    return out


def _knob_sources(family: str, folder: str, root: Path | None = None) -> list[tuple[str, dict]]:
    """[(idea folder, {relpath: bytes})]: the files whose knobs the idea reads. The idea's
    own folder whole, then, for each other idea it imports (transitively), only the modules
    the code imports from it: a module of another idea that nothing imports never runs, so
    its knobs (and their defaults) are not the idea's. An import that names no module file
    of the other idea (a name of its package) keeps that idea's whole folder."""
    fdir = paths.family_dir(family, root)
    own = paths.resolve_idea(family, folder, root)
    files_of: dict[str, dict[str, bytes]] = {}

    def files(name: str) -> dict[str, bytes]:
        if name not in files_of:
            files_of[name] = codehash.idea_files_all(fdir / "ideas" / name)
        return files_of[name]

    chosen: dict[str, set[str] | None] = {own: None}  # None: the whole folder
    todo = [(own, rel) for rel in files(own) if rel.endswith(".py")]
    seen = set(todo)
    while todo:
        name, rel = todo.pop()
        here = name[:3]
        source = files(name)[rel].decode("utf-8", errors="replace")
        for num, stem in _imports_of(source, family, here):
            try:
                other = paths.resolve_idea(family, num, root)
            except paths.UnknownIdea:
                continue
            if other == own:
                continue
            rels = [f"{stem}.py"] if stem and f"{stem}.py" in files(other) else None
            if rels is None:
                chosen[other] = None
                rels = [r for r in files(other) if r.endswith(".py")]
            elif chosen.get(other, set()) is not None:
                chosen.setdefault(other, set()).update(rels)
            for r in rels:
                if (other, r) not in seen:
                    seen.add((other, r))
                    todo.append((other, r))
    out = []
    for name in [own, *sorted(set(chosen) - {own})]:
        keep = chosen[name]
        out.append((name, {r: b for r, b in files(name).items() if keep is None or r in keep}))
    return out


# scan_idea's answers in this process, by family and file contents: a command prepares an
# idea more than once (arguments first, then to load it), and a scan takes seconds per idea.
_SCANNED: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, knobs.Knob]] = {}


def _scan_idea(files: Mapping[str, bytes], family: str) -> dict[str, knobs.Knob]:
    """``knobs.scan_idea``, answered from this process's earlier scan of the same bytes (a
    refusal is not kept: it is raised again by a fresh scan)."""
    key = (family, tuple(sorted((r, hashlib.sha256(b).hexdigest()) for r, b in files.items())))
    if key not in _SCANNED:
        _SCANNED[key] = knobs.scan_idea(files, family)
    return dict(_SCANNED[key])


def idea_knobs(family: str, folder: str, root: Path | None = None) -> dict[str, knobs.Knob]:
    """{key: Knob} read by the idea's modules and the modules of other ideas it imports
    (``_knob_sources``). Raises LadderError (the scanner's ``file:line`` message) when an idea
    reads the environment outside the knob form, or when two imported modules of different
    ideas read the same key with different types or defaults: one environment variable sets
    both, and a record could not say which default ran. (With the same type and default the
    first idea's site is kept: ``folder`` itself, then the others by number.)"""
    out: dict[str, knobs.Knob] = {}
    where: dict[str, str] = {}
    for name, files in _knob_sources(family, folder, root):
        try:
            found = _scan_idea(files, family)
        except knobs.KnobError as exc:
            raise LadderError(f"ideas/{name}/{exc}") from None
        for key, knob in found.items():
            if key not in out:
                out[key] = knob
                where[key] = name
                continue
            first = out[key]
            if (first.kind, first.default) != (knob.kind, knob.default):
                raise LadderError(
                    f"knob {key} is read by ideas/{where[key]}/{first.file}:{first.line} "
                    f"({first.kind}, default {first.source_default!r}) and by "
                    f"ideas/{name}/{knob.file}:{knob.line} ({knob.kind}, default "
                    f"{knob.source_default!r}), both imported by {folder}: one environment "
                    f"variable sets both, and a record could not say which default ran; give "
                    f"them the same default, or read it in one module and import the name"
                )
    return out


@dataclass
class PreparedIdea:
    """An idea with its knobs applied. env: the variables this call set; module: the
    imported ``kernel`` module (None when not loaded)."""

    family: str
    folder: str
    idea_dir: Path
    family_module: ModuleType
    knobs: dict[str, knobs.Knob]
    env: dict[str, str] = field(default_factory=dict)
    module: ModuleType | None = None

    def knob_values(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """{key: value in effect} under ``environ`` (default os.environ)."""
        return knobs.effective_values(self.knobs, os.environ if environ is None else environ)


def _drop_idea_modules(family: str, folders: Sequence[str]) -> None:
    for folder in folders:
        prefix = paths.idea_module_name(family, folder)
        for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
            del sys.modules[name]


def _check_environment(
    found: Mapping[str, knobs.Knob], given: Mapping[str, str], environ: Mapping[str, str]
) -> None:
    """Refuse a knob set in the environment (not by --knob) to a value its code cannot use:
    one its conversion rejects, a non-finite float, or a bool knob's value other than 0 or 1
    (its code compares with one string, so "true" would quietly read as off), before
    anything is imported or timed."""
    for key in sorted(set(found) - set(given)):
        raw = environ.get(key)
        if raw is None:
            continue
        if found[key].kind == "bool" and raw not in ("0", "1"):
            hint = f" or pass --knob {key}={raw}" if raw in _BOOL_WORDS else ""
            raise LadderError(
                f"{key}={raw!r} in the environment: {key} is a bool knob whose code reads only "
                f"1 as on; set it to 1 or 0 (`export {key}=1`){hint}, or unset it"
            )
        try:
            parse_knob_value(found[key], raw)
        except knobs.KnobError as exc:
            why = str(exc).split(": ", 1)[-1]
            raise LadderError(
                f"{why.split(';')[0]} in the environment; unset it (`unset {key}`)"
            ) from None


def _rule_problem(rule: tuple[str, Any] | None, value: Any) -> str | None:
    """What is wrong with ``value`` under one KNOB_RULES entry (allowed, test), None if
    nothing or no rule: the words ``_check_knob_rules`` refuses with and ``knob_rows`` shows."""
    if rule is None or rule[1](value):
        return None
    return f"must be {rule[0]} (family KNOB_RULES)"


def _check_knob_rules(
    fam: ModuleType,
    found: Mapping[str, knobs.Knob],
    given: Mapping[str, str],
    environ: Mapping[str, str],
) -> None:
    """Refuse a knob value outside the family's KNOB_RULES, from --knob or the environment."""
    rules = getattr(fam, "KNOB_RULES", None) or {}
    for key in sorted(set(found) & set(rules)):
        raw = environ.get(key)
        if raw is None:
            continue
        try:
            value = knobs.parse_value(found[key], raw)
        except knobs.KnobError as exc:
            raise LadderError(f"{key}={raw} in the environment: {exc}") from None
        problem = _rule_problem(rules[key], value)
        if problem:
            where = f"--knob {key}={raw}" if key in given else f"{key}={raw} in the environment"
            fix = "" if key in given else f"; unset it (`unset {key}`)"
            raise LadderError(f"{where}: {key} {problem}{fix}")


def prepare_idea(
    family: str,
    ref: str,
    knob_items: Sequence[str] = (),
    root: Path | None = None,
    *,
    defaults: Mapping[str, str] | None = None,
    load: bool = True,
) -> PreparedIdea:
    """Resolve an idea, validate ``--knob`` items against the knobs it reads, and (with
    ``load``) set them in ``os.environ`` and import its ``kernel`` module (fresh: modules of
    the idea and the ideas it imports are re-imported so the knobs take effect).

    defaults: values for knobs the idea reads that no ``--knob`` sets (the family's
    INTERPRET_KNOBS on the interpreter). Raises UnknownFamily, UnknownIdea, LadderError
    (a knob the idea never reads, a value its conversion rejects) or BadIdea.
    """
    fam = paths.load_family(family, root)
    folder = paths.resolve_idea(family, ref, root)
    found = idea_knobs(family, folder, root)
    _check_defaults(found)
    given = parse_knob_args(knob_items)
    for key, value in list(given.items()):
        if key in found and found[key].kind == "bool" and value in _BOOL_WORDS:
            # records store a bool knob as true/false: take it as the 1/0 the code compares with
            given[key] = value = _BOOL_WORDS[value]
        if key not in found:
            reads = ", ".join(sorted(found)) or "no knobs"
            raise LadderError(
                f"idea {folder} never reads {key} (it reads {reads}); drop --knob {key}={value}"
            )
        try:
            parse_knob_value(found[key], value)
        except knobs.KnobError as exc:
            raise LadderError(f"--knob {key}={value}: {exc}") from None
        if found[key].kind == "bool" and value not in ("0", "1"):
            # The code would quietly read e.g. "true" as off (it compares with one string).
            raise LadderError(
                f"--knob {key}={value}: {key} is a bool knob; give 0 or 1 (or true / false)"
            )
    env = {k: str(v) for k, v in (defaults or {}).items() if k in found and k not in given}
    env.update(given)
    _check_environment(found, given, {**os.environ, **env})
    _check_knob_rules(fam, found, given, {**os.environ, **env})
    prepared = PreparedIdea(
        family=family,
        folder=folder,
        idea_dir=paths.family_dir(family, root) / "ideas" / folder,
        family_module=fam,
        knobs=found,
        env=env,
    )
    if load:
        os.environ.update(env)
        _drop_idea_modules(family, [folder, *related_ideas(family, folder, root)])
        prepared.module = paths.load_idea(family, folder, root)
    return prepared


MAX_SWEEP_POINTS = 64


def sweep_points(items: Sequence[str]) -> list[list[str]]:
    """The points of a knob sweep: ``--knob KEY=v1,v2`` items -> the cartesian product, each
    point a list of ``KEY=VALUE`` items in the order given (the first key varies slowest).
    An item without a comma is a single value. Raises LadderError for an empty value, a
    value listed twice, a key given twice, or more than MAX_SWEEP_POINTS points."""
    import itertools

    keys: list[str] = []
    values: list[list[str]] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not _KEY_RE.match(key):
            raise LadderError(
                f"--knob takes KEY=VALUE or KEY=v1,v2,... with an upper-case key, got {item!r}"
            )
        if key in keys:
            raise LadderError(f"--knob {key} given twice; list its values once: {key}=v1,v2")
        vals = raw.split(",")
        if any(v == "" for v in vals):
            raise LadderError(f"--knob {item}: an empty value in the list; drop the extra comma")
        # true / false are a bool knob's 1 / 0 (a non-bool knob refuses them later)
        same = [_BOOL_WORDS.get(v, v) for v in vals]
        dup = next((v for i, v in enumerate(vals) if same[i] in same[:i]), None)
        if dup is not None:
            raise LadderError(f"--knob {item}: value {dup!r} is listed twice; list it once")
        keys.append(key)
        values.append(vals)
    count = 1
    for vals in values:
        count *= len(vals)
    if count > MAX_SWEEP_POINTS:
        sizes = " x ".join(str(len(v)) for v in values)
        raise LadderError(
            f"the sweep has {count} points ({sizes}), more than {MAX_SWEEP_POINTS}; "
            f"sweep fewer values per bench"
        )
    return [
        [f"{k}={v}" for k, v in zip(keys, combo, strict=True)]
        for combo in itertools.product(*values)
    ]


def knob_rows(
    family: str, ref: str, root: Path | None = None, environ: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Every knob the idea reads (its own modules' and those it imports from other ideas), one
    dict per knob, by key: key, name, type, default, value (in effect under ``environ``,
    default os.environ), set (whether the environment sets it), allowed (the family's
    KNOB_RULES text, or None), where (every ``ideas/<folder>/<file>:<line>`` that reads it,
    joined by ", ") and error (why the environment's value is unusable, else None). Raises
    UnknownFamily, UnknownIdea, or LadderError when an idea reads the environment outside the
    knob form."""
    env = os.environ if environ is None else environ
    fam = paths.load_family(family, root)
    folder = paths.resolve_idea(family, ref, root)
    rules = getattr(fam, "KNOB_RULES", None) or {}
    places: dict[str, list[str]] = {}
    for name, files in _knob_sources(family, folder, root):
        try:
            found = knobs.scan_idea(files, family)
        except knobs.KnobError as exc:
            raise LadderError(f"ideas/{name}/{exc}") from None
        for key, knob in found.items():
            places.setdefault(key, []).append(f"ideas/{name}/{knob.file}:{knob.line}")
    rows = []
    for key, knob in sorted(idea_knobs(family, folder, root).items()):
        raw = env.get(key)
        value: Any = knob.default
        error = None
        if raw is not None:
            try:
                value = parse_knob_value(knob, raw)
            except knobs.KnobError as exc:
                value, error = raw, str(exc).split(": ", 1)[-1]
        rule = rules.get(key)
        if error is None and raw is not None:  # check and bench refuse it: say so here too
            error = _rule_problem(rule, value)
        rows.append(
            {
                "key": key,
                "name": knob.name,
                "type": knob.kind,
                "default": knob.default,
                "value": value,
                "set": raw is not None,
                "allowed": rule[0] if rule else None,
                "where": ", ".join(places[key]),
                "error": error,
            }
        )
    return rows
