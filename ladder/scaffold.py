"""``ladder new``: scaffold the next numbered idea folder of a family."""

from __future__ import annotations

import re
from pathlib import Path

from ladder import paths
from ladder.paths import LadderError

__all__ = ["SLUG_RE", "new_idea"]

SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*\Z")  # \Z: no trailing newline
SLUG_MAX = 64  # folder names stay well inside every file system's limit


def _kernel_py(family: str, folder: str, entry_points: tuple[str, ...], args: dict) -> str:
    lines = [
        f'"""{family}/{folder[:3]} {folder[4:]}: <one line: what this idea changes>.',
        "",
        f"Exports the {family} entry points (ladder/kernels/{family}/family.py). Env knobs, if",
        'any, are module-level constants read once (docs/DESIGN.md "Ideas and knobs").',
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "__all__ = [" + ", ".join(f'"{e}"' for e in entry_points) + "]",
    ]
    for ep in entry_points:
        params = ", ".join(args.get(ep, ("*args",)))
        lines += [
            "",
            "",
            f"def {ep}({params}):",
            f'    """See family.py for shapes, dtypes and the outputs of {ep}."""',
            f'    raise NotImplementedError("{family}/{folder}: {ep} is not written yet")',
        ]
    return "\n".join(lines) + "\n"


def _notes_md(family: str, folder: str) -> str:
    return (
        f"# {family}/{folder}\n\n"
        "## Hypothesis\n\nWhat limits the current best, and what this idea changes about it.\n\n"
        "## Prediction\n\nThe number expected before measuring (prod fwd/bwd ms, fraction of "
        "the copy ceiling), and why.\n\n"
        "## Result\n\nWhat `ladder bench` measured (record ids), and whether the prediction "
        "held.\n\n"
        "## Dead ends\n\nVariants tried and dropped, with the measurement that killed each.\n"
    )


def new_idea(family: str, slug: str, root: Path | None = None) -> Path:
    """Create ``ideas/<NNN>-<slug>/`` with NNN one past the highest number in use:
    kernel.py (the family's ENTRY_POINTS raising NotImplementedError), NOTES.md (Hypothesis,
    Prediction, Result, Dead ends) and records/.gitkeep. Returns the folder.

    Raises UnknownFamily, or LadderError for a slug that is not kebab-case, a slug already
    used, or no number left.
    """
    fam = paths.load_family(family, root)
    if len(slug) > SLUG_MAX:
        raise LadderError(f"slug is {len(slug)} characters long; keep it to {SLUG_MAX} or fewer")
    if not SLUG_RE.match(slug):
        raise LadderError(
            f"slug {slug!r} is not kebab-case (lower-case letters and digits joined by '-'); "
            f"e.g. `python -m ladder new {family} strip-two-pass`"
        )
    existing = paths.list_ideas(family, root)
    for folder in existing:
        if folder[4:] == slug:
            raise LadderError(f"slug {slug!r} is taken by {folder}; pick another slug")
    number = max((int(f[:3]) for f in existing), default=-1) + 1
    if number > 999:
        raise LadderError(f"family {family} has used every idea number up to 999")
    folder = f"{number:03d}-{slug}"
    dest = paths.family_dir(family, root) / "ideas" / folder
    args = dict(getattr(fam, "ENTRY_POINT_ARGS", {}))
    (dest / "records").mkdir(parents=True)
    (dest / "kernel.py").write_text(
        _kernel_py(family, folder, tuple(fam.ENTRY_POINTS), args), encoding="utf-8"
    )
    (dest / "NOTES.md").write_text(_notes_md(family, folder), encoding="utf-8")
    (dest / "records" / ".gitkeep").write_text("", encoding="utf-8")
    return dest
