"""Is the package exactly what the vendor makes of its recorded source? ``make drift``.

    python tools/drift.py [--strict] [--json] [--family F ...] [--repo PATH]

For each family with a ``package/src/kernel_fun/<family>/_provenance.py`` (read with
``ast.literal_eval``, never imported) three conditions are checked, offline, from local git
objects:

- stale: a source file at HEAD differs from SOURCE_FILES, or the family's winner at HEAD is
  another record. Advisory: exit 0, unless ``--strict``. A family with neither a
  _provenance.py nor files in ``_kernels/`` is reported "not vendored" (advisory too).
- tampered: a file of ``_kernels/`` differs from OUTPUT_FILES (or is missing, or is not a
  vendor output); ``_kernels/`` holds files but _provenance.py is missing; a ``.vendor-*``
  staging folder was left in the package folder; or a bench record was rewritten or deleted
  (records are append-only): the vendored record's bytes at HEAD are not RECORD["sha256"],
  or a committed record differs between SOURCE_COMMIT and HEAD. Always fatal.
- not reproducible: re-running the vendor in memory on the sources at SOURCE_COMMIT with the
  recorded record does not give the recorded outputs. Always fatal.

Exit status: 0 clean, 1 drift, 2 usage or configuration error (e.g. a corrupt
_provenance.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import typer  # noqa: E402
import vendorlib as vl  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

# rich_markup_mode=None: usage errors print as click's one-line "Error: ...", not in a panel
# that wraps them.
app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0], rich_markup_mode=None)


@dataclass
class FamilyReport:
    """Drift of one family. status: clean | stale | drift | not vendored | error."""

    family: str
    vendored: bool = False
    source_commit: str | None = None
    record: dict[str, str] | None = None
    stale: list[str] = field(default_factory=list)
    tampered: list[str] = field(default_factory=list)
    not_reproducible: list[str] = field(default_factory=list)
    error: str | None = None
    problem: str | None = None  # why an unvendored family cannot be vendored yet (advisory)
    winner: str | None = None  # an unvendored family's promotable winner at HEAD, if any
    unreadable: bool = False  # family.py at HEAD cannot be read as a family spec

    @property
    def status(self) -> str:
        if self.error:
            return "error"
        if self.tampered or self.not_reproducible:
            return "drift"
        if not self.vendored:
            return "not vendored"
        return "stale" if self.stale else "clean"

    def exit_code(self, strict: bool) -> int:
        if self.error:
            return 2
        if self.tampered or self.not_reproducible:
            return 1
        # Not vendored is fatal under --strict only when there is a winner to vendor: a family
        # whose ideas do not beat the baseline yet has nothing to release.
        if strict and (self.stale or (not self.vendored and (self.winner or self.unreadable))):
            return 1
        return 0


def families_in(repo: Path, head: str) -> list[str]:
    """Families with a family.py at HEAD or a _provenance.py on disk, sorted."""
    names = {
        name
        for name, kind in vl.list_tree(repo, head, "ladder/kernels")
        if kind == "tree" and vl.read_blob(repo, head, f"ladder/kernels/{name}/family.py")
    }
    pkg = repo / "package" / "src" / "kernel_fun"
    if pkg.is_dir():
        names |= {p.parent.name for p in pkg.glob("*/_provenance.py")}
    return sorted(names)


def check_family(repo: Path, head: str, family: str) -> FamilyReport:
    """The drift conditions of one family (see the module docstring)."""
    report = FamilyReport(family=family)
    try:
        spec = vl.load_family_spec(repo, head, family)
    except vl.VendorError as exc:
        committed = vl.read_blob(repo, head, f"ladder/kernels/{family}/family.py") is not None
        if not committed or _anything_vendored(repo, head, family):
            report.error = f"{exc} (HEAD)"
        else:  # a family being set up: nothing to check yet, and no reason to stop the others
            report.problem = f"{exc} (HEAD)"
            report.unreadable = True
        return report
    for rel in vl.staging_leftovers(repo, spec):
        report.tampered.append(
            f"{rel} is left over from a vendor run that was killed while writing; remove "
            f"{rel} (`rm -r {rel}`)"
        )
    prov_path = repo / spec.provenance_path
    if prov_path.is_symlink() or (prov_path.exists() and not prov_path.is_file()):
        report.error = (
            f"{spec.provenance_path} is not a regular file; restore it "
            f"(`git checkout -- {spec.provenance_path}`) or re-vendor (`make vendor "
            f"FAMILY={family}`)"
        )
        return report
    if not prov_path.is_file():
        orphans = sorted(vl.current_outputs(repo, spec))
        if orphans:
            report.tampered.append(_orphans_note(repo, head, spec, orphans))
        elif vl.read_blob(repo, head, spec.provenance_path) is not None:
            # vendored at HEAD, and both the kernels and the provenance deleted since
            report.tampered.append(
                f"{spec.provenance_path} and {spec.kernels_dir}/ are committed at HEAD but "
                f"missing here; restore them with `git checkout -- {spec.provenance_path} "
                f"{spec.kernels_dir}`, or re-vendor with `make vendor FAMILY={family}`"
            )
        else:
            report.winner, report.problem = _unvendored_winner(repo, head, spec)
        return report
    report.vendored = True
    prov_bytes = prov_path.read_bytes()
    try:
        prov = vl.parse_provenance(prov_bytes, spec.provenance_path)
    except vl.VendorError as exc:
        report.error = (
            f"{exc}; restore it (`git checkout -- {spec.provenance_path}`) or re-vendor "
            f"(`make vendor FAMILY={family}`)"
        )
        return report
    commit = prov["SOURCE_COMMIT"]
    record = prov["RECORD"]
    report.source_commit = commit
    report.record = {k: record[k] for k in ("idea", "record_id", "sha256")}
    restore = (
        f"restore with `make vendor FAMILY={family} COMMIT={commit}` (exactly: `python "
        f"tools/vendor.py {family} --commit {commit} --record {record['record_id']}`) or "
        f"re-vendor with `make vendor FAMILY={family}`"
    )

    # tampered: the files on disk against OUTPUT_FILES (and against HEAD, for the hint)
    on_disk = vl.current_outputs(repo, spec)
    on_disk.pop(spec.provenance_path, None)
    for path, want in sorted(prov["OUTPUT_FILES"].items()):
        at_head = vl.read_blob(repo, head, path)
        if path not in on_disk:
            hint = f"restore it with `git checkout -- {path}`" if at_head is not None else restore
            report.tampered.append(f"{path} is missing; {hint}")
        elif vl.content_sha256(on_disk[path]) != want:
            report.tampered.append(
                f"{path} differs from what the vendor wrote; "
                + _edit_hint(spec, path, at_head, on_disk[path], want, restore)
            )
    for path in sorted(set(on_disk) - set(prov["OUTPUT_FILES"])):
        tracked = vl.read_blob(repo, head, path) is not None
        how = f"`git rm {path}`" if tracked else f"`rm {path}`"
        report.tampered.append(f"{path} is not a vendor output; remove it ({how}) or re-vendor")

    # stale: sources at HEAD, and the winner at HEAD
    for path, want in sorted(prov["SOURCE_FILES"].items()):
        blob = vl.read_blob(repo, head, path)
        if blob is None:
            report.stale.append(
                f"{path} is gone at HEAD; re-vendor (`make vendor FAMILY={family}`)"
            )
        elif vl.sha256(blob) != want:
            report.stale.append(
                f"{path} changed since {commit[:12]}; bench it and re-vendor "
                f"(`make vendor FAMILY={family}`)"
            )
    stale_winner = _winner_note(repo, head, spec, record)
    if stale_winner:
        report.stale.append(stale_winner)

    try:
        vl.resolve_commit(repo, commit)
    except vl.VendorError:
        report.error = (
            f"SOURCE_COMMIT {commit[:12]} is not in the local git objects; fetch the full "
            "history (`git fetch --unshallow`)"
        )
        return report

    fix = f"re-vendor (`make vendor FAMILY={family}`)"
    prov_at_head = vl.read_blob(repo, head, spec.provenance_path)
    if prov_at_head is None or vl.normalise_newlines(prov_at_head) != vl.normalise_newlines(
        prov_bytes
    ):
        fix = (
            f"{spec.provenance_path} has uncommitted changes: discard them with "
            f"`git checkout -- {spec.provenance_path}`, or {fix}"
        )

    # tampered: _provenance.py itself first (a hand edit there is not the record's fault)
    blame = _provenance_notes(repo, spec, commit, prov, prov_bytes, fix)
    if blame:
        report.tampered.extend(blame)
        return report

    # tampered: records are append-only, the vendored one above all
    try:
        report.tampered.extend(_record_notes(repo, head, spec, commit, record))
    except vl.VendorError as exc:
        report.error = f"cannot compare the records at {commit[:12]} and HEAD: {exc}"
        return report

    # not reproducible: the vendor again, in memory, at SOURCE_COMMIT
    try:
        spec_then = vl.load_family_spec(repo, commit, family)
        result = vl.build(repo, spec_then, commit, record["idea"], record["record_id"])
    except vl.VendorError as exc:
        report.not_reproducible.append(f"the vendor at {commit[:12]} refuses: {exc}; {fix}")
        return report
    again = result.provenance
    note = _tool_note(prov["VENDOR"], again["VENDOR"])
    for key in ("RECORD", "KNOBS", "SOURCE_FILES"):
        if again[key] != prov[key]:
            report.not_reproducible.append(
                f"{key} at {commit[:12]} is {json.dumps(again[key], sort_keys=True)}, "
                f"recorded {json.dumps(prov[key], sort_keys=True)}{note}; {fix}"
            )
    for path in sorted(set(again["OUTPUT_FILES"]) | set(prov["OUTPUT_FILES"])):
        got, want = again["OUTPUT_FILES"].get(path), prov["OUTPUT_FILES"].get(path)
        if got != want:
            what = "not produced" if got is None else "not recorded" if want is None else "differs"
            report.not_reproducible.append(
                f"{path}: the vendor at {commit[:12]} gives other bytes ({what}){note}; {fix}"
            )
    return report


def _anything_vendored(repo: Path, head: str, family: str) -> bool:
    """Whether the family has vendored files on disk or at HEAD (by the layout's default
    package folder, for a family whose family.py cannot be read)."""
    pkg = f"package/src/kernel_fun/{family}"
    if (repo / pkg / "_provenance.py").exists() or vl.read_blob(
        repo, head, f"{pkg}/_provenance.py"
    ):
        return True
    kernels = repo / pkg / "_kernels"
    return kernels.is_dir() and any(
        p.is_file() and "__pycache__" not in p.parts for p in kernels.rglob("*")
    )


def _provenance_notes(
    repo: Path, spec: vl.FamilySpec, commit: str, prov: dict[str, Any], data: bytes, fix: str
) -> list[str]:
    """Why _provenance.py is not what the vendor wrote ([] when nothing shows): its text is
    not what the vendor renders from its own values, or RECORD names a record that
    SOURCE_COMMIT does not hold (or holds with other bytes), which the vendor never writes."""
    path = spec.provenance_path
    rendered = vl.render_provenance(prov, spec, vl.read_blob(repo, commit, "pyproject.toml"))
    if rendered != vl.normalise_newlines(data):
        return [f"{path} is not what the vendor writes for its own values (edited by hand); {fix}"]
    record = prov["RECORD"]
    rel = vl.record_relpath(spec, record["idea"], record["record_id"])
    then = vl.read_blob(repo, commit, rel)
    if then is None:
        return [
            f"{path} names record {record['record_id']} ({rel}), which SOURCE_COMMIT "
            f"{commit[:12]} does not hold: RECORD was edited by hand; {fix}"
        ]
    if vl.sha256(then) != record["sha256"]:
        return [
            f"{path} gives RECORD['sha256'] {record['sha256'][:12]}, but record "
            f"{record['record_id']} at SOURCE_COMMIT {commit[:12]} is {vl.sha256(then)[:12]}: "
            f"RECORD was edited by hand; {fix}"
        ]
    return []


def _orphans_note(repo: Path, head: str, spec: vl.FamilySpec, orphans: list[str]) -> str:
    """Why files in _kernels/ without a _provenance.py are tampering, and how to restore."""
    prov = spec.provenance_path
    shown = ", ".join(orphans[:3]) + (f" and {len(orphans) - 3} more" if len(orphans) > 3 else "")
    if vl.read_blob(repo, head, prov) is not None:
        how = (
            f"restore it with `git checkout -- {prov}`, or re-vendor with "
            f"`make vendor FAMILY={spec.family}`"
        )
    else:
        how = (
            f"re-vendor with `make vendor FAMILY={spec.family}` (or restore {prov} with "
            f"`git checkout <commit> -- {prov}` from the commit that last had it)"
        )
    return (
        f"{prov} is missing, but {spec.kernels_dir}/ holds {len(orphans)} file(s) ({shown}) "
        f"that nothing vouches for; {how}"
    )


def _edit_hint(
    spec: vl.FamilySpec, path: str, at_head: bytes | None, data: bytes, want: str, restore: str
) -> str:
    """How to undo an edit of a vendored file: git for an uncommitted one, the vendor for a
    committed one (the vendor refuses to overwrite edits it did not make)."""
    if at_head is not None and vl.normalise_newlines(at_head) == vl.normalise_newlines(data):
        return restore  # the edit is committed
    if at_head is None:
        return (
            f"the vendor output was never committed: delete {spec.kernels_dir}/ and "
            f"{spec.provenance_path}, then re-vendor (`make vendor FAMILY={spec.family}`)"
        )
    if vl.sha256(at_head) == want:
        return f"discard the uncommitted edit with `git checkout -- {path}`"
    return f"discard the uncommitted edit (`git checkout -- {path}`), then {restore}"


RECORDS_GLOB = "ladder/kernels/*/ideas/*/records/*.json"


def _record_notes(
    repo: Path, head: str, spec: vl.FamilySpec, commit: str, record: dict[str, str]
) -> list[str]:
    """Records are written once: the vendored record at HEAD (and on disk) must be the bytes
    RECORD["sha256"] names, and no committed record may differ between SOURCE_COMMIT and HEAD
    (modified or deleted; new records are fine)."""
    notes: list[str] = []
    rid = record["record_id"]
    rel = vl.record_relpath(spec, record["idea"], rid)
    then = f"records are append-only: restore it with `git checkout {commit} -- {rel}`"
    at_head = vl.read_blob(repo, head, rel)
    if at_head is None:
        notes.append(f"record {rid} ({rel}) is gone at HEAD after it was vendored; {then}")
    elif vl.sha256(at_head) != record["sha256"]:
        notes.append(f"record {rid} ({rel}) was rewritten after it was vendored; {then}")
    else:
        path = repo / rel
        if not path.is_file():
            notes.append(
                f"record {rid} ({rel}) is deleted in the working tree; records are "
                f"append-only: restore it with `git checkout -- {rel}`"
            )
        elif vl.normalise_newlines(path.read_bytes()) != vl.normalise_newlines(at_head):
            notes.append(
                f"record {rid} ({rel}) has uncommitted changes; records are append-only: "
                f"restore it with `git checkout -- {rel}`"
            )
    out = vl.git(
        repo, "diff", "--name-status", "--no-renames", "-z", commit, head, "--", RECORDS_GLOB
    )
    items = [i.decode("utf-8") for i in out.split(b"\0") if i]
    vendored_reported = bool(notes)
    for status, path in zip(items[::2], items[1::2], strict=True):
        if status == "A" or (path == rel and vendored_reported):
            continue
        what = "deleted" if status == "D" else "rewritten"
        notes.append(
            f"record {path} was {what} after {commit[:12]} (SOURCE_COMMIT); records are "
            f"append-only: restore it with `git checkout {commit} -- {path}`"
        )
    return notes


def _winner_note(repo: Path, head: str, spec: vl.FamilySpec, record: dict[str, str]) -> str:
    """'' when the vendored record is still the family's winner at HEAD, else why not."""
    from ladder.paths import LadderError
    from ladder.records import NoWinner, score_text, winner

    code_sha_of, cases_of = vl.idea_lookups(repo, head, spec)
    try:
        won = winner(
            spec.family, repo, device=spec.target_device, code_sha_of=code_sha_of,
            cases_of=cases_of,
        )  # fmt: skip
    except NoWinner as exc:
        return f"no winner at HEAD ({exc})"
    except LadderError as exc:
        return f"cannot rank the records at HEAD: {exc}"
    if won.record["record_id"] == record["record_id"]:
        return ""
    return (
        f"the winner at HEAD is {won.idea} record {won.record['record_id']} "
        f"({score_text(won.score, won.rank_shapes)}), not the vendored {record['idea']} "
        f"record {record['record_id']}; re-vendor (`make vendor FAMILY={spec.family}`)"
    )


def _unvendored_winner(repo: Path, head: str, spec: vl.FamilySpec) -> tuple[str | None, str | None]:
    """(winner, None) when a family with nothing vendored has a promotable winner at HEAD
    ("<idea> record <id>"), else (None, why there is none)."""
    from ladder.paths import LadderError
    from ladder.records import NoWinner, winner

    code_sha_of, cases_of = vl.idea_lookups(repo, head, spec)
    try:
        won = winner(
            spec.family, repo, device=spec.target_device, code_sha_of=code_sha_of,
            cases_of=cases_of,
        )  # fmt: skip
    except NoWinner as exc:
        return None, f"nothing to vendor yet: {exc}"
    except LadderError as exc:
        return None, f"cannot rank the records at HEAD: {exc}"
    return f"{won.idea} record {won.record['record_id']}", None


def _tool_note(then: dict[str, Any], now: dict[str, Any]) -> str:
    changed = [k for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k)]
    if not changed:
        return ""
    return (
        " (the vendor itself differs from the one that wrote it: "
        + ", ".join(f"{k} {str(then.get(k))[:12]} -> {str(now.get(k))[:12]}" for k in changed)
        + ")"
    )


def render(console: Console, reports: list[FamilyReport], strict: bool, code: int) -> None:
    """The human table, then one line per finding."""
    table = Table(title="drift: package vs. vendored source")
    for col in ("family", "status", "stale", "tampered", "reproducible"):
        table.add_column(col, no_wrap=True)
    for r in reports:
        checked = r.vendored and not r.error
        table.add_row(
            r.family,
            r.status,
            ("yes" if r.stale else "no") if checked else "n/a",
            "YES" if r.tampered else "no" if checked else "n/a",
            ("NO" if r.not_reproducible else "yes") if checked else "n/a",
        )
    console.print(table)
    for r in reports:
        if r.record and r.source_commit:
            console.print(
                f"{r.family}: vendored from {r.record['idea']} record {r.record['record_id']} "
                f"at {r.source_commit}",
                markup=False,
            )
        if r.error:
            console.print(f"{r.family}: error: {r.error}", markup=False)
        if r.status == "not vendored" and r.problem:
            console.print(f"{r.family}: not vendored: {r.problem}", markup=False)
        elif r.status == "not vendored":
            console.print(
                f"{r.family}: not vendored (`make vendor FAMILY={r.family}`)", markup=False
            )
        for label, items in (
            ("tampered", r.tampered),
            ("not reproducible", r.not_reproducible),
            ("stale", r.stale),
        ):
            for item in items:
                console.print(f"{r.family}: {label}: {item}", markup=False)
    verdict = {0: "clean", 1: "drift", 2: "error"}[code]
    console.print(f"drift: {verdict}{' (strict)' if strict else ''}", markup=False)


@app.command()
def main(
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="stale is fatal too, and so is a family not vendored that has a winner or an "
            "unreadable family.py",
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="print JSON, not a table")] = False,
    family: Annotated[
        list[str] | None, typer.Option("--family", help="check only this family (repeatable)")
    ] = None,
    repo: Annotated[
        Path, typer.Option("--repo", help="repository root (default: this checkout)")
    ] = vl.TOOL_ROOT,
) -> None:
    """Check every vendored family (or --family) for stale, tampered, not reproducible."""
    console = Console(soft_wrap=True, highlight=False)
    repo = repo.resolve()
    try:
        vl.check_repo(repo)
        head = vl.resolve_commit(repo, "HEAD")
        names = list(family) if family else families_in(repo, head)
    except vl.VendorError as exc:
        Console(stderr=True, soft_wrap=True, highlight=False).print(f"drift: {exc}", markup=False)
        raise typer.Exit(2) from None
    if not names:
        Console(stderr=True, soft_wrap=True, highlight=False).print(
            f"drift: no families in {repo} (no ladder/kernels/<family>/family.py at HEAD and "
            "no package/src/kernel_fun/<family>/_provenance.py); is --repo the repository root?",
            markup=False,
        )
        raise typer.Exit(2)
    reports = [check_family(repo, head, name) for name in names]
    code = max((r.exit_code(strict) for r in reports), default=0)
    if json_out:
        payload = {
            "strict": strict,
            "exit_code": code,
            "head": head,
            "families": [{**asdict(r), "status": r.status} for r in reports],
        }
        console.out(json.dumps(payload, indent=2, sort_keys=True))
    else:
        render(console, reports, strict, code)
    raise typer.Exit(code)


if __name__ == "__main__":
    app()
