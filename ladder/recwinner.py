"""The winner of a family: its promotable record with the best rank score (the prod ratio, or
the geometric mean of the ratios at the family's RANK_SHAPES), and why a record that would
have ranked above it is stale (docs/DESIGN.md "Bench records").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from ladder import paths
from ladder.contract import missing_promote_cases, promote_cases, static_idea_cases
from ladder.paths import LadderError
from ladder.recstore import created_at, load_records

__all__ = [
    "NoWinner",
    "Winner",
    "current_cases_of",
    "current_code_sha_of",
    "explain_stale",
    "is_baseline",
    "prod_ratio",
    "rank_score",
    "rank_shapes",
    "score_text",
    "shape_ratio",
    "winner",
]


class NoWinner(LadderError):
    """No promotable record; the message says why. ``lacking``: {idea folder: the cases of
    the family's PROMOTE_CASES it lacks}; ``unreadable``: idea folders whose CASES could
    not be read statically (both only for ideas that were otherwise promotable)."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        lacking: dict[str, list[str]] | None = None,
        unreadable: set[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.lacking = dict(lacking or {})
        self.unreadable = set(unreadable or ())


def _shape(rec: dict, name: str) -> dict | None:
    return next((s for s in rec.get("shapes", []) if s.get("name") == name), None)


def shape_ratio(rec: dict, name: str) -> float | None:
    """(baseline fwd + bwd medians) / (candidate fwd + bwd medians) at the record's shape
    ``name`` (> 1: faster than fla), or None when the record has no such shape with both fwd
    and bwd timed."""
    s = _shape(rec, name)
    if s is None or not s.get("fwd") or not s.get("bwd"):
        return None
    base = s["fwd"]["baseline_ms"]["median"] + s["bwd"]["baseline_ms"]["median"]
    cand = s["fwd"]["candidate_ms"]["median"] + s["bwd"]["candidate_ms"]["median"]
    return base / cand


def prod_ratio(rec: dict) -> float | None:
    """:func:`shape_ratio` at the ``prod`` shape: (baseline fwd + bwd medians) / (candidate
    fwd + bwd medians), or None when the record has no timed prod shape."""
    return shape_ratio(rec, "prod")


def rank_shapes(fam: ModuleType) -> tuple[str, ...]:
    """The shape names whose fwd+bwd ratios rank a family's ideas: its RANK_SHAPES (checked
    on load by :func:`ladder.contract.validate_family`), ("prod",) when it sets none."""
    return tuple(getattr(fam, "RANK_SHAPES", ("prod",)))


def rank_score(rec: dict, shapes: tuple[str, ...] = ("prod",)) -> float | None:
    """The score that ranks a record: the geometric mean over ``shapes`` (a family's
    :func:`rank_shapes`) of each shape's :func:`shape_ratio`; exactly :func:`prod_ratio` for
    ("prod",). None when the record lacks fwd and bwd timing at any of the shapes, or a
    shape's ratio is not a positive finite number (such a record is never promoted). Raises ValueError for an empty ``shapes``."""
    if not shapes:
        raise ValueError("rank_score: shapes is empty; pass the family's rank_shapes(fam)")
    ratios = [shape_ratio(rec, name) for name in shapes]
    if any(r is None or not (0 < r < math.inf) for r in ratios):
        return None  # untimed, or timings whose sums overflow: no score
    if len(ratios) == 1:
        return ratios[0]
    return math.exp(math.fsum(math.log(r) for r in ratios) / len(ratios))


def score_text(score: float, shapes: tuple[str, ...] = ("prod",)) -> str:
    """A rank score as printed beside a winner: "prod ratio 1.500" for ("prod",), else
    "rank ratio 1.500 over prod, a, b" (the geometric mean over those shapes)."""
    if tuple(shapes) == ("prod",):
        return f"prod ratio {score:.3f}"
    return f"rank ratio {score:.3f} over {', '.join(shapes)}"


def _no_timing_label(shapes: tuple[str, ...]) -> str:
    if tuple(shapes) == ("prod",):
        return "no prod timing"
    return f"no timing at every rank shape ({', '.join(shapes)})"


@dataclass
class Winner:
    """The promotable record with the best rank score. idea: the idea folder name. score:
    its :func:`rank_score` over ``rank_shapes`` (the family's; ("prod",): the prod ratio).
    passed_over: one line per stale record that would have ranked above it, saying which
    files made it stale (empty when staleness is judged at a commit, as the vendor does)."""

    record: dict
    idea: str
    record_path: Path
    score: float
    passed_over: list[str] = field(default_factory=list)
    rank_shapes: tuple[str, ...] = ("prod",)


def is_baseline(folder: str) -> bool:
    """Whether an idea folder is the family's baseline benched as an idea (``000-*``): shown
    on the board, never a winner."""
    return paths.IDEA_RE.match(folder) is not None and folder[:3] == "000"


def explain_stale(rec: dict, idea_dir: Path) -> str:
    """Why a record's code_sha differs from its idea's code now, in one line: the files that
    differ (changed, added, removed) between the record's commit and the working tree, when
    git can tell; else why it cannot."""
    from ladder import codehash

    commit = rec.get("commit")
    try:
        now = codehash.idea_files_from_dir(idea_dir)
    except codehash.CodeHashError as exc:
        return f"code differs from the record's ({exc})"
    if not commit:
        return "code differs from the record's (it names no commit, so the files are unknown)"
    try:
        then = codehash.idea_files_in_history(idea_dir, commit)
    except codehash.CodeHashError:
        return (
            f"code differs from the record's (its commit {commit[:12]} is not in this "
            f"repository, so the files are unknown)"
        )
    if codehash.code_sha(then) != rec.get("code_sha"):
        return (
            f"code differs from the record's (it was benched on code other than commit "
            f"{commit[:12]}'s, so the files are unknown)"
        )
    diff = codehash.diff_files(then, now)
    if not diff:  # cannot happen while both sides hash the same files; said plainly if it does
        return f"code_sha differs from the record's, though no file differs from {commit[:12]}"
    return f"{', '.join(diff)} since commit {commit[:12]}"


def current_code_sha_of(family: str, root: Path | None = None) -> Callable[[str], str]:
    """A cached function: idea folder name -> code_sha of its working-tree files."""
    from ladder import codehash

    cache: dict[str, str] = {}
    fdir = paths.family_dir(family, root)

    def of(folder: str) -> str:
        if folder not in cache:
            cache[folder] = codehash.code_sha(codehash.idea_files_from_dir(fdir / "ideas" / folder))
        return cache[folder]

    return of


def current_cases_of(family: str, root: Path | None = None) -> Callable[[str], tuple | None]:
    """A cached function: idea folder name -> the cases its working-tree kernel.py declares
    (:func:`ladder.contract.static_idea_cases`; None when unreadable)."""
    fdir = paths.family_dir(family, root)
    cache: dict[str, tuple | None] = {}

    def of(folder: str) -> tuple | None:
        if folder not in cache:
            try:
                src = (fdir / "ideas" / folder / "kernel.py").read_bytes()
            except OSError:
                src = None
            cache[folder] = None if src is None else static_idea_cases(src)
        return cache[folder]

    return of


def winner(
    family: str,
    root: Path | None = None,
    *,
    device: str | None = None,
    code_sha_of: Callable[[str], str] | None = None,
    cases_of: Callable[[str], tuple | None] | None = None,
    explain: Callable[[dict], str] | None = None,
) -> Winner:
    """The family's winner among its records.

    Promotable: not the baseline idea (``000-*``), status "passed", dirty false, device name
    containing ``device`` (case-insensitive; default the family's TARGET_DEVICE), fwd and
    bwd timed at every rank shape (:func:`rank_shapes`: the family's RANK_SHAPES, else
    prod), code_sha equal to ``code_sha_of(idea folder name)`` (default: the working tree's
    code), every case of the family's PROMOTE_CASES among the idea's CASES
    (``cases_of(idea folder name)``, default: its working-tree kernel.py, read statically;
    pass the lookup that matches ``code_sha_of``), and faster than fla at prod and overall
    (prod ratio and rank score above 1: a slower idea is research, not a release). Best:
    highest :func:`rank_score` (the prod ratio for a family without RANK_SHAPES); ties go to
    the earliest created, then the smallest record_id. explain(record) says why a stale
    record is stale (default: :func:`explain_stale` against the working tree when
    ``code_sha_of`` is the default, else nothing). Raises NoWinner with the reason each
    record was passed over.
    """
    recs = load_records(family, root)
    fam = paths.load_family(family, root)
    if device is None:
        device = str(fam.TARGET_DEVICE)
    required = promote_cases(fam)
    ranked_on = rank_shapes(fam)
    no_timing = _no_timing_label(ranked_on)
    sha_of = code_sha_of or current_code_sha_of(family, root)
    ideas_cases = cases_of or current_cases_of(family, root)
    if explain is None and code_sha_of is None:
        fdir = paths.family_dir(family, root)

        def explain(rec: dict) -> str:
            return explain_stale(rec, fdir / "ideas" / Path(rec["_path"]).parent.parent.name)

    reasons = {
        "baseline": 0,
        "not passed": 0,
        "dirty": 0,
        "other device": 0,
        no_timing: 0,
        "stale": 0,
        "not faster than fla": 0,
        "missing a case the family promotes": 0,
        "with CASES not a literal tuple in kernel.py": 0,
    }
    lacking: dict[str, list[str]] = {}
    unreadable: set[str] = set()
    best: tuple[tuple, dict, float] | None = None
    stale: list[tuple[float, dict]] = []
    for rec in recs:
        if is_baseline(Path(rec["_path"]).parent.parent.name):
            reasons["baseline"] += 1
            continue
        if rec["status"] != "passed":
            reasons["not passed"] += 1
            continue
        if rec["dirty"]:
            reasons["dirty"] += 1
            continue
        if device.lower() not in rec["device"]["name"].lower():
            reasons["other device"] += 1
            continue
        score = rank_score(rec, ranked_on)
        if score is None:
            reasons[no_timing] += 1
            continue
        folder = Path(rec["_path"]).parent.parent.name
        if rec["code_sha"] != sha_of(folder):
            reasons["stale"] += 1
            stale.append((score, rec))
            continue
        prod = score if ranked_on == ("prod",) else prod_ratio(rec)
        if not (score > 1.0 and prod > 1.0):  # promoting it would make the package slower
            reasons["not faster than fla"] += 1
            continue
        if required:
            declared = ideas_cases(folder)
            if declared is None:
                reasons["with CASES not a literal tuple in kernel.py"] += 1
                unreadable.add(folder)
                continue
            missing = missing_promote_cases(required, declared)
            if missing:
                reasons["missing a case the family promotes"] += 1
                lacking[folder] = missing
                continue
        key = (-score, created_at(rec), rec["record_id"])
        if best is None or key < best[0]:
            best = (key, rec, score)
    if best is None:
        if not recs:
            raise NoWinner(
                f"no {family} records yet; bench an idea on the GPU: "
                f"`python -m ladder bench {family} <idea>`"
            )
        parts = [f"{n} {label}" for label, n in reasons.items() if n]
        why = "; ".join(_stale_lines(stale, explain, limit=3, shapes=ranked_on))
        cases = "; ".join(
            [f"{f} lacks {', '.join(c)}" for f, c in sorted(lacking.items())]
            + [
                f"{f}'s kernel.py: CASES must be a literal tuple of strings"
                for f in sorted(unreadable)
            ]
        )
        if cases:
            cases = (
                "; the family promotes only ideas with every case of PROMOTE_CASES = "
                f"{', '.join(required)} ({cases})"
            )
        fixable = {
            "missing a case the family promotes",
            "with CASES not a literal tuple in kernel.py",
        }
        advice = (
            "; add the missing cases to an idea (CASES and the case entry points), then bench it"
            if all(label in fixable for label, n in reasons.items() if n and label != "baseline")
            else f"; commit, then `python -m ladder bench {family} <idea>` on a clean tree"
        )
        if reasons[no_timing] and ranked_on != ("prod",):
            advice += (
                f"; one record must time every rank shape (RANK_SHAPES): bench with "
                f"`--shapes {','.join(ranked_on)}` or `--shapes all`"
            )
        raise NoWinner(
            f"no promotable {family} record on a device matching {device!r} among {len(recs)} "
            f"({', '.join(parts)}){'; ' + why if why else ''}{cases}{advice}",
            lacking,
            unreadable,
        )
    _, rec, score = best
    path = Path(rec["_path"])
    above = [(s, r) for s, r in stale if s > score]
    return Winner(
        record=rec,
        idea=path.parent.parent.name,
        record_path=path,
        score=score,
        passed_over=_stale_lines(above, explain, limit=5, shapes=ranked_on),
        rank_shapes=ranked_on,
    )


def _stale_lines(
    stale: list[tuple[float, dict]],
    explain: Callable[[dict], str] | None,
    *,
    limit: int,
    shapes: tuple[str, ...],
) -> list[str]:
    """'<idea> record <id> (prod 3.040x) is stale: <why>' ('(rank 3.040x over 3 shapes)'
    when ``shapes``, the rank shapes, are not just prod) for the best-scoring stale records,
    one per idea, at most ``limit``; [] without an explainer."""
    if explain is None:
        return []
    out, seen = [], set()
    for score, rec in sorted(stale, key=lambda sr: -sr[0]):
        folder = Path(rec["_path"]).parent.parent.name
        if folder in seen:
            continue
        seen.add(folder)
        what = (
            f"prod {score:.3f}x"
            if shapes == ("prod",)
            else f"rank {score:.3f}x over {len(shapes)} shapes"
        )
        out.append(f"{folder} record {rec['record_id']} ({what}) is stale: {explain(rec)}")
        if len(out) == limit:
            break
    return out
