"""Promote a family's winning idea into the package: ``make vendor FAMILY=cconv``.

    python tools/vendor.py FAMILY [--idea NNN] [--record RECORD_ID] [--commit SHA]
                                  [--dry-run] [--repo PATH]

Takes the family's winner (the promotable record with the best rank score: the prod ratio,
or the geometric mean of the ratios at the family's RANK_SHAPES; its code checked at the
commit) unless ``--idea`` / ``--record`` choose; reads the idea's modules from git at
the commit (HEAD by default); freezes the knobs to the record's values, decides the branches
they settle, drops what became unused (and, in the modules the idea's kernel imports,
what its kept code does not reach), rewrites imports between ideas; and replaces
``package/src/kernel_fun/<family>/_kernels/`` and ``_provenance.py`` with the result, all
files or none. ``--dry-run`` prints the diff and the knob inventory and writes nothing.

Exit status: 0 done, 2 refused (one line on stderr says why and what to do).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import typer  # noqa: E402
import vendorlib as vl  # noqa: E402
from rich.console import Console  # noqa: E402

# rich_markup_mode=None: usage errors print as click's one-line "Error: ...", not in a panel
# that wraps them.
app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0], rich_markup_mode=None)


def select_record(
    repo: Path,
    spec: vl.FamilySpec,
    commit: str,
    idea: str | None,
    record_id: str | None,
) -> tuple[str, str]:
    """(idea folder, record_id) to vendor: the record given, else the winner (of ``idea``
    when given) with code_sha compared at ``commit``. Raises VendorError."""
    from ladder.paths import LadderError
    from ladder.records import NoWinner, load_records, winner

    if record_id is not None:
        matches = [
            folder
            for folder in vl.idea_folders(repo, commit, spec)
            if vl.read_blob(repo, commit, vl.record_relpath(spec, folder, record_id)) is not None
        ]
        if len(matches) == 1:
            _refuse_baseline(spec, matches[0])
        if idea is not None and len(matches) == 1 and matches[0] != idea:
            raise vl.VendorError(
                f"record {record_id} belongs to idea {matches[0]}, not {idea}; drop --idea, "
                f"or pass a record of {idea}"
            )
        if idea is not None:
            matches = [m for m in matches if m == idea]
        if not matches:
            where = f" of {idea}" if idea else ""
            raise vl.VendorError(
                f"record {record_id}{where} is in no idea's records/ at {commit[:12]}: check the "
                f"id (`python -m ladder board {spec.family}` names each idea's records), or "
                "commit the record (or pass --commit)"
            )
        if len(matches) != 1:
            raise vl.VendorError(
                f"record {record_id} is in {len(matches)} ideas' records/ at {commit[:12]} "
                f"({', '.join(matches)}); pass --idea to say which"
            )
        _refuse_baseline(spec, matches[0])
        _check_promoted_cases(repo, spec, commit, matches[0])
        return matches[0], record_id

    if idea is not None:
        _refuse_baseline(spec, idea)
        _check_promoted_cases(repo, spec, commit, idea)  # raises, saying which cases it lacks

    code_sha_of, cases_of = vl.idea_lookups(repo, commit, spec, only=idea)  # only `idea` competes

    try:
        won = winner(
            spec.family, repo, device=spec.target_device, code_sha_of=code_sha_of,
            cases_of=cases_of,
        )  # fmt: skip
    except NoWinner as exc:
        if idea is not None and (idea in exc.lacking or idea in exc.unreadable):
            _check_promoted_cases(repo, spec, commit, idea)  # raises, saying which cases
        if idea is not None:
            _explain_no_record(repo, spec, commit, idea, code_sha_of(idea), load_records, exc)
        raise vl.VendorError(f"no winner for {spec.family} at {commit[:12]}: {exc}") from None
    except LadderError as exc:
        raise vl.VendorError(str(exc)) from None
    return won.idea, won.record["record_id"]


def _check_promoted_cases(repo: Path, spec: vl.FamilySpec, commit: str, idea: str) -> None:
    """Refuse an idea that lacks a case of the family's PROMOTE_CASES (its CASES read at
    ``commit``), as the winner rule does."""
    from ladder.contract import missing_promote_cases, promote_cases
    from ladder.paths import LadderError, load_family

    try:
        required = promote_cases(load_family(spec.family, repo))
    except LadderError as exc:
        raise vl.VendorError(str(exc)) from None
    if not required:
        return
    declared = vl.idea_lookups(repo, commit, spec)[1](idea)
    if declared is None:
        raise vl.VendorError(
            f"idea {idea}'s kernel.py declares CASES that cannot be read statically (a literal "
            f"tuple of strings); family {spec.family} promotes only ideas with every case of "
            "its PROMOTE_CASES (family.py)"
        )
    missing = missing_promote_cases(required, declared)
    if missing:
        raise vl.VendorError(
            f"idea {idea} lacks case(s) {', '.join(missing)}; family {spec.family} promotes "
            "only ideas with every case of its PROMOTE_CASES (family.py)"
        )


def _refuse_baseline(spec: vl.FamilySpec, idea: str) -> None:
    """Refuse the family's baseline idea (000-*: fla's own op, benched for comparison)."""
    if idea[:3] == "000":
        raise vl.VendorError(
            f"{idea} is family {spec.family}'s baseline (fla's own op, benched only to compare "
            "against): it is never vendored; name another idea, or none for the winner"
        )


def _explain_no_record(
    repo: Path,
    spec: vl.FamilySpec,
    commit: str,
    idea: str,
    current: str,
    load_records: Any,
    why: Exception | None = None,
) -> None:
    """Raise the most useful refusal for an idea without a promotable record (``why``: the
    ladder's own reason, quoted when the idea's records are current)."""
    recs = [r for r in load_records(spec.family, repo) if r["idea"] == idea]
    good = [r for r in recs if r["status"] == "passed" and not r["dirty"]]
    stale = [r for r in good if r["code_sha"] != current]
    if good and len(stale) == len(good):
        last = stale[-1]
        raise vl.VendorError(
            f"record {last['record_id']} of {idea} was benched on code {last['code_sha'][:12]}, "
            f"but the idea's code at {commit[:12]} is {current[:12]}; re-bench it: "
            f"{vl.rebench_hint(spec, idea)}"
        )
    target = spec.target_device.lower()
    if good and not any(target in r["device"]["name"].lower() for r in good):
        devices = sorted({r["device"]["name"] for r in good})
        raise vl.VendorError(
            f"idea {idea}'s {len(good)} passed record(s) are on {', '.join(devices)}, none on "
            f"the family's target device {spec.target_device!r} (TARGET_DEVICE in "
            f"ladder/kernels/{spec.family}/family.py); bench it there: "
            f"{vl.rebench_hint(spec, idea)}"
        )
    if good and why is not None:
        reason = str(why).replace("<idea>", idea[:3])
        raise vl.VendorError(
            f"idea {idea} has no promotable record; the winner rule, over every {spec.family} "
            f"record, says: {reason}"
        )
    raise vl.VendorError(
        f"idea {idea} has no promotable record ({len(recs)} records, {len(good)} passed on a "
        f"clean tree, device {spec.target_device!r} needed); bench it: "
        f"{vl.rebench_hint(spec, idea)}"
    )


def check_clean_reads(repo: Path, reads: list[str]) -> None:
    """Refuse when a path the vendor reads has uncommitted changes or untracked files."""
    dirty = vl.dirty_paths(repo, reads)
    if dirty:
        raise vl.VendorError(
            f"{dirty[0]} has uncommitted changes ({len(dirty)} path(s) the vendor reads); "
            "commit or discard them first"
        )


def check_clean(repo: Path, spec: vl.FamilySpec, result: vl.VendorResult) -> None:
    """Refuse when what vendor reads or writes has uncommitted changes.

    Read: the idea folder, family.py and every idea module vendored. Written: ``_kernels/``
    and ``_provenance.py``; their uncommitted state is accepted only when it is exactly a
    previous vendor's output (the files match the ``OUTPUT_FILES`` of the ``_provenance.py``
    beside them), so a second run before committing works and hand edits are never lost.
    """
    check_clean_reads(
        repo, [f"{spec.ideas_dir}/{result.idea}", f"{spec.family_dir}/family.py", *result.sources]
    )
    dirty = vl.dirty_paths(repo, [spec.kernels_dir, spec.provenance_path])
    if not dirty:
        return
    on_disk = vl.current_outputs(repo, spec)
    recorded: dict[str, str] | None = None
    if spec.provenance_path in on_disk:
        try:
            prov = vl.parse_provenance(on_disk[spec.provenance_path], spec.provenance_path)
            recorded = prov["OUTPUT_FILES"]
        except vl.VendorError:
            recorded = None
    files = {p: vl.content_sha256(b) for p, b in on_disk.items() if p != spec.provenance_path}
    if recorded is None or files != recorded:
        bad = dirty
        if recorded is not None:
            bad = sorted(p for p in set(files) | set(recorded) if files.get(p) != recorded.get(p))
        path = bad[0]
        if vl.read_blob(repo, "HEAD", path) is not None:
            discard = f"`git checkout -- {path}`"
        elif recorded is not None and path not in recorded:
            discard = f"`rm {path}`"
        else:  # an edit of an output that was never committed
            discard = f"`rm -r {spec.kernels_dir} {spec.provenance_path}` and vendor again"
        raise vl.VendorError(
            f"{path} has uncommitted changes that the vendor did not make; commit or "
            f"discard them first ({discard}; the vendor replaces these files)"
        )


def print_inventory(console: Console, result: vl.VendorResult) -> None:
    """The knob inventory: key, module-level name, frozen value, source (record/default)."""
    console.print(f"knobs frozen from record {result.record_id}:", markup=False)
    rows = [
        (row.key, row.name, repr(row.value), row.source, row.file.split("/ideas/", 1)[-1])
        for row in result.inventory
    ]
    if not rows:
        console.print("  (the vendored code reads no knobs)", markup=False)
    widths = [max(len(r[i]) for r in rows) for i in range(4)] if rows else []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:4], widths, strict=True)]
        console.print("  " + "  ".join([*cells, r[4]]).rstrip(), markup=False)


def _vendored_part(spec: vl.FamilySpec, used: set[tuple[str, str]] | None) -> tuple:
    """The part of a FamilySpec one vendor output depends on: FAMILY, ENTRY_POINTS,
    TARGET_DEVICE, the package, and the VENDOR map entries of the (idea, module) pairs the
    output was built from (all of them when ``used`` is None). Another idea's entry does
    not count: adding one changes no vendored byte."""
    modules = spec.modules
    if used is not None:
        modules = {
            f: {m: n for m, n in mods.items() if (f, m) in used} for f, mods in modules.items()
        }
        modules = {f: mods for f, mods in modules.items() if mods}
    return (spec.family, spec.entry_points, spec.package, spec.target_device, modules)


def spec_commit(
    repo: Path, head: str, spec: vl.FamilySpec, used: set[tuple[str, str]] | None = None
) -> str | None:
    """The newest commit at or before ``head`` that changed what the vendor reads from
    family.py for this output (the FamilySpec as ``_vendored_part`` narrows it to the
    (idea, module) pairs in ``used``); edits to the rest of the file (shapes, tolerances, the
    baseline, the oracle) and map entries of other ideas do not count. None when git has no
    history of the file."""
    rel = f"{spec.family_dir}/family.py"
    for commit in vl.git(repo, "log", "--format=%H", head, "--", rel).decode().split():
        try:
            now = vl.load_family_spec(repo, commit, spec.family)
        except vl.VendorError:
            return commit  # unreadable then: count it as a change, to be safe
        try:
            before = vl.load_family_spec(repo, f"{commit}^", spec.family)
        except vl.VendorError:
            return commit  # the first commit of the file (or of the repository)
        if _vendored_part(now, used) != _vendored_part(before, used):
            return commit
    return None


def inputs_commit(repo: Path, head: str, spec: vl.FamilySpec, result: vl.VendorResult) -> str:
    """The newest commit at or before ``head`` that changed anything the output depends on:
    the vendored source modules, the winning record, pyproject.toml (ruff's configuration)
    and the FamilySpec literals of family.py that this output reads (see spec_commit)."""
    paths = [*sorted(result.sources), result.record_path, "pyproject.toml"]
    found = vl.git(repo, "log", "-1", "--format=%H", head, "--", *paths).decode().strip()
    if not found:
        raise vl.VendorError(f"cannot find the commit that last changed {paths[0]}")
    prefix = f"{spec.ideas_dir}/"
    used = {
        (rel[len(prefix) :].split("/")[0], Path(rel).stem)
        for rel in result.sources
        if rel.startswith(prefix)
    }
    family_change = spec_commit(repo, head, spec, used)
    if family_change is None or family_change == found:
        return found

    def is_ancestor(a: str, b: str) -> bool:  # git exits 1 for "no", which vl.git raises
        try:
            vl.git(repo, "merge-base", "--is-ancestor", a, b)
        except vl.VendorError:
            return False
        return True

    if is_ancestor(family_change, found):
        return found
    if is_ancestor(found, family_change):
        return family_change
    return head  # unrelated branches: no older commit is known to hold the same inputs


def _not_committed(repo: Path, sha: str, commit: str, what: str) -> vl.VendorError:
    """`what` is in the working tree but not at `sha`: uncommitted, or committed only later
    than the commit asked for."""
    import subprocess

    log = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%H", "--", what],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if log.returncode == 0 and log.stdout.strip():
        return vl.VendorError(
            f"{what} does not exist at {commit} ({sha[:12]}); it was committed later (last "
            f"changed in {log.stdout.strip()[:12]}): vendor from a commit that has it"
        )
    return vl.VendorError(
        f"{what} is in the working tree but not committed; the vendor reads git objects at "
        f"{commit} ({sha[:12]}), so commit it first"
    )


def load_spec(repo: Path, sha: str, commit: str, family: str) -> vl.FamilySpec:
    """The FamilySpec at ``sha``; a family.py that exists only in the working tree is
    refused as uncommitted. Raises VendorError."""
    try:
        return vl.load_family_spec(repo, sha, family)
    except vl.VendorError:
        rel = f"ladder/kernels/{family}/family.py"
        if vl.read_blob(repo, sha, rel) is None and (repo / rel).is_file():
            raise _not_committed(repo, sha, commit, rel) from None
        raise


def resolve_idea(repo: Path, sha: str, commit: str, spec: vl.FamilySpec, ref: str) -> str:
    """The idea folder ``ref`` names at ``sha``; one that exists only in the working tree is
    refused as uncommitted. Raises VendorError."""
    try:
        return vl.resolve_idea_ref(repo, sha, spec, ref)
    except vl.VendorError:
        ideas = repo / spec.ideas_dir
        on_disk = sorted(p.name for p in ideas.iterdir() if p.is_dir()) if ideas.is_dir() else []
        ref = ref.strip()
        for name in on_disk:
            if ref in (name, name[4:]) or (
                ref.isascii() and ref.isdigit() and name[:3].isdigit() and int(name[:3]) == int(ref)
            ):
                if name not in vl.idea_folders(repo, sha, spec):
                    raise _not_committed(
                        repo, sha, commit, f"idea {spec.ideas_dir}/{name}"
                    ) from None
        raise


@app.command()
def main(
    family: Annotated[str, typer.Argument(help="family to vendor, e.g. cconv")],
    idea: Annotated[
        str | None, typer.Option("--idea", help="vendor this idea's best record, not the winner")
    ] = None,
    record: Annotated[
        str | None, typer.Option("--record", help="vendor exactly this record_id")
    ] = None,
    commit: Annotated[str, typer.Option("--commit", help="read sources at this commit")] = "HEAD",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the diff and the knobs; write nothing")
    ] = False,
    repo: Annotated[
        Path, typer.Option("--repo", help="repository root (default: this checkout)")
    ] = vl.TOOL_ROOT,
) -> None:
    """Vendor FAMILY's winner (or --idea / --record) into package/src/kernel_fun/FAMILY/."""
    out = Console(soft_wrap=True, highlight=False)
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    try:
        repo = repo.resolve()
        vl.check_repo(repo)
        sha = vl.resolve_commit(repo, commit)
        if commit == "HEAD" and vl.is_shallow(repo):
            raise vl.VendorError(
                "this clone is shallow: the vendor pins SOURCE_COMMIT to the last commit that "
                "changed an input, which needs the history; run `git fetch --unshallow` first"
            )
        spec = load_spec(repo, sha, commit, family)
        folder = resolve_idea(repo, sha, commit, spec, idea) if idea is not None else None
        if folder is not None:
            _refuse_baseline(spec, folder)
        if folder is not None and folder not in spec.modules:
            raise vl.unmapped_idea(spec, folder)
        chosen, record_id = select_record(repo, spec, sha, folder, record)
        check_clean_reads(repo, [f"{spec.ideas_dir}/{chosen}", f"{spec.family_dir}/family.py"])
        result = vl.build(repo, spec, sha, chosen, record_id)
        if commit == "HEAD":
            # Pin the output to the last commit that changed an input, so re-vendoring at a
            # later HEAD whose inputs are the same gives the same bytes (SOURCE_COMMIT too).
            pinned = inputs_commit(repo, sha, spec, result)
            if pinned != sha:
                sha = pinned
                result = vl.build(repo, spec, sha, chosen, record_id)
        check_clean(repo, spec, result)
        # compared as text with LF line endings: a CRLF checkout (core.autocrlf) is no change
        before = {p: vl.normalise_newlines(b) for p, b in vl.current_outputs(repo, spec).items()}
        if dry_run:
            diff = vl.unified_diff(before, result.outputs)
            out.out(diff if diff else "no changes: the package already is this vendor output")
            print_inventory(out, result)
            return
        try:
            vl.write_outputs(repo, spec, result.outputs)
        except OSError as exc:
            raise vl.VendorError(f"writing failed, the package is as it was: {exc}") from exc
    except vl.VendorError as exc:
        err.print(f"vendor: {exc}", markup=False)
        raise typer.Exit(2) from None
    changed = sorted(
        p for p in set(before) | set(result.outputs) if before.get(p) != result.outputs.get(p)
    )
    out.print(
        f"vendored {family} from {result.idea} record {result.record_id} at {sha[:12]}: "
        f"{len(changed)} file(s) changed",
        markup=False,
    )
    for path in changed:
        out.print(f"  {path}", markup=False)


if __name__ == "__main__":
    app()
