"""The build: reads a commit, then composes the passes into the package's bytes.

read (git, :mod:`.source`) -> freeze (:mod:`.freeze`) -> prune (:mod:`.prune`) -> rewrite
imports (:mod:`.imports`) -> format (:mod:`.fmt`) -> provenance (:mod:`.provenance`). It is a
pure function of (git objects at a commit, one bench record, the tool's code, libcst, ruff);
it writes nothing (:mod:`.write` does), so drift can re-run it in memory.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import GlobalScope, MetadataWrapper, PositionProvider, ScopeProvider

from ladder.knobs import Knob, KnobError, KnobSite, scan_idea, scan_module

from .comments import check_fmt_pairs
from .common import VendorError
from .fmt import format_python
from .freeze import Freezer
from .gitread import read_blob, resolve_commit, sha256
from .imports import IdeaImport, ImportResolver, ModKey, rewrite_imports, syntactic_imports
from .provenance import libcst_version, render_provenance, ruff_version, tool_sha256
from .prune import prune
from .source import source_text
from .spec import FamilySpec, unmapped_idea
from .usage import analyse_module


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
class SourceModule:
    key: ModKey
    relpath: str
    source: bytes
    original: cst.Module
    sites: list[KnobSite]
    freezer: Freezer
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
        raise unmapped_idea(spec, idea)
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
    modules: dict[ModKey, SourceModule] = {}
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
            raise unmapped_idea(spec, folder, stem, importer)
        relpath = f"{spec.ideas_dir}/{folder}/{stem}.py"
        source = read_blob(repo, commit, relpath)
        if source is None:
            raise VendorError(f"{relpath} is not in commit {commit[:12]}")
        text = source_text(source, relpath)
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
        freezer = Freezer(wrapper, sites, vals, relpath)
        frozen = original.visit(freezer)
        check_fmt_pairs(text, freezer.dropped, relpath)
        mod = SourceModule(key, relpath, source, original, sites, freezer, frozen, wrapper)

        def where_of(node: cst.CSTNode, _f: Freezer = freezer, _r: str = relpath) -> str:
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
    pruned = still_imported(prune(modules, spec, (idea, "kernel")), (idea, "kernel"), modules)

    package_names = {key: spec.modules[key[0]][key[1]] for key in modules}
    outputs: dict[str, bytes] = {}
    pyproject = read_blob(repo, commit, "pyproject.toml")
    for key, module in pruned.items():
        mod = modules[key]
        rewritten = rewrite_imports(module, mod, resolver, package_names)
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


def still_imported(
    pruned: Mapping[ModKey, cst.Module], root: ModKey, modules: Mapping[ModKey, SourceModule]
) -> dict[ModKey, cst.Module]:
    """The pruned modules ``root`` still imports, directly or through one another. A module
    whose every use was frozen away (imported at the top, used only in a dropped branch)
    is not written: its import was pruned with the last use."""
    seen, todo = {root}, [root]
    while todo:
        key = todo.pop()
        for imp in syntactic_imports(pruned[key], key, modules):
            if imp.target not in seen:
                seen.add(imp.target)
                todo.append(imp.target)
    return {k: m for k, m in pruned.items() if k in seen}


def syntax_error(text: str, relpath: str, exc: cst.ParserSyntaxError) -> str:
    """'relpath:line: syntax error: ...' with Python's own line and message when it has one."""
    try:
        ast.parse(text)
    except SyntaxError as err:
        return f"{relpath}:{err.lineno}: syntax error: {err.msg}"
    return f"{relpath}:{exc.raw_line}: syntax error: {exc.message}"


def modules_value(modules: Mapping[ModKey, SourceModule], key: str) -> Any:
    for mod in modules.values():
        if key in mod.freezer.values:
            return mod.freezer.values[key]
    raise KeyError(key)


def _check_entry_points(main: SourceModule, spec: FamilySpec) -> None:
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


def _check_vanished(mod: SourceModule) -> None:
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


def idea_lookups(
    repo: Path, commit: str, spec: FamilySpec, only: str | None = None
) -> tuple[Callable[[str], str], Callable[[str], tuple | None]]:
    """``(code_sha_of, cases_of)`` for ``ladder.records.winner``, judged at ``commit``: an idea
    folder's code_sha ("" for a folder that cannot be hashed, or that is not ``only``) and
    the cases its kernel.py declares (read statically; None when it cannot be read). Both
    read the folder's files from git once, through one cache."""
    from ladder.codehash import CodeHashError, code_sha, idea_files_at_commit
    from ladder.contract import static_idea_cases

    files: dict[str, dict[str, bytes] | None] = {}

    def files_of(folder: str) -> dict[str, bytes] | None:
        if folder not in files:
            try:
                files[folder] = idea_files_at_commit(repo, commit, f"{spec.ideas_dir}/{folder}")
            except CodeHashError:
                files[folder] = None
        return files[folder]

    def code_sha_of(folder: str) -> str:
        if only is not None and folder != only:
            return ""
        found = files_of(folder)
        return "" if found is None else code_sha(found)

    def cases_of(folder: str) -> tuple | None:
        src = (files_of(folder) or {}).get("kernel.py")
        return None if src is None else static_idea_cases(src)

    return code_sha_of, cases_of
