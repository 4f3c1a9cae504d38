"""``ladder new`` and ``ladder new-family``: scaffold an idea folder, or a whole family.

A new family starts as ``kernels/<family>/family.py`` with every hook of the family protocol
(ladder.contract) raising NotImplementedError with what to write, and ``ideas/000-fla/``
delegating to the family's BASELINE; the family's first idea from ``ladder new`` is 001.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

from ladder import paths
from ladder.paths import LadderError

__all__ = ["SLUG_RE", "new_family", "new_idea"]

SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*\Z")  # \Z: no trailing newline
SLUG_MAX = 64  # folder names stay well inside every file system's limit
LINE_LENGTH = 100  # pyproject.toml's [tool.ruff] line-length, which `make lint` checks


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
        head = f"def {ep}({params}):"
        if len(head) > LINE_LENGTH:  # one parameter per line, as `ruff format` leaves it
            head = "\n".join([f"def {ep}(", *(f"    {p}," for p in args[ep]), "):"])
        lines += [
            "",
            "",
            head,
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
    """Create ``ideas/<NNN>-<slug>/`` with NNN one past the highest number in use (001 in
    a family with no ideas: 000 is the baseline's):
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
    if re.match(r"^\d+(?:-|\Z)", slug):
        raise LadderError(
            f"slug {slug!r} reads as an idea number or a numbered folder name, so the idea could "
            f"not be named by its slug; start it with a letter, e.g. `python -m ladder new "
            f"{family} v{slug}`"
        )
    existing = paths.list_ideas(family, root)
    for folder in existing:
        if folder[4:] == slug:
            raise LadderError(f"slug {slug!r} is taken by {folder}; pick another slug")
    number = max((int(f[:3]) for f in existing), default=0) + 1  # 000 is the baseline
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


def _family_py(name: str) -> str:
    fwd, bwd = f"{name}_fwd", f"{name}_bwd"
    up = name.upper()
    todo = f"ladder/kernels/{name}/family.py"
    return f'''"""The {name} family contract: <one line: the op, and fla's module it replaces>.

Entry points every idea's ``kernel.py`` exports (shapes, dtypes, what they return):

    {fwd}(x) -> (y, ctx)
    {bwd}(ctx, dy) -> (dx,)

Every hook below is the family protocol (docs/DESIGN.md "The family contract"); replace each
NotImplementedError with the real thing. Importable without a GPU: import fla only inside
functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FAMILY = "{name}"
ENTRY_POINTS = ("{fwd}", "{bwd}")
ENTRY_POINT_ARGS = {{"{fwd}": ("x",), "{bwd}": ("ctx", "dy")}}
TARGET_DEVICE = "H200"

# Output name -> max relative L2 error vs the reference, in the order run() returns them.
TOLERANCES = {{"y": 1e-2, "dx": 1e-2}}
ERR_RATIO_MAX = 1.10

# Case name -> one line; an idea's kernel.py declares the ones it implements in CASES.
CASES = {{"dense": "the plain call: no optional arguments"}}

# Knob values for Triton's CPU interpreter (`ladder check --interpret`); knobs are
# {up}_<NAME> env reads in the ideas.
INTERPRET_KNOBS: dict[str, str] = {{}}

# Which idea module becomes which package module when the winner is vendored.
VENDOR = {{"package": "kernel_fun.{name}", "modules": {{}}}}


@dataclass(frozen=True)
class Shape:
    """A named problem. <the dimensions, in the field's terms (B, T, H, K, V, D, ...)>."""

    name: str
    B: int
    T: int
    case: str = "dense"


SHAPES: dict[str, list[Shape]] = {{
    "prod": [Shape("prod", 1, 8192)],  # the production call
    "sweep": [],
    "small": [Shape("s-b2-t37", 2, 37)],  # tiny, for Triton's CPU interpreter
}}


def _todo(what: str) -> NotImplementedError:
    return NotImplementedError(f"{todo}: {{what}} is not written yet")


def make_inputs(shape: Shape, device: Any, seed: int) -> tuple:
    """Fresh random inputs for ``shape`` on ``device`` from ``seed`` (never zeros), the
    output gradients included."""
    raise _todo("make_inputs")


def reference(*inputs: Any) -> tuple:
    """The oracle: one output per TOLERANCES key, in that order, in float64."""
    raise _todo("reference")


class _Baseline:
    """fla's kernels under the entry point names, called the way fla calls them."""

    @staticmethod
    def {fwd}(x: Any) -> Any:
        raise _todo("BASELINE.{fwd}")

    @staticmethod
    def {bwd}(ctx: Any, dy: Any) -> Any:
        raise _todo("BASELINE.{bwd}")


BASELINE = _Baseline()


def run(impl: Any, inputs: tuple, poison: Any) -> tuple:
    """impl's forward then backward, once; the outputs in TOLERANCES order. Call
    poison([(shape, dtype), ...]) with the outputs' sizes before each direction."""
    raise _todo("run")


def timed(impl: Any, inputs: tuple) -> dict:
    """{{"fwd", "bwd", "fwdbwd"}}: zero-argument callables; any setup (leaves requiring
    grad, the forward whose context the backward needs) happens here, untimed."""
    raise _todo("timed")


def min_bytes(shape: Shape, direction: str) -> int:
    """The fewest HBM bytes "fwd" / "bwd" must move."""
    raise _todo("min_bytes")
'''


def _baseline_kernel_py(name: str, entry_points: tuple[str, ...], args: dict) -> str:
    lines = [
        f'"""{name}/000 fla: the family\'s baseline (fla\'s kernels) benched as an idea."""',
        "",
        "from __future__ import annotations",
        "",
        f"from ladder.kernels.{name} import family",
        "",
        "CASES = tuple(family.CASES)  # the baseline implements every case",
        "__all__ = [" + ", ".join(f'"{e}"' for e in entry_points) + "]",
    ]
    for ep in entry_points:
        params = ", ".join(args[ep])
        lines += [
            "",
            "",
            f"def {ep}({params}):",
            f'    """family.BASELINE.{ep}."""',
            f"    return family.BASELINE.{ep}({params})",
        ]
    return "\n".join(lines) + "\n"


def new_family(name: str, root: Path | None = None) -> Path:
    """Create ``kernels/<name>/`` with ``__init__.py``, a ``family.py`` skeleton holding every
    hook of the family protocol (each raising NotImplementedError naming itself) and
    ``ideas/000-fla/`` (kernel.py delegating to BASELINE, NOTES.md, records/). Returns the
    family folder. Raises LadderError for a name that is not a lower-case identifier, a
    Python keyword or a family that exists; nothing is written then."""
    if not paths.FAMILY_RE.match(name) or len(name) > SLUG_MAX:
        raise LadderError(
            f"family name {name!r} must be a short lower-case identifier (letters, digits, "
            f"'_'), e.g. `python -m ladder new-family gdn`"
        )
    if keyword.iskeyword(name):
        raise LadderError(
            f"family name {name!r} is a Python keyword, so `ladder.kernels.{name}` and "
            f"`kernel_fun.{name}` could not be imported by name; pick another name"
        )
    kdir = paths.kernels_dir(root)
    dest = kdir / name
    if dest.exists():
        raise LadderError(f"{dest} exists; pick another name, or edit its family.py")
    entry_points = (f"{name}_fwd", f"{name}_bwd")
    args = {entry_points[0]: ("x",), entry_points[1]: ("ctx", "dy")}
    idea = dest / "ideas" / "000-fla"
    (idea / "records").mkdir(parents=True)
    (dest / "__init__.py").write_text(f'"""The {name} family."""\n', encoding="utf-8")
    (dest / "family.py").write_text(_family_py(name), encoding="utf-8")
    (idea / "kernel.py").write_text(_baseline_kernel_py(name, entry_points, args), encoding="utf-8")
    (idea / "NOTES.md").write_text(
        f"# {name}/000-fla\n\nfla's own kernels (family.BASELINE) benched as an idea: the row "
        "every other idea is read against, and the noise floor of the harness (a ratio near "
        "1).\n",
        encoding="utf-8",
    )
    (idea / "records" / ".gitkeep").write_text("", encoding="utf-8")
    return dest
