"""Reading records back: find one by id or path, show it, compare two.

``ladder show`` prints one record per shape: the errors against the fp64 oracle (candidate,
baseline, their ratio), and per direction the candidate and baseline medians in ms, the
ratio baseline / candidate, the candidate's bandwidth (min_bytes / median, TB/s) and its
fraction of the copy ceiling measured in the same run.

``ladder compare`` puts two records side by side, shape by shape (only shapes both have,
timed in both): each side's candidate median per direction and ``b / a`` of those times
(< 1: b is faster). An idea stands for its best record on the device (the board's choice:
best promotable by the family's rank score, else best passed, else latest). Records made
on different devices, stack versions or harness code are said to be so: their times are
not comparable to the last digit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ladder import paths, records
from ladder.paths import LadderError

__all__ = ["compare", "find_record", "rank_line", "render_compare", "render_show", "resolve_side"]

DIRECTIONS = ("fwd", "bwd", "fwdbwd")


def find_record(family: str, ref: str, root: Path | None = None, ideas_too: bool = False) -> dict:
    """The record ``ref`` of ``family``: a path to a record file, a record_id, or a unique
    prefix of one. Raises LadderError (one line) when nothing or more than one record
    matches (``ideas_too``: the caller also took ``ref`` as an idea, and the message lists
    the ideas), or RecordError when the file is not a valid record."""
    ref = str(ref).strip()
    as_path = Path(ref)
    if ref.endswith(".json") or as_path.is_file():
        if not as_path.is_file():
            raise LadderError(f"no record file {ref}; give a path to a record or its record_id")
        rec = records.read_record(as_path)
        if rec["family"] != family:
            raise LadderError(f"{ref} is a record of {rec['family']}, not {family}")
        return rec
    fdir = paths.family_dir(family, root)
    found = [
        p
        for folder in paths.list_ideas(family, root)
        for p in sorted((fdir / "ideas" / folder / "records").glob("*.json"))
        if ref and p.stem.startswith(ref)
    ]
    exact = [p for p in found if p.stem == ref]
    if len(exact) == 1 or len(found) == 1:
        return records.read_record((exact or found)[0])
    if not found:
        if ideas_too:
            raise LadderError(
                f"no {family} record or idea {ref!r}; give a record id (`python -m ladder "
                f"board {family} --json` lists them) or an idea "
                f"({', '.join(paths.list_ideas(family, root))})"
            )
        raise LadderError(
            f"no {family} record {ref!r}; `python -m ladder board {family} --json` lists the "
            f"record ids"
        )
    some = ", ".join(f"{p.parent.parent.name}/{p.stem}" for p in found[:4])
    if exact:  # the same full id under several ideas: only a path tells them apart
        where = ", ".join(str(p) for p in exact[:4])
        raise LadderError(
            f"record id {ref!r} of {family} is in more than one idea's records ({some}); "
            f"give the record's path ({where})"
        )
    raise LadderError(f"record {ref!r} of {family} is ambiguous ({some}); give more of the id")


def resolve_side(family: str, ref: str, root: Path | None, device: str | None) -> dict:
    """A side of a comparison: a record (see :func:`find_record`) or an idea (number, name or
    slug), which stands for its best record on ``device`` (default the family's target).
    Raises LadderError when an idea has no record there."""
    try:
        folder = paths.resolve_idea(family, ref, root)
    except paths.UnknownIdea:
        return find_record(family, ref, root, ideas_too=True)
    from ladder.board import best_record

    fam = paths.load_family(family, root)
    dev = str(fam.TARGET_DEVICE) if device is None else device
    recs = [
        r
        for r in records.load_idea_records(paths.family_dir(family, root) / "ideas" / folder)
        if dev.lower() in r["device"]["name"].lower()
    ]
    code_of = records.current_code_sha_of(family, root)
    rec, _ = best_record(recs, lambda r: r["code_sha"] == code_of(folder), records.rank_shapes(fam))
    if rec is None:
        raise LadderError(
            f"idea {folder} has no record on a device matching {dev!r}; bench it, or pass "
            f"--device '' for any device"
        )
    return rec


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _tbps(min_bytes: int, ms: float) -> float:
    return min_bytes / (ms * 1e-3) / 1e12


def rank_line(rec: dict, shapes: tuple[str, ...]) -> str | None:
    """The line printed under a passed record of a family that ranks on more than prod
    (``shapes``: its :func:`ladder.records.rank_shapes`): its rank ratio, the score the
    winner ranks it by, or why it has none (a rank shape lacks fwd and bwd timing, so it
    cannot win). None for a family ranking on prod alone, or a record that did not pass."""
    if tuple(shapes) == ("prod",) or rec.get("status") != "passed":
        return None
    names = ", ".join(shapes)
    score = records.rank_score(rec, shapes)
    if score is None:
        return (
            f"no rank ratio: this record does not time fwd and bwd at every rank shape "
            f"({names}), so it cannot win; bench with `--shapes {','.join(shapes)}` or "
            "`--shapes all`"
        )
    return f"rank ratio (geometric mean of the fwd + bwd ratios at {names}): {score:.3f}"


def render_show(rec: dict, console: Any, rank_shapes: tuple[str, ...] = ("prod",)) -> None:
    """Print one record: what was benched, then per shape its errors and its timings, its
    prod ratio and, for a family ranking on more shapes (``rank_shapes``), its rank ratio
    (:func:`rank_line`)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    dev = rec["device"]
    head = [
        f"{rec['family']}/{rec['idea']} record {rec['record_id']}: {rec['status']}",
        f"created {rec['created']}  commit {(rec['commit'] or 'none')[:12]}"
        f"{' (dirty)' if rec['dirty'] else ''}  code {rec['code_sha'][:12]} (unchanged since "
        f"{rec['code_unchanged_since']})",
        f"device {dev['name']} (sm {dev['capability']}, driver {dev['driver']})  copy ceiling "
        f"{_fmt(rec['copy_ceiling_TBps'], '.3f')} TB/s",
        "versions " + ", ".join(f"{k} {v}" for k, v in rec["versions"].items()),
        "knobs " + (", ".join(f"{k}={v}" for k, v in rec["knobs"].items()) or "none"),
    ]
    if rec.get("seed") is not None:
        head.append(f"seed {rec['seed']}  shapes {rec.get('shape_set', '?')}")
    for line in head:
        console.print(Text(line), overflow="fold")
    if rec.get("error"):
        console.print(Text(f"error: {rec['error']}"), overflow="fold")
    errs = Table(title="errors vs the fp64 oracle (relative L2)", box=box.SIMPLE_HEAD)
    for col in ("shape", "output", "idea", "fla", "ratio", "ok"):
        errs.add_column(col, justify="left" if col in ("shape", "output") else "right")
    times = Table(title="median ms (ratio = fla / idea)", box=box.SIMPLE_HEAD)
    for col in ("shape", "dir", "idea ms", "fla ms", "ratio", "TB/s", "% copy"):
        times.add_column(col, justify="left" if col in ("shape", "dir") else "right")
    for s in rec["shapes"]:
        c = s["correctness"]
        for out, err in c["candidate_err"].items():
            errs.add_row(
                s["name"],
                out,
                _fmt(err, ".3e"),
                _fmt(c["baseline_err"].get(out), ".3e"),
                _fmt(c["err_ratio"].get(out), ".3f"),
                "yes" if c["passed"] else "NO",
            )
            p = (c.get("pooled") or {}).get(out)
            if p:  # judged on errors pooled over seeds (ladder.check)
                errs.add_row(
                    s["name"],
                    f"{out} pooled over {p['seeds']} seeds",
                    _fmt(p.get("candidate_err"), ".3e"),
                    _fmt(p.get("baseline_err"), ".3e"),
                    _fmt(p.get("err_ratio"), ".3f"),
                    "",
                )
        for d in DIRECTIONS:
            t = s.get(d)
            if not t:
                continue
            cand = t["candidate_ms"]["median"]
            mb = t.get("min_bytes")
            times.add_row(
                s["name"],
                d,
                f"{cand:.4f}",
                f"{t['baseline_ms']['median']:.4f}",
                f"{t['ratio']:.3f}",
                "-" if mb is None else f"{_tbps(mb, cand):.3f}",
                _fmt(
                    None if t.get("fraction_of_copy") is None else 100 * t["fraction_of_copy"],
                    ".1f",
                ),
            )
    console.print(errs)
    if times.row_count:
        console.print(times)
    dims = ", ".join(_shape_label(s) for s in rec["shapes"])
    if dims:
        console.print(Text(f"shapes: {dims}"), overflow="fold")
    score = records.prod_ratio(rec)
    if score is not None:
        console.print(f"prod ratio (fwd + bwd): {score:.3f}")
    rank = rank_line(rec, rank_shapes)
    if rank is not None:
        console.print(Text(rank), overflow="fold")


def _shape_label(shape: dict) -> str:
    """'prod B16 T8192 D2048 W4': a record shape's name and its scalar fields (whatever the
    family stores; upper-case size fields as B16, others as key=value), results left out."""
    parts = [str(shape.get("name"))]
    for key, val in shape.items():
        if key == "name" or key in records.SHAPE_RESULT_KEYS or key == "host_us":
            continue
        if val is None or val is False or isinstance(val, (dict, list)):
            continue
        if key.isupper() and isinstance(val, int) and not isinstance(val, bool):
            parts.append(f"{key}{val}")
        else:
            parts.append(f"{key}={val}")
    return " ".join(parts)


def _label(rec: dict) -> str:
    return f"{rec['idea']} record {rec['record_id']}"


def compare(a: dict, b: dict) -> dict[str, Any]:
    """Two records shape by shape: {"a", "b" (idea, record_id, device), "shapes": [{name,
    <dir>: {a_ms, b_ms, b_over_a}}], "only_a", "only_b" (shape names timed on one side only),
    "notes": [differences in device, versions or harness that make the times less
    comparable]}."""

    def timed(rec: dict) -> dict[str, dict]:
        return {s["name"]: s for s in rec["shapes"] if any(s.get(d) for d in DIRECTIONS)}

    ta, tb = timed(a), timed(b)
    rows = []
    for name in [n for n in ta if n in tb]:
        row: dict[str, Any] = {"name": name}
        for d in DIRECTIONS:
            sa, sb = ta[name].get(d), tb[name].get(d)
            if sa and sb:
                ma, mb = sa["candidate_ms"]["median"], sb["candidate_ms"]["median"]
                row[d] = {"a_ms": ma, "b_ms": mb, "b_over_a": mb / ma}
        rows.append(row)
    notes = []
    if a["device"]["name"] != b["device"]["name"]:
        notes.append(f"different devices: a on {a['device']['name']}, b on {b['device']['name']}")
    elif a["device"].get("driver") != b["device"].get("driver"):
        notes.append(
            f"different drivers: a {a['device'].get('driver')}, b {b['device'].get('driver')}"
        )
    for key in sorted(set(a["versions"]) | set(b["versions"])):
        va, vb = a["versions"].get(key), b["versions"].get(key)
        if va != vb:
            notes.append(f"different {key}: a {va}, b {vb}")
    if a["harness_sha"] != b["harness_sha"]:
        notes.append("different bench harness code (harness_sha)")

    def side(rec: dict) -> dict[str, Any]:
        return {
            "idea": rec["idea"],
            "record_id": rec["record_id"],
            "device": rec["device"]["name"],
            "knobs": rec["knobs"],
            "status": rec["status"],
        }

    return {
        "a": side(a),
        "b": side(b),
        "shapes": rows,
        "only_a": [n for n in ta if n not in tb],
        "only_b": [n for n in tb if n not in ta],
        "notes": notes,
    }


def render_compare(cmp: dict[str, Any], console: Any) -> None:
    """Print :func:`compare`'s result: one row per shape and direction."""
    from rich.text import Text

    a, b = cmp["a"], cmp["b"]
    console.print(Text(f"a: {a['idea']} record {a['record_id']} ({a['device']})"), overflow="fold")
    console.print(Text(f"b: {b['idea']} record {b['record_id']} ({b['device']})"), overflow="fold")
    for note in cmp["notes"]:
        console.print(Text(f"note: {note}"), overflow="fold")
    if not cmp["shapes"]:
        console.print("no shape is timed in both records; nothing to compare")
    else:
        _compare_table(cmp, console)
    for side in ("a", "b"):
        if cmp[f"only_{side}"]:
            console.print(
                Text(f"only in {side}: {', '.join(cmp[f'only_{side}'])} (not compared)"),
                overflow="fold",
            )


def _compare_table(cmp: dict[str, Any], console: Any) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title="candidate median ms (b / a < 1: b is faster)", box=box.SIMPLE_HEAD)
    for col in ("shape", "dir", "a ms", "b ms", "b / a"):
        table.add_column(col, justify="left" if col in ("shape", "dir") else "right")
    for row in cmp["shapes"]:
        for d in DIRECTIONS:
            if d in row:
                t = row[d]
                table.add_row(
                    row["name"], d, f"{t['a_ms']:.4f}", f"{t['b_ms']:.4f}", f"{t['b_over_a']:.3f}"
                )
    console.print(table)
